package api_test

// A public demo: what one client can do to a server everyone shares.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/child"
	"github.com/fencelab/fencelab/server/run/receiver"
	"github.com/fencelab/fencelab/server/run/worker"
	"github.com/fencelab/fencelab/server/session"
)

// schemasOf counts the schemas of one server's instance.
func schemasOf(t *testing.T, ts *testServer) int {
	t.Helper()
	var n int
	if err := pgtest.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)", "fl_"+ts.Sessions.Instance()+"_").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor polls cond every 20 ms for up to timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCommands_SixRunsAtOnceLeaveOne: the same run command sent six times
// at once on one session, over HTTP, leaves one current run; the other
// five end completely (workers reaped, schemas dropped, slots given back),
// and a reset then leaves nothing at all.
func TestCommands_SixRunsAtOnceLeaveOne(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	codes := s.tryAtOnce(6, `{"action":"run","ordering":"free-play"}`)
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("run command %d answered %d", i, c)
		}
	}
	snap := s.snapshot()
	live := 0
	for _, r := range snap.Runs {
		if !r.Phase.Ended() {
			live++
		}
	}
	if live != 1 {
		t.Fatalf("%d runs are live after six run commands at once, want 1: %+v", live, snap.Runs)
	}
	waitFor(t, 10*time.Second, "one run slot held", func() bool { return ts.Sessions.RunsInFlight() == 1 })
	waitFor(t, 10*time.Second, "one run's two schemas", func() bool { return schemasOf(t, ts) == 2 })
	var pids []int
	for _, e := range s.events(0, "") {
		if e.Process != nil && e.Process.Change == protocol.ProcSpawned {
			pids = append(pids, e.Process.Pid)
		}
	}
	if len(pids) < 2 {
		t.Fatalf("%d workers were spawned", len(pids))
	}
	s.cmd(`{"action":"reset"}`)
	waitFor(t, 10*time.Second, "no run slot held after reset", func() bool { return ts.Sessions.RunsInFlight() == 0 })
	if n := schemasOf(t, ts); n != 0 {
		t.Errorf("%d schemas left after reset", n)
	}
	for _, pid := range pids {
		if st := child.State(pid); st != 0 && st != 'Z' {
			t.Errorf("worker %d is alive (%c) after reset", pid, st)
		}
	}
}

// TestCommands_BatchesAreReplacedAndReset: a second batch replaces the
// first, and reset ends a batch: one session never holds more than its
// share of the server's run slots.
func TestCommands_BatchesAreReplacedAndReset(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	for range 5 {
		s.cmd(`{"action":"matrix","lease_ms":2000}`)
	}
	max := ts.Sessions.Limits().MaxRunsPerSession
	waitFor(t, 10*time.Second, "a batch running", func() bool { return ts.Sessions.RunsInFlight() > 0 })
	for range 20 {
		if n := ts.Sessions.RunsInFlight(); n > max {
			t.Fatalf("one session holds %d run slots, more than its share of %d", n, max)
		}
		time.Sleep(25 * time.Millisecond)
	}
	s.cmd(`{"action":"reset"}`)
	waitFor(t, 20*time.Second, "no run slot held after reset", func() bool { return ts.Sessions.RunsInFlight() == 0 })
	time.Sleep(300 * time.Millisecond) // nothing starts after the reset
	if n := ts.Sessions.RunsInFlight(); n != 0 {
		t.Fatalf("%d runs started after the reset", n)
	}
	waitFor(t, 10*time.Second, "no schema left", func() bool { return schemasOf(t, ts) == 0 })
}

