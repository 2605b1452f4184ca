package api_test

// Fair to every reader: what one client can take from the others.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/sandbox/sandboxtest"
	"github.com/fencelab/fencelab/server/session/line"
)

// from makes a request as the client addr behind a proxy on loopback.
func (ts *testServer) from(addr, method, path, token, body string) answer {
	ts.t.Helper()
	h := map[string]string{"X-Forwarded-For": addr}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	if body != "" {
		h["Content-Type"] = "application/json"
	}
	return ts.send(method, path, h, body)
}

// sessionFrom makes a session as a client behind the proxy.
func (ts *testServer) sessionFrom(addr string) (*sess, answer) {
	ts.t.Helper()
	a := ts.from(addr, "POST", "/api/sessions", "", "")
	if a.Status != http.StatusCreated {
		return nil, a
	}
	var c struct{ ID, Token string }
	if err := json.Unmarshal(a.Body, &c); err != nil {
		ts.t.Fatal(err)
	}
	return &sess{ts: ts, ID: c.ID, Token: c.Token}, a
}

// TestFairness_PageLoadsCannotLockReadersOut: a server full of sessions
// nobody ever used makes room for a new reader; a session someone watches
// is never the one that makes way.
func TestFairness_PageLoadsCannotLockReadersOut(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) { c.Limits.MaxSessions = 10 })
	reader := ts.newSession()
	w, _, err := reader.dial(context.Background(), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.c.CloseNow()
	w.next(t, "live", 5*time.Second)
	for i := range 50 {
		if a := ts.do("POST", "/api/sessions", "", "", ""); a.Status != http.StatusCreated {
			t.Fatalf("session %d of a full server: %d %s", i, a.Status, a.Body)
		}
		if a := ts.do("GET", "/", "", "", ""); a.Status != http.StatusOK && a.Status != http.StatusNotFound {
			t.Fatalf("a page load on a full server: %d", a.Status)
		}
	}
	if n := ts.Sessions.Count(); n > 10 {
		t.Fatalf("%d sessions, over the limit of 10", n)
	}
	if a := ts.do("GET", "/api/sessions/"+reader.ID, "", "", ""); a.Status != http.StatusOK {
		t.Fatalf("the watched reader's session made way: %d", a.Status)
	}
	reader.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
}

