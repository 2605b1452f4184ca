package api_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/servertest"
	"github.com/fencelab/fencelab/web"
)

// TestIDs_AMalformedSessionIDIsA404AndNoLogLine: an id that cannot be a
// session id (a NUL, a byte that is not UTF-8, a lone surrogate, an id too
// long or too short) is a 404 with a sentence on every route that takes
// one, the page's and the socket's too, and it never reaches Postgres: not
// one warning is logged, however many are sent.
func TestIDs_AMalformedSessionIDIsA404AndNoLogLine(t *testing.T) {
	t.Parallel()
	var logged servertest.LogBuffer
	ts := startServer(t, func(c *api.Config) {
		c.Log = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo}))
		c.PagesFunc = web.Register(web.Options{})
	})
	real := ts.newSession()
	for _, id := range []string{"%00", "%FF", "%ED%A0%80", "abc%00def", "x" + strings.Repeat("%FF", 30), strings.Repeat("a", 65), strings.Repeat("a", 4000),
		real.ID[:21] + "%00", real.ID + "a", real.ID[:21] + "%FF"} {
		for _, p := range []string{"/api/sessions/" + id, "/api/sessions/" + id + "/events", "/api/sessions/" + id + "/events.ndjson",
			"/api/sessions/" + id + "/ws", "/api/sessions/" + id + "/runs/r1/transcript.sql", "/s/" + id} {
			a := ts.do("GET", p, "", "", "")
			if a.Status != http.StatusNotFound {
				t.Errorf("GET %.60s: %d %.200s, want 404", p, a.Status, a.Body)
			}
			if strings.HasPrefix(p, "/api/") && a.errText() == "" {
				t.Errorf("GET %.60s: no sentence: %.200s", p, a.Body)
			}
		}
		if a := ts.do("POST", "/api/sessions/"+id+"/commands", real.Token, "application/json", `{"action":"step"}`); a.Status != http.StatusNotFound {
			t.Errorf("POST %.60s/commands: %d %.200s, want 404", id, a.Status, a.Body)
		}
	}
	if a := ts.do("GET", "/api/sessions/"+real.ID, "", "", ""); a.Status != http.StatusOK {
		t.Fatalf("a real session: %d %s", a.Status, a.Body)
	}
	for _, line := range strings.Split(logged.String(), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("a malformed id was logged: %s", line)
		}
	}
}