// TestSecrets_TheReceiverTakesItsOwnWorkersOnly: the run's receiver URL,
// key and all, is on no worker's command line; with the URL alone (read
// from a worker's environment, as a local attacker could not) a forged
// delivery at epoch 99 is refused, and the run ends as a correct build's.
func TestSecrets_TheReceiverTakesItsOwnWorkersOnly(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	s.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
	s.cmd(`{"action":"step"}`)
	var url string
	for _, w := range s.snapshot().Run.Workers {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", w.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(cmdline), "/receiver/") || strings.Contains(string(cmdline), "deliveries") {
			t.Errorf("worker %s's command line carries the receiver's URL: %q", w.Label, cmdline)
		}
		env := envOf(t, w.Pid)
		url = env[worker.EnvReceiverURL]
		if env[worker.EnvReceiverCredential] == "" {
			t.Errorf("worker %s has no receiver credential in its environment", w.Label)
		}
	}
	if !strings.Contains(url, "/receiver/") {
		t.Fatalf("the workers' receiver URL is %q", url)
	}
	forged := `{"job_id":1,"epoch":99,"owner":"mallory","payload":{"worker":"B"}}`
	for _, auth := range []string{"", "Bearer nope", "Bearer "} {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(forged))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("a delivery with Authorization %q answered %d, want 403", auth, resp.StatusCode)
		}
	}
	for !s.cmd(`{"action":"step"}`).Done {
	}
	o := s.verdictOf(s.snapshot().Run.ID, 30*time.Second)
	if !o.Safe || o.Receiver.Epoch != 2 {
		t.Fatalf("after the forged delivery the run says %+v", o)
	}
}

// TestSecrets_AFailedCallSaysNoURL: the error of a call that failed names
// no part of the receiver's URL, whose path is a run's key.
func TestSecrets_AFailedCallSaysNoURL(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody answers there now
	const key = "s3cr3tK3yOfARun"
	ce := &protocol.CallEvent{JobID: 1, Epoch: 1}
	_, err = receiver.Call(context.Background(), &http.Client{Timeout: 2 * time.Second}, "http://"+addr+"/receiver/"+key+"/deliveries", []byte(`{}`), ce)
	if err == nil {
		t.Fatal("a call to a closed port succeeded")
	}
	b, _ := json.Marshal(ce)
	for _, s := range []string{err.Error(), string(b)} {
		if strings.Contains(s, key) || strings.Contains(s, addr) {
			t.Errorf("the failure carries the URL: %s", s)
		}
	}
}

