package admit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/session/admit"
)

var caps = admit.Caps{MaxRuns: 3, MaxRunsPerClient: 2, MaxBatchesPerClient: 1, MaxWorkersPerClient: 2}

func busy(t *testing.T, what string, err error) {
	t.Helper()
	if fault.CodeOf(err) != fault.Busy {
		t.Errorf("%s: %v, want busy", what, err)
	}
}

// Each client's caps hold for it alone; the run slots hold for all;
// loopback ("") has no per-client cap; and a client that gives back all
// it took is forgotten.
func TestAdmission_CapsPerClientAndSlotsForAll(t *testing.T) {
	a := admit.New(caps)
	ctx := context.Background()
	for range 2 {
		if err := a.TakeRun(ctx, "a", 0); err != nil {
			t.Fatal(err)
		}
	}
	busy(t, "a third run of a's", a.TakeRun(ctx, "a", 0))
	if err := a.TakeRun(ctx, "b", 0); err != nil {
		t.Fatal(err)
	}
	busy(t, "a fourth run on a server of three", a.TakeRun(ctx, "", 0))
	if n := a.RunsInFlight(); n != 3 {
		t.Errorf("%d runs in flight, want 3", n)
	}
	// A slot freed while one waits for it is the waiter's.
	done := make(chan error, 1)
	go func() { done <- a.TakeRun(ctx, "", 5*time.Second) }()
	time.Sleep(50 * time.Millisecond)
	a.ReleaseRun("b")
	if err := <-done; err != nil {
		t.Errorf("a run that waited for a slot: %v", err)
	}
	a.ReleaseRun("")
	a.ReleaseRun("a")
	a.ReleaseRun("a")

	if err := a.TakeBatch("a", false); err != nil {
		t.Fatal(err)
	}
	busy(t, "a second batch of a's", a.TakeBatch("a", false))
	if err := a.TakeBatch("a", true); err != nil {
		t.Errorf("a batch replacing a's playing one: %v", err)
	}
	a.ReleaseBatch("a")
	a.ReleaseBatch("a")
	for range 2 {
		if err := a.TakeWorker("a"); err != nil {
			t.Fatal(err)
		}
	}
	busy(t, "a third worker of a's", a.TakeWorker("a"))
	for range 10 {
		if err := a.TakeWorker(""); err != nil {
			t.Fatalf("loopback's worker: %v", err)
		}
	}
	a.GiveWorker("a")
	a.GiveWorker("a")
	a.GiveWorker("a") // one more than it took: never below zero
	a.AddSession("a")
	if n := a.Sessions("a"); n != 1 {
		t.Errorf("a's sessions %d, want 1", n)
	}
	a.DropSession("a")
	if n, in := a.Clients(), a.RunsInFlight(); n != 0 || in != 0 {
		t.Errorf("%d clients remembered, %d runs in flight, after all was given back", n, in)
	}
}

// A client's cap holds under many takes at once: never one over.
func TestAdmission_AtOnce(t *testing.T) {
	a := admit.New(admit.Caps{MaxRuns: 100, MaxRunsPerClient: 5, MaxBatchesPerClient: 5, MaxWorkersPerClient: 5})
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for range 50 {
		wg.Go(func() {
			if a.TakeRun(context.Background(), "a", 0) == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ok != 5 || a.RunsInFlight() != 5 {
		t.Errorf("50 runs at once of one client capped at 5: %d taken, %d in flight", ok, a.RunsInFlight())
	}
}
