package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// loadEvents returns a load lab's events of one phase.
func loadEvents(s *sess, id string, phase experiments.LoadPhase) []protocol.Event {
	var out []protocol.Event
	for _, e := range s.events(0, id) {
		if e.Load != nil && e.Load.Phase == phase {
			out = append(out, e)
		}
	}
	return out
}

func (ts *testServer) loadStats(t *testing.T) api.Stats {
	t.Helper()
	var st api.Stats
	a := ts.do("GET", "/api/stats", "", "", "")
	if a.Status != http.StatusOK {
		t.Fatalf("stats: %d %s", a.Status, a.Body)
	}
	a.json(t, &st)
	return st
}

// TestLoad_CountsMatchTheChecker runs the load lab for real — worker
// processes frozen at random for longer than their lease, in rounds that
// each run every style once, in turn first — and holds its live counts,
// read from Postgres as the workers ran, to the invariant checker's, job
// by job, for every style and round: they are the same numbers. The
// fenced build lets no zombie write land; job id only lets them land in
// the row, and attempt or token at the receiver. When it ends no worker
// process and no schema of it is left.
func TestLoad_CountsMatchTheChecker(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	before := schemasOf(t, ts)
	r := s.cmd(`{"action":"load","workers":5,"jobs":200,"lease_ms":250,"styles":["fencelab","id-only","token","state-only"]}`)
	if !strings.HasPrefix(r.Run, "l") {
		t.Fatalf("the load lab's id is %q", r.Run)
	}
	fin := s.waitEvent(4*time.Minute, "the load lab's end", func(e protocol.Event) bool {
		return e.Run == r.Run && e.Load != nil && (e.Load.Phase == experiments.LoadFinished || e.Load.Phase == experiments.LoadStopped)
	})
	if fin.Load.Phase != experiments.LoadFinished {
		t.Fatalf("the load lab stopped: %s", fin.Text)
	}
	results := map[string]experiments.LoadStyleResult{}
	for _, res := range fin.Load.Results {
		results[res.Style] = res
		c, tl := res.Check, res.Tally
		t.Logf("%-10s %4d done in %5d ms (%3.0f jobs/s), %2d stalls; live: row %d receiver %d; checker: row %d receiver %d, broken %d, zombie results %d",
			res.Style, tl.Done, tl.ElapsedMS, res.PerSecond, tl.Stalls, tl.LateRow, tl.LateReceiver, c.StaleWrites, c.OlderAccepted, c.Broken, c.ZombieResult)
		if int64(c.StaleWrites) != tl.LateRow || int64(c.OlderAccepted) != tl.LateReceiver || !res.Agrees {
			t.Errorf("%s: the live counts (row %d, receiver %d) are not the checker's (row %d, receiver %d)", res.Style, tl.LateRow, tl.LateReceiver, c.StaleWrites, c.OlderAccepted)
		}
		if c.Jobs != 200 || c.Unfinished != 0 || tl.Done+tl.Failed != 200 || res.CutShort {
			t.Errorf("%s: %d jobs checked, %d unfinished, %d done and %d failed, cut short %v", res.Style, c.Jobs, c.Unfinished, tl.Done, tl.Failed, res.CutShort)
		}
		if tl.Stalls < 5 {
			t.Errorf("%s: only %d stalls", res.Style, tl.Stalls)
		}
	}
	if len(results) != 4 {
		t.Fatalf("%d styles ended, want 4", len(results))
	}
	// Four rounds, every style once in each place of a round.
	for name, res := range results {
		places := map[int]int{}
		for _, rd := range res.Rounds {
			places[rd.Position]++
			if !rd.Agrees || rd.Jobs != 50 {
				t.Errorf("%s: round %d: %+v", name, rd.Round, rd)
			}
		}
		if len(res.Rounds) != 4 || len(places) != 4 || res.Throughput == nil || res.Throughput.N != 4 {
			t.Errorf("%s: rounds %+v", name, res.Rounds)
		}
	}
	if c := fin.Load.Throughput; c == nil || c.Ratio.N != 4 || !strings.Contains(fin.Load.Verdict, "over 4 rounds") {
		t.Errorf("the throughput's comparison %+v, verdict %q", c, fin.Load.Verdict)
	}
	if f := results["fencelab"]; f.Check.Broken != 0 || f.Tally.LateRow != 0 || f.Tally.LateReceiver != 0 || f.Check.ZombieResult != 0 {
		t.Errorf("fencelab let zombie writes land: %+v", f)
	}
	if id := results["id-only"]; id.Tally.LateRow == 0 || id.Check.ZombieResult == 0 {
		t.Errorf("job id only: no zombie write landed in the row in %d stalls: %+v", id.Tally.Stalls, id)
	}
	if tk := results["token"]; tk.Tally.LateRow != 0 || tk.Tally.LateReceiver == 0 {
		t.Errorf("attempt or token: the row must refuse every late write and the receiver take some: %+v", tk)
	}
	if !strings.Contains(fin.Load.Verdict, "fencelab: 0") || fin.Text != fin.Load.Verdict {
		t.Errorf("verdict %q, text %q", fin.Load.Verdict, fin.Text)
	}
	// The ticks are the live counts, numbered in time, and the last of each
	// style agrees with its end.
	ticks := loadEvents(s, r.Run, experiments.LoadTick)
	if len(ticks) < 8 {
		t.Errorf("%d ticks", len(ticks))
	}
	if n := len(loadEvents(s, r.Run, experiments.LoadStyleDone)); n != 4 {
		t.Errorf("%d style_done events, want 4", n)
	}
	if n := len(loadEvents(s, r.Run, experiments.LoadRoundDone)); n != 12 {
		t.Errorf("%d round_done events, want 12 (and 4 style_done)", n)
	}
	waitFor(t, 10*time.Second, "the load lab's workers and schemas gone", func() bool {
		st := ts.loadStats(t)
		return st.Workers == 0 && st.Loads == 0 && schemasOf(t, ts) == before
	})
	// A finished lab is kept, to replay when the server is busy.
	var rec struct {
		Seed    bool
		Verdict string
		Events  []protocol.Event
	}
	a := ts.do("GET", "/api/recordings/load", "", "", "")
	a.json(t, &rec)
	if a.Status != http.StatusOK || rec.Seed || rec.Verdict != fin.Load.Verdict || len(rec.Events) < len(ticks) {
		t.Errorf("the recording: %d, seed %v, verdict %q, %d events", a.Status, rec.Seed, rec.Verdict, len(rec.Events))
	}
}

