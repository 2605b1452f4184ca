package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/web"
)

// TestExports_NewestRunIsWholeOnceTheLogDropsItsStart: a session whose log
// has dropped its first events still answers since=0 — every event it
// keeps, with dropped_before (and X-Fencelab-Dropped-Before) saying where
// they start — and gives its newest run, all of whose events it keeps,
// whole: /events?run=, /events.ndjson?run=, transcript.sql and
// replay.html, none marked as cut. A resume into what is gone is a 410
// that says so; a socket since=0 starts at the oldest event kept.
func TestExports_NewestRunIsWholeOnceTheLogDropsItsStart(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) {
		c.Limits.MaxEvents = 400
		c.PagesFunc = web.Register(web.Options{})
	})
	s := ts.newSession()
	sp := "/api/sessions/" + s.ID
	live, err := ts.Sessions.Get(s.ID)
	if err != nil {
		t.Fatal(err)
	}

	// Fill the log past what it keeps: free play, a job at a time.
	old := s.cmd(`{"action":"run","ordering":"free-play","lease_ms":200}`).Run
	deadline := time.Now().Add(60 * time.Second)
	for live.Log.Dropped("") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the log still keeps its first event after a minute (%d events)", live.Log.LastSeq())
		}
		s.try(`{"action":"add_job"}`)
		time.Sleep(20 * time.Millisecond)
	}
	s.cmd(`{"action":"reset"}`)
	r := s.cmd(`{"action":"run","ordering":"zombie-first","mode":"auto","lease_ms":300,"pace_ms":0}`).Run
	var verdict bool
	for deadline := time.Now().Add(60 * time.Second); !verdict; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no verdict after a minute")
		}
		evs, _ := live.Log.Since(live.Log.Dropped(r), r, 0)
		for _, e := range evs {
			verdict = verdict || e.Kind == protocol.KindVerdict
		}
	}
	// The run's last events (its workers' exits, its end) come after the
	// verdict, and some after its end is marked (its last state follows
	// the workers' reaping and its schemas' drop): the exports below are
	// compared once it has ended and its events have stopped coming for a
	// second. (Read at the end's mark alone, a late event came between
	// two reads under -race, on a fresh clone: 43 events against 42.)
	count := func() int {
		evs, _ := live.Log.Since(live.Log.Dropped(r), r, 0)
		return len(evs)
	}
	last, quietFrom := -1, time.Now()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if n := count(); n != last {
			last, quietFrom = n, time.Now()
		}
		if info, err := live.Run(r); err == nil && info.Ended != nil && time.Since(quietFrom) > time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run has not ended, and gone quiet, 30 s after its verdict")
		}
	}
	if d := live.Log.Dropped(r); d != 0 {
		t.Fatalf("the test needs run %s whole in the log, but its events before %d are dropped: raise MaxEvents", r, d)
	}
	gone := live.Log.Dropped("")

	// The whole log since 0: what is kept, and where it starts.
	var all struct {
		Events        []protocol.Event
		DroppedBefore int64 `json:"dropped_before"`
	}
	a := ts.do("GET", sp+"/events?since=0&limit=10000", "", "", "")
	if a.Status != http.StatusOK {
		t.Fatalf("events since 0 of a log that dropped its start: %d %s", a.Status, a.Body)
	}
	a.json(t, &all)
	if all.DroppedBefore <= gone || len(all.Events) == 0 || all.Events[0].Seq != all.DroppedBefore || a.Header.Get("X-Fencelab-Dropped-Before") != strconv.FormatInt(all.DroppedBefore, 10) {
		t.Fatalf("events since 0: dropped_before %d, header %q, first seq %d; the log dropped up to %d",
			all.DroppedBefore, a.Header.Get("X-Fencelab-Dropped-Before"), all.Events[0].Seq, gone)
	}
	var want []int64
	for _, e := range all.Events {
		if e.Run == r {
			want = append(want, e.Seq)
		}
	}
	nd := ts.do("GET", sp+"/events.ndjson", "", "", "")
	if nd.Status != http.StatusOK || nd.Header.Get("X-Fencelab-Dropped-Before") == "" || bytes.Count(nd.Body, []byte("\n")) < len(all.Events) {
		t.Fatalf("events.ndjson of a log that dropped its start: %d, header %q, %d lines", nd.Status, nd.Header.Get("X-Fencelab-Dropped-Before"), bytes.Count(nd.Body, []byte("\n")))
	}

	// The newest run, whole, by every export.
	var page struct {
		Events        []protocol.Event
		DroppedBefore int64 `json:"dropped_before"`
	}
	a = ts.do("GET", sp+"/events?since=0&limit=10000&run="+r, "", "", "")
	if a.Status != http.StatusOK {
		t.Fatalf("events of the newest run: %d %s", a.Status, a.Body)
	}
	a.json(t, &page)
	if page.DroppedBefore != 0 || a.Header.Get("X-Fencelab-Dropped-Before") != "" || !sameSeqs(page.Events, want) {
		t.Fatalf("events of the newest run: dropped_before %d, %d events, want %d and none dropped", page.DroppedBefore, len(page.Events), len(want))
	}
	nd = ts.do("GET", sp+"/events.ndjson?run="+r, "", "", "")
	var lines []protocol.Event
	for sc := bufio.NewScanner(bytes.NewReader(nd.Body)); sc.Scan(); {
		var e protocol.Event
		_ = json.Unmarshal(sc.Bytes(), &e)
		lines = append(lines, e)
	}
	if nd.Status != http.StatusOK || nd.Header.Get("X-Fencelab-Dropped-Before") != "" || !sameSeqs(lines, want) {
		t.Fatalf("events.ndjson of the newest run: %d, header %q, %d lines, want %d", nd.Status, nd.Header.Get("X-Fencelab-Dropped-Before"), len(lines), len(want))
	}
	tr := ts.do("GET", sp+"/runs/"+r+"/transcript.sql", "", "", "")
	if tr.Status != http.StatusOK || strings.Contains(string(tr.Body), "Not whole") || !strings.Contains(string(tr.Body), "row(s)") {
		t.Fatalf("transcript of the newest run: %d\n%.400s", tr.Status, tr.Body)
	}
	rp := ts.do("GET", "/s/"+s.ID+"/runs/"+r+"/replay.html", "", "", "")
	if rp.Status != http.StatusOK || rp.Header.Get("X-Fencelab-Dropped-Before") != "" {
		t.Fatalf("replay of the newest run: %d, header %q\n%.300s", rp.Status, rp.Header.Get("X-Fencelab-Dropped-Before"), rp.Body)
	}

	// The old run, cut: what is kept, and where it starts.
	if live.Log.Dropped(old) > 0 {
		a = ts.do("GET", sp+"/events?since=0&run="+old, "", "", "")
		page.DroppedBefore = 0
		if a.Status == http.StatusOK {
			a.json(t, &page)
		}
		if a.Status != http.StatusOK || page.DroppedBefore != live.Log.Dropped(old)+1 {
			t.Fatalf("events of a run cut short: %d, dropped_before %d, want 200 and %d\n%.300s", a.Status, page.DroppedBefore, live.Log.Dropped(old)+1, a.Body)
		}
	}

	// A resume into what is gone says so; a socket since=0 starts at the oldest kept.
	refused(t, "events since 1 of a trimmed log", ts.do("GET", sp+"/events?since=1", "", "", ""), 410, "gone", "no longer kept", "since=0")
	w, _, err := s.dial(context.Background(), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.c.CloseNow()
	var since int64
	_ = json.Unmarshal(w.next(t, "hello", 5*time.Second)["since"], &since)
	if since < gone {
		t.Fatalf("a socket since=0 of a trimmed log says since %d, but the log dropped up to %d", since, gone)
	}
	w.next(t, "live", 5*time.Second)
}

func sameSeqs(evs []protocol.Event, want []int64) bool {
	if len(evs) != len(want) || len(want) == 0 {
		return false
	}
	for i, e := range evs {
		if e.Seq != want[i] {
			return false
		}
	}
	return true
}