// TestRuns_AnAbandonedRunEnds: a step-by-step run that nobody watches or
// drives any more is stopped within its idle limit and gives its slot
// back; a watched one goes on.
func TestRuns_AnAbandonedRunEnds(t *testing.T) {
	t.Parallel()
	// Idle long enough that both runs still hold their slots once the
	// watched one's socket is live on a loaded machine (with 300 ms, a
	// sweep could end the unwatched run before the first count).
	ts := startServer(t, func(c *api.Config) { c.Limits.RunIdle = 1500 * time.Millisecond })
	s := ts.newSession()
	s.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
	watched := ts.newSession()
	watched.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
	w, _, err := watched.dial(context.Background(), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.c.CloseNow()
	w.next(t, "live", 5*time.Second)
	if n := ts.Sessions.RunsInFlight(); n != 2 {
		t.Fatalf("%d runs hold slots, want 2", n)
	}
	time.Sleep(2 * time.Second) // nobody drives either; one is watched
	ts.Sessions.Sweep()
	run := s.snapshot().Run
	if !run.Phase.Ended() || run.StopReason != protocol.StopAbandoned {
		t.Fatalf("the abandoned run is %s (%s)", run.Phase, run.StopReason)
	}
	if run := watched.snapshot().Run; run.Phase.Ended() {
		t.Fatalf("the watched run ended: %s (%s)", run.Phase, run.StopReason)
	}
	if n := ts.Sessions.RunsInFlight(); n != 1 {
		t.Fatalf("%d runs hold slots after the sweep, want 1", n)
	}
	// The session itself stays: its reader may come back and run again.
	s.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
}

// TestRuns_RowEventsSurviveALostListener: the connection that listens for
// row changes is killed in the middle of a run (as a Postgres restart
// would); the server listens again, reads the changes it missed from the
// jobs' history, and the run's row events have no gap.
func TestRuns_RowEventsSurviveALostListener(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	r := s.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
	s.cmd(`{"action":"step"}`) // A claims
	kill := func() {
		var n int
		err := pgtest.Pool(t).QueryRow(context.Background(),
			`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			  WHERE application_name = 'fencelab serve listener' AND query LIKE '%' || $1 || '%'`,
			"fl_"+ts.Sessions.Instance()+"_").Scan(&n)
		if err != nil || n != 1 {
			t.Fatalf("terminated %d listening connections: %v", n, err)
		}
	}
	kill()
	for !s.cmd(`{"action":"step"}`).Done {
	}
	o := s.verdictOf(r.Run, 30*time.Second)
	if !o.Safe {
		t.Fatalf("the run: %+v", o)
	}
	var seqs []int64
	var last protocol.RowOp
	for _, e := range s.events(0, r.Run) {
		if e.Row != nil {
			seqs = append(seqs, e.Row.HistorySeq)
			last = e.Row.Op
		}
	}
	for i, seq := range seqs {
		if seq != int64(i+1) {
			t.Fatalf("row events by history seq %v: a gap or a repeat at %d", seqs, i)
		}
	}
	if len(seqs) < 4 || last != protocol.RowOp("complete") {
		t.Fatalf("the row events after the listener was killed are missing: %v, the last a %q", seqs, last)
	}
}

// TestCapacity_FitsTheDatabase: the caps are narrowed to the connections
// Postgres allows, counting what others hold: a server never has more
// workers than connections for them.
func TestCapacity_FitsTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	var maxConns, inUse int
	if err := pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int, (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int`).Scan(&maxConns, &inUse); err != nil {
		t.Fatal(err)
	}
	var l session.Limits
	l.Fill()
	l.MaxRuns = 1000
	fit, note, err := session.Fit(ctx, pool, l)
	if err != nil {
		t.Fatal(err)
	}
	if fit.MaxRuns >= 1000 || fit.MaxRuns < 1 {
		t.Fatalf("fit %d runs of 1000 in %d connections", fit.MaxRuns, maxConns)
	}
	if need := session.WorkerConnections(fit) + 2*fit.MaxWorkers + session.PoolSize(fit) + inUse; need > maxConns {
		t.Fatalf("%d runs need %d connections; Postgres allows %d", fit.MaxRuns, need, maxConns)
	}
	if !strings.Contains(note, fmt.Sprintf("allows %d connections", maxConns)) || !strings.Contains(note, "raise max_connections") {
		t.Fatalf("the note says %q", note)
	}
	l.MaxRuns = 10
	if fit, _, _ := session.Fit(ctx, pool, l); fit.MaxRuns != 10 {
		t.Fatalf("10 runs that fit became %d", fit.MaxRuns)
	}
}

// TestRuns_AWorkerKilledFromOutside: a scripted run whose worker is
// killed from outside stops, says why, and gives no verdict; every later
// step says the same, as a conflict, not as bad input.
func TestRuns_AWorkerKilledFromOutside(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	r := s.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
	s.cmd(`{"action":"step"}`)
	var pid int
	for _, w := range s.snapshot().Run.Workers {
		if w.Label == "B" {
			pid = w.Pid
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.waitEvent(10*time.Second, "the run's error", func(e protocol.Event) bool { return e.Error != nil && e.Error.Code == protocol.ErrWorkerLost })
	a := s.try(`{"action":"step"}`)
	if a.Status != http.StatusConflict || !strings.Contains(a.errText(), "Worker B is gone") && !strings.Contains(a.errText(), "worker B is gone") {
		t.Fatalf("a step after the worker was killed: %d %s", a.Status, a.Body)
	}
	run := s.snapshot().Run
	if run.ID != r.Run || run.Phase != protocol.PhaseStopped || run.StopReason != protocol.StopWorkerLost || run.Outcome != nil {
		t.Fatalf("the run is %s (%s), outcome %v", run.Phase, run.StopReason, run.Outcome)
	}
	for _, e := range s.events(0, r.Run) {
		if e.Verdict != nil {
			t.Fatalf("a run that could not play out has a verdict: %+v", e.Verdict)
		}
	}
}

// TestRuns_AWorkerStoppedFromOutsideMeetsTheStallLimit: a worker stopped
// by a SIGSTOP from outside the run (not by the run) is killed once it has
// been stopped longer than --max-stall.
func TestRuns_AWorkerStoppedFromOutsideMeetsTheStallLimit(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) { c.Limits.MaxStall = time.Second })
	s := ts.newSession()
	s.cmd(`{"action":"run","ordering":"free-play"}`)
	w := s.snapshot().Run.Workers[0]
	if err := syscall.Kill(w.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	e := s.waitEvent(15*time.Second, "the stalled worker killed", func(e protocol.Event) bool {
		return e.Process != nil && e.Process.Change == protocol.ProcExited && e.Process.Pid == w.Pid
	})
	if e.Process.Cause != protocol.CauseStallLimit {
		t.Fatalf("the worker stopped from outside exited, cause %q", e.Process.Cause)
	}
}

// TestSpares_ARunTakesASparePairAndNoneIsLeft: a server with spare schemas
// makes them while quiet; a run takes one (and starts without making its
// own); at shutdown the spares nobody took are dropped with the rest.
func TestSpares_ARunTakesASparePairAndNoneIsLeft(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) { c.Limits.SpareRuns = 2 })
	spares := func() int {
		var n int
		if err := pgtest.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)", "fl_"+ts.Sessions.Instance()+"_s").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor(t, 20*time.Second, "two spare pairs made", func() bool { return spares() == 4 })
	s := ts.newSession()
	r := s.cmd(`{"action":"run","ordering":"zombie-first","mode":"auto","lease_ms":300,"pace_ms":0}`)
	if o := s.verdictOf(r.Run, 30*time.Second); !o.Safe {
		t.Fatalf("a run on spare schemas: %+v", o)
	}
	var fromSpare bool
	for _, e := range s.events(0, r.Run) {
		if e.SQL != nil && strings.Contains(e.SQL.Stmt.SQL, `"fl_`+ts.Sessions.Instance()+`_s`) {
			fromSpare = true
		}
	}
	if !fromSpare {
		t.Fatal("the run did not use a spare pair of schemas")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := schemasOf(t, ts); n != 0 {
		t.Fatalf("%d schemas of the server are left after shutdown", n)
	}
}