// TestLoad_OneAtATimeAndBadInput: six load commands at once in one
// session leave one lab running; another session is told the server is
// busy; reset stops it and gives everything back; bad input changes
// nothing.
func TestLoad_OneAtATimeAndBadInput(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s, other := ts.newSession(), ts.newSession()
	for _, body := range []string{
		`{"action":"load","workers":0.5}`, `{"action":"load","workers":17}`, `{"action":"load","jobs":99999999999999999999999}`,
		`{"action":"load","styles":["fencelab","bespoke"]}`, `{"action":"load","styles":"fencelab"}`, `{"action":"load","lease_ms":"300"}`,
		`{"action":"load","styles":["\u0000"]}`,
	} {
		if a := s.try(body); a.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", body, a.Status, a.Body)
		}
	}
	if st := ts.loadStats(t); st.Loads != 0 || st.Workers != 0 {
		t.Fatalf("bad input started something: %+v", st)
	}
	const body = `{"action":"load","workers":4,"jobs":2000,"lease_ms":300,"styles":["fencelab","id-only"]}`
	codes := s.tryAtOnce(6, body)
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("command %d: %d (each replaces the one before)", i, c)
		}
	}
	if st := ts.loadStats(t); st.Loads != 1 {
		t.Errorf("after six at once: %d load labs, want 1", st.Loads)
	}
	waitFor(t, 20*time.Second, "the lab's 4 workers", func() bool { return ts.loadStats(t).Workers == 4 })
	for range 10 {
		if st := ts.loadStats(t); st.Workers > 4 || st.Loads != 1 {
			t.Fatalf("while it runs: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if a := other.try(body); a.Status != http.StatusServiceUnavailable && a.Status != http.StatusTooManyRequests {
		t.Errorf("a second session's load lab while one runs: %d %s", a.Status, a.Body)
	} else if !strings.Contains(a.errText(), "load lab at a time") {
		t.Errorf("busy says %q", a.errText())
	}
	s.cmd(`{"action":"reset"}`)
	if st := ts.loadStats(t); st.Loads != 0 || st.Workers != 0 {
		t.Errorf("after reset: %+v", st)
	}
	stopped := loadEvents(s, "", experiments.LoadStopped)
	if len(stopped) < 6 {
		t.Errorf("%d stopped events, want one per lab (6)", len(stopped))
	}
}

// TestLoad_TheSeedIsServed: a server that has run no load lab serves the
// one recorded into the binary, to replay: a whole lab in rounds, each
// style once in each place, its verdict the finished event's.
func TestLoad_TheSeedIsServed(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	var rec struct {
		Seed    bool
		Verdict string
		Config  experiments.LoadConfig
		Events  []protocol.Event
		Results []experiments.LoadStyleResult
	}
	a := ts.do("GET", "/api/recordings/load", "", "", "")
	a.json(t, &rec)
	if a.Status != http.StatusOK || !rec.Seed || rec.Config.Rounds != len(rec.Config.Styles) || !strings.Contains(rec.Verdict, "rounds") {
		t.Fatalf("the seed: %d, seed %v, config %+v, verdict %q", a.Status, rec.Seed, rec.Config, rec.Verdict)
	}
	rounds := 0
	for _, e := range rec.Events {
		if e.Load != nil && e.Load.Phase == experiments.LoadRoundDone {
			rounds++
		}
		if e.Load != nil && e.Load.Phase == experiments.LoadFinished && (e.Load.Verdict != rec.Verdict || e.Load.Throughput == nil) {
			t.Errorf("the finished event: %q, %+v", e.Load.Verdict, e.Load.Throughput)
		}
	}
	n := len(rec.Config.Styles)
	if rounds != n*(n-1) {
		t.Errorf("%d round_done events, want %d", rounds, n*(n-1))
	}
	for _, r := range rec.Results {
		places := map[int]bool{}
		for _, rd := range r.Rounds {
			places[rd.Position] = true
		}
		if len(places) != n {
			t.Errorf("%s ran in places %v", r.Style, places)
		}
	}
}