// TestFairness_CapsPerClient: behind a trusted proxy, one address has at
// most its share of sessions and of runs at once, and another address is
// not held back by it; from an untrusted peer the forwarded header counts
// for nothing.
func TestFairness_CapsPerClient(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) {
		c.TrustProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		c.Limits.MaxSessionsPerClient = 3
		c.Limits.MaxRunsPerClient = 2
	})
	const greedy, other = "203.0.113.7", "198.51.100.9"
	var mine []*sess
	for range 3 {
		s, a := ts.sessionFrom(greedy)
		if s == nil {
			t.Fatalf("a session for %s: %d %s", greedy, a.Status, a.Body)
		}
		mine = append(mine, s)
	}
	// Two runs at once for one address, not three.
	for i, s := range mine {
		a := ts.from(greedy, "POST", "/api/sessions/"+s.ID+"/commands", s.Token, `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
		switch {
		case i < 2 && a.Status != http.StatusOK:
			t.Fatalf("run %d of %s: %d %s", i, greedy, a.Status, a.Body)
		case i == 2 && (a.Status != http.StatusServiceUnavailable || !strings.Contains(string(a.Body), "this address is running 2 runs")):
			t.Fatalf("the third run at once of %s: %d %s", greedy, a.Status, a.Body)
		}
	}
	o, a := ts.sessionFrom(other)
	if o == nil {
		t.Fatalf("another address is held back: %d %s", a.Status, a.Body)
	}
	if a := ts.from(other, "POST", "/api/sessions/"+o.ID+"/commands", o.Token, `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`); a.Status != http.StatusOK {
		t.Fatalf("another address's run: %d %s", a.Status, a.Body)
	}
	// A fourth session of the greedy address makes the oldest unwatched one
	// of its own make way; with all three watched it is refused.
	if s, a := ts.sessionFrom(greedy); s == nil {
		t.Fatalf("a fourth session of %s: %d %s", greedy, a.Status, a.Body)
	}
	if a := ts.do("GET", "/api/sessions/"+mine[0].ID, "", "", ""); a.Status != http.StatusNotFound {
		t.Fatalf("the oldest unwatched session of %s is still there: %d", greedy, a.Status)
	}
	var watched []*sess
	for range 3 {
		s, _ := ts.sessionFrom(greedy)
		if s == nil {
			break
		}
		c, _, err := s.dial(context.Background(), 0, "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.c.CloseNow()
		c.next(t, "live", 5*time.Second)
		watched = append(watched, s)
	}
	if len(watched) != 3 {
		t.Fatalf("%d watched sessions of %s, want 3", len(watched), greedy)
	}
	if s, a := ts.sessionFrom(greedy); s != nil || a.Status != http.StatusServiceUnavailable || !strings.Contains(string(a.Body), "this address has 3 sessions") {
		t.Fatalf("a session beyond the cap, all of them watched: %d %s", a.Status, a.Body)
	}
	// A forged header from a peer that is not a trusted proxy counts for
	// nothing: the direct peer is counted (here loopback: no caps).
	plain := startServer(t, func(c *api.Config) { c.Limits.MaxSessionsPerClient = 1 })
	for range 3 {
		if s, a := plain.sessionFrom(greedy); s == nil {
			t.Fatalf("a session from loopback: %d %s", a.Status, a.Body)
		}
	}
	if n := plain.Sessions.Count(); n != 3 {
		t.Fatalf("X-Forwarded-For from an untrusted peer was believed: %d sessions left of 3 (a cap of 1 per client)", n)
	}
}

// Free play's workers count against their address: one address's runs
// together hold at most MaxWorkersPerClient worker processes, and
// another address still gets its own; killing one gives its slot back.
func TestFairness_WorkersPerClient(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) {
		c.TrustProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		c.Limits.MaxWorkersPerClient = 5
	})
	const greedy, other = "203.0.113.8", "198.51.100.10"
	cmd := func(addr string, s *sess, body string) answer {
		return ts.from(addr, "POST", "/api/sessions/"+s.ID+"/commands", s.Token, body)
	}
	g, a := ts.sessionFrom(greedy)
	if g == nil {
		t.Fatalf("a session: %d %s", a.Status, a.Body)
	}
	if a := cmd(greedy, g, `{"action":"run","ordering":"free-play","lease_ms":400}`); a.Status != http.StatusOK {
		t.Fatalf("free play: %d %s", a.Status, a.Body)
	}
	for i := range 3 {
		if a := cmd(greedy, g, `{"action":"add_worker"}`); a.Status != http.StatusOK {
			t.Fatalf("worker %d of 5: %d %s", i+3, a.Status, a.Body)
		}
	}
	a = cmd(greedy, g, `{"action":"add_worker"}`)
	if a.Status != http.StatusServiceUnavailable || !strings.Contains(string(a.Body), "5 worker processes here") {
		t.Fatalf("a sixth worker of one address: %d %s", a.Status, a.Body)
	}
	o, _ := ts.sessionFrom(other)
	if a := cmd(other, o, `{"action":"run","ordering":"free-play","lease_ms":400}`); a.Status != http.StatusOK {
		t.Fatalf("another address's free play: %d %s", a.Status, a.Body)
	}
	if a := cmd(greedy, g, `{"action":"kill_worker","worker":"A"}`); a.Status != http.StatusOK {
		t.Fatalf("kill: %d %s", a.Status, a.Body)
	}
	waitFor(t, 10*time.Second, "the killed worker's slot given back", func() bool {
		return cmd(greedy, g, `{"action":"add_worker"}`).Status == http.StatusOK
	})
}

// TestFairness_ChecksFromOneAddressWaitInLineOneAtATime: an address plays
// one check at a time. Its second waits in the server's line, told its
// place, before anything of it is checked (statements that do not even
// prepare get no 400 while it waits); another address's check is not
// held back behind it; and the second's turn comes when the first's
// batch ends, its statements then refused as they would have been.
func TestFairness_ChecksFromOneAddressWaitInLineOneAtATime(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) {
		c.TrustProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	const addr, other = "203.0.113.7", "198.51.100.9"
	first, a := ts.sessionFrom(addr)
	if first == nil {
		t.Fatalf("a session: %d %s", a.Status, a.Body)
	}
	second, a := ts.sessionFrom(addr)
	if second == nil {
		t.Fatalf("a session: %d %s", a.Status, a.Body)
	}
	path := func(s *sess) string { return "/api/sessions/" + s.ID + "/commands" }
	long := `{"action":"check","lease_ms":5000,"solution":` + mustJSON(t, sandbox.Ours()) + `}`
	if a := ts.from(addr, "POST", path(first), first.Token, long); a.Status != http.StatusOK {
		t.Fatalf("the first check: %d %s", a.Status, a.Body)
	}
	broken := sandbox.Ours()
	broken.Claim = "UPDATE jobs SET owner = :owner WHERE"
	bad := `{"action":"check","solution":` + mustJSON(t, broken) + `}`
	answered := make(chan answer, 1)
	go func() { answered <- ts.from(addr, "POST", path(second), second.Token, bad) }()
	second.waitEvent(10*time.Second, "the second check's place in line", func(e protocol.Event) bool {
		return e.Note != nil && e.Note.Code == protocol.NoteInLine && e.Note.Place == 1 && e.Text == "Your check is next in line."
	})
	select {
	case a := <-answered:
		t.Fatalf("the second check from one address was answered while the first played: %d %s", a.Status, a.Body)
	case <-time.After(time.Second):
	}
	// The session takes other commands while its check waits, and a reset
	// takes a waiting check out of the line at once.
	ran := make(chan answer, 1)
	go func() {
		ran <- ts.from(addr, "POST", path(second), second.Token, `{"action":"run","ordering":"zombie-first","mode":"step"}`)
	}()
	select {
	case a := <-ran:
		if a.Status != http.StatusOK && a.Status != http.StatusServiceUnavailable {
			t.Fatalf("a run while the session's check waits: %d %s", a.Status, a.Body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a run command waited behind the session's check in line")
	}
	third, a := ts.sessionFrom(addr)
	if third == nil {
		t.Fatalf("a session: %d %s", a.Status, a.Body)
	}
	thirdAnswer := make(chan answer, 1)
	go func() { thirdAnswer <- ts.from(addr, "POST", path(third), third.Token, bad) }()
	third.waitEvent(10*time.Second, "the third check's place in line", func(e protocol.Event) bool {
		return e.Note != nil && e.Note.Code == protocol.NoteInLine && e.Note.Place == 2
	})
	if a := ts.from(addr, "POST", path(third), third.Token, `{"action":"reset"}`); a.Status != http.StatusOK {
		t.Fatalf("the third session's reset: %d %s", a.Status, a.Body)
	}
	select {
	case a := <-thirdAnswer:
		if a.Status != http.StatusConflict || !strings.Contains(string(a.Body), "left the line") {
			t.Fatalf("a waiting check after its session's reset: %d %s, want 409: it left the line", a.Status, a.Body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a reset did not take its session's waiting check out of the line")
	}
	o, a := ts.sessionFrom(other)
	if o == nil {
		t.Fatalf("a session: %d %s", a.Status, a.Body)
	}
	if a := ts.from(other, "POST", path(o), o.Token, bad); a.Status != http.StatusBadRequest {
		t.Fatalf("another address's check: %d %s, want its statements refused (400) at once", a.Status, a.Body)
	}
	if a := ts.from(addr, "POST", path(first), first.Token, `{"action":"reset"}`); a.Status != http.StatusOK {
		t.Fatalf("reset: %d %s", a.Status, a.Body)
	}
	select {
	case a := <-answered:
		if a.Status != http.StatusBadRequest {
			t.Fatalf("the second check, its turn come: %d %s, want its statements refused (400)", a.Status, a.Body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second check's turn did not come when the first's batch ended")
	}
}

// TestFairness_AFloodDoesNotStarveAReaderElsewhere: six addresses send
// four checks each at once (the fenced build, each a whole check); a
// reader at a seventh address who checks after them gets their report
// within a fair share of the time a reader alone takes: each address
// plays one check at a time, and the reader's check is in the first round
// of the line, behind one check of each address at most. Figures:
// BENCHMARKS.md.
func TestFairness_AFloodDoesNotStarveAReaderElsewhere(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) {
		c.TrustProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	const reader = "198.51.100.9"
	check := `{"action":"check","solution":` + mustJSON(t, sandbox.Ours()) + `}`
	path := func(s *sess) string { return "/api/sessions/" + s.ID + "/commands" }
	timeCheck := func(addr string) time.Duration {
		s, a := ts.sessionFrom(addr)
		if s == nil {
			t.Fatalf("a session: %d %s", a.Status, a.Body)
		}
		start := time.Now()
		if a := ts.from(addr, "POST", path(s), s.Token, check); a.Status != http.StatusOK {
			t.Fatalf("a check from %s: %d %s", addr, a.Status, a.Body)
		}
		if rep := s.checkReport(5 * time.Minute); !rep.Pass {
			t.Fatalf("the fenced build fails: %+v", rep)
		}
		return time.Since(start)
	}
	alone := timeCheck(reader)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for a := range 6 {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				addr := fmt.Sprintf("203.0.113.%d", a+1)
				s, ans := ts.sessionFrom(addr)
				if s == nil {
					t.Errorf("a flood session: %d %s", ans.Status, ans.Body)
					return
				}
				ans = ts.from(addr, "POST", path(s), s.Token, check) // waits its turn, then plays
				mu.Lock()
				codes[ans.Status]++
				mu.Unlock()
			}()
		}
	}
	time.Sleep(2 * time.Second) // the flood is in line
	during := timeCheck(reader)
	t.Logf("a reader's check alone: %v; behind a flood of 6 addresses × 4 checks: %v (%.2f×)", alone.Round(time.Millisecond), during.Round(time.Millisecond), float64(during)/float64(alone))
	if during > 4*alone+10*time.Second {
		t.Errorf("behind the flood the reader waited %v, against %v alone: the flood took more than its share", during, alone)
	}
	wg.Wait()
	t.Logf("the flood's answers: %v", codes)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFairness_SlowChecksElsewhereDoNotSlowAReader: six addresses each
// send a check whose claim burns a core until the statement timeout in
// every case where worker B claims (a check that holds its turn for half
// a minute); a reader at a seventh address who checks while they play
// has their check started as soon as alone, give or take the 2 s a
// check holds its slot (line.YoungFor), not when a slow one ends.
//
// What the reader's whole check then takes is a share of the machine:
// 1.7–1.8× its time alone on an idle 2-core machine (BENCHMARKS.md), but
// 2–3.5× with two busy loops beside it, as in CI's loaded step, and 4.4×
// under -race beside CI's race step, where the flood's runs leave the
// reader less CPU than alone. So the test holds the line's promise: the
// wait for its turn, as the check's batch says it (waited_ms), which
// tells the old line from this one (the reader waited for a slow check
// to end: 14.6 s), and the whole check only against starving (8×). The
// time to the command's answer also holds the check's trial run, which
// the flood, the race detector and busy loops slow (under both, 8.6 s
// later than alone in CI): it is logged, not bounded.
func TestFairness_SlowChecksElsewhereDoNotSlowAReader(t *testing.T) {
	// Not parallel: the figures are two times in this test, and the
	// package's other tests would load one more than the other.
	ts := startServer(t, func(c *api.Config) {
		c.TrustProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		// As fencelab serve starts it: schemas made and workers spawned in
		// advance while the server is quiet.
		c.Limits.SpareRuns, c.Limits.PrestartedWorkers = 120, 240
	})
	const reader = "198.51.100.9"
	path := func(s *sess) string { return "/api/sessions/" + s.ID + "/commands" }
	ours := `{"action":"check","solution":` + mustJSON(t, sandbox.Ours()) + `}`
	slow := `{"action":"check","solution":` + mustJSON(t, sandboxtest.SlowClaimFor("worker-b")) + `}`
	// timeCheck times a reader's check: until the command is answered
	// (its turn came, and its statements passed their trial run), and
	// until its report.
	timeCheck := func() (started, reported, waited time.Duration) {
		s, a := ts.sessionFrom(reader)
		if s == nil {
			t.Fatalf("a session: %d %s", a.Status, a.Body)
		}
		start := time.Now()
		if a := ts.from(reader, "POST", path(s), s.Token, ours); a.Status != http.StatusOK {
			t.Fatalf("the reader's check: %d %s", a.Status, a.Body)
		}
		started = time.Since(start)
		if rep := s.checkReport(5 * time.Minute); !rep.Pass {
			t.Fatalf("the fenced build fails: %+v", rep)
		}
		reported = time.Since(start)
		for _, e := range s.events(0, "") {
			if e.Kind == protocol.KindBatch && e.Batch.Name == experiments.BatchCheck && e.Batch.Phase == protocol.BatchStarted {
				waited = time.Duration(e.Batch.WaitedMS) * time.Millisecond
			}
		}
		return started, reported, waited
	}
	timeCheck() // the first check of a server warms what every later one uses
	startedAlone, alone, _ := timeCheck()

	var flood []*sess
	var wg sync.WaitGroup
	for a := range 6 {
		addr := fmt.Sprintf("203.0.113.%d", a+1)
		s, ans := ts.sessionFrom(addr)
		if s == nil {
			t.Fatalf("a flood session: %d %s", ans.Status, ans.Body)
		}
		flood = append(flood, s)
		wg.Go(func() { ts.from(addr, "POST", path(s), s.Token, slow) }) // answers when its turn comes
	}
	// Each slow check has its turn or a place in line before the reader
	// checks: its batch started, or its place told.
	for i, s := range flood {
		s.waitEvent(2*time.Minute, fmt.Sprintf("slow check %d playing or in line", i), func(e protocol.Event) bool {
			return (e.Kind == protocol.KindBatch && e.Batch.Name == experiments.BatchCheck) || (e.Note != nil && e.Note.Code == protocol.NoteInLine)
		})
	}
	startedDuring, during, waited := timeCheck()
	t.Logf("a reader's check alone: started in %v, reported in %v; while six addresses play slow checks: waited %v in line, started in %v, reported in %v (%.2f×)",
		startedAlone.Round(time.Millisecond), alone.Round(time.Millisecond), waited, startedDuring.Round(time.Millisecond), during.Round(time.Millisecond), float64(during)/float64(alone))
	for i, s := range flood {
		for _, e := range s.events(0, "") {
			if e.Kind == protocol.KindBatch && e.Batch.Name == experiments.BatchCheck && e.Batch.Phase == protocol.BatchFinished {
				t.Errorf("slow check %d had ended before the reader's did: the test measured less than it says", i)
			}
		}
		ts.from(fmt.Sprintf("203.0.113.%d", i+1), "DELETE", "/api/sessions/"+s.ID, s.Token, "")
	}
	wg.Wait()
	// A young check holds its slot line.YoungFor; the line's own timers
	// and locks may add a little on a loaded machine. Waiting for a slow
	// check to end took 14.6 s on an idle machine.
	if waited > line.YoungFor+time.Second {
		t.Errorf("while six addresses play slow checks the reader's check waited %v in line: it waited for a slow check, not for %v at most", waited, line.YoungFor)
	}
	if during > 8*alone {
		t.Errorf("while six addresses play slow checks the reader's check took %v, against %v alone: over 8×, starved", during, alone)
	}
}
