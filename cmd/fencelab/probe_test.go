package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/postgres/pgtest"
)

// TestProbe_PlaysTheArticleThroughTheAPI: `probe --play` plays both
// orderings and a check of ours on a real server and passes; on a server
// that refuses readers' statements the check is named and the exit is 1;
// and it leaves no session open behind it.
func TestProbe_PlaysTheArticleThroughTheAPI(t *testing.T) {
	t.Parallel()
	dsn := "DATABASE_URL=" + pgtest.DSN(t)
	s := serve(t, dsn)
	out, errOut, code := fencelab(t, nil, "probe", "--url", s.url, "--play", "--timeout", "80s")
	if code != 0 {
		t.Fatalf("probe --play on a correct server: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"new-owner-first    rejected | rejected | epoch 2",
		"zombie-first       accepted, then superseded | rejected | epoch 2",
		"check (ours)       Your solution passes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("probe --play printed no %q:\n%s", want, out)
		}
	}
	var stats struct{ Sessions int }
	resp, err := http.Get(s.url + "/api/stats")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&stats)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if stats.Sessions != 0 {
		t.Errorf("probe --play left %d sessions open", stats.Sessions)
	}

	closed := serveWith(t, []string{"--no-custom-sql"}, dsn)
	out, errOut, code = fencelab(t, nil, "probe", "--url", closed.url, "--play", "--timeout", "80s")
	if code != 1 || !strings.Contains(errOut, "not as the article says: check") || !strings.Contains(out, "zombie-first       accepted, then superseded") {
		t.Errorf("probe --play on a server that refuses checks: exit %d\n%s%s", code, out, errOut)
	}

	for _, args := range [][]string{
		{"--play", "--timeout", "11m"},
		{"--play", "--url", "ftp://x"},
		{"--play", "--timeout", "-1s"},
	} {
		if _, errOut, code := fencelab(t, nil, append([]string{"probe"}, args...)...); code != 2 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("probe %v: exit %d, %q; want 2 and one line", args, code, errOut)
		}
	}
}