// TestPeers_ALinkWorksOnEitherInstance: two instances on one Postgres, as
// behind a reverse proxy; a session made on one is watched, driven and
// shown on the other, its socket included; when its instance is gone, the
// other says it is no more.
func TestPeers_ALinkWorksOnEitherInstance(t *testing.T) {
	t.Parallel()
	a := startServer(t, nil)
	b := startServer(t, nil)
	s := a.newSession()
	viaB := &sess{ts: b, ID: s.ID, Token: s.Token}
	var snap session.Snapshot
	b.do("GET", "/api/sessions/"+s.ID, "", "", "").json(t, &snap)
	if snap.ID != s.ID {
		t.Fatalf("the session through the other instance: %+v", snap)
	}
	w, _, err := viaB.dial(context.Background(), 0, s.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer w.c.CloseNow()
	w.next(t, "live", 5*time.Second)
	r := viaB.cmd(`{"action":"run","ordering":"zombie-first","mode":"auto","lease_ms":300,"pace_ms":0}`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := w.next(t, "event", time.Until(deadline))
		if e := eventOf(m); e.Verdict != nil && e.Run == r.Run {
			if !e.Verdict.Safe {
				t.Fatalf("the verdict through the other instance: %+v", e.Verdict)
			}
			break
		}
	}
	if dl := b.do("GET", "/api/sessions/"+s.ID+"/events.ndjson?run="+r.Run, "", "", ""); dl.Status != http.StatusOK || !strings.Contains(string(dl.Body), `"kind":"verdict"`) {
		t.Fatalf("the run's events through the other instance: %d", dl.Status)
	}
	if n := a.Sessions.Count(); n != 1 {
		t.Fatalf("the owner has %d sessions, want 1", n)
	}
	if n := b.Sessions.Count(); n != 0 {
		t.Fatalf("the other instance made %d sessions of its own", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.do("GET", "/api/sessions/"+s.ID, "", "", ""); got.Status != http.StatusNotFound {
		t.Fatalf("a session of an instance that is gone: %d %s", got.Status, got.Body)
	}
}
