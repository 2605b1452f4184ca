package server_test

// A public demo: what one client can do to a server everyone shares.

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine/lab"
	"github.com/fencelab/fencelab/engine/pgtest"
	"github.com/fencelab/fencelab/server/supervisor"
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
	var wg sync.WaitGroup
	codes := make([]int, 6)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = s.try(`{"action":"run","ordering":"free-play"}`).Status
		}()
	}
	wg.Wait()
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
		if e.Process != nil && e.Process.Change == lab.ProcSpawned {
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
		if st := supervisor.ProcState(pid); st != 0 && st != 'Z' {
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
