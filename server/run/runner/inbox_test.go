package runner_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/control"
	"github.com/fencelab/fencelab/server/run/runner"
)

// A person's commands reach a run through its inbox (Run.Do), carried out
// one at a time by the run itself: while a long step (the lease running
// out) holds the line, a caller who gives up is answered at once and its
// step is never played; the line holds a bounded number of commands and
// refuses the rest as busy at once; the commands that waited are answered
// after the step, in turn; and the run plays on to the article's end.
func TestRun_CommandsWaitInLineForTheRun(t *testing.T) {
	t.Parallel()
	const longLease = 3 * time.Second
	l := newLab(t, runner.Limits{})
	r := l.open(experiments.RunConfig{Ordering: experiments.ZombieFirst, Lease: longLease}, protocol.ModeStep, 0)
	ctx := context.Background()
	step := control.Command{Action: control.Step}
	steps := r.Scenario().Steps
	expiry := -1
	for i, st := range steps {
		if st.Action == experiments.ActAwaitExpiry {
			expiry = i
			break
		}
	}
	for i := range expiry {
		if _, err := r.Do(ctx, step); err != nil {
			t.Fatalf("step %d: %v\n%s", i+1, err, l.ev.dump())
		}
	}

	// The step that waits for the lease to run out holds the line.
	long := make(chan error, 1)
	go func() {
		res, err := r.Do(ctx, step)
		if err == nil && (res.Step == nil || res.Step.Action != experiments.ActAwaitExpiry) {
			t.Errorf("the long step played %+v, want the wait for expiry", res.Step)
		}
		long <- err
	}()
	l.ev.await(t, "the expiry step", 10*time.Second, func(e protocol.Event) bool { return e.Step != nil && e.Step.Index == expiry })

	// A caller that gives up while it waits is answered at once.
	gctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	given := make(chan error, 1)
	go func() { _, err := r.Do(gctx, step); given <- err }()
	select {
	case err := <-given:
		if err == nil {
			t.Fatal("a step given up after 100ms was played")
		}
	case <-time.After(longLease / 2):
		t.Fatalf("a step given up after 100ms behind a %v lease was not answered within %v", longLease, longLease/2)
	}

	// Twenty commands at once: the line takes what it holds, the rest are
	// refused as busy at once; none is answered while the step goes on.
	type answer struct{ err error }
	answers := make(chan answer, 20)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, err := r.Do(ctx, control.Command{Action: control.Pause})
			answers <- answer{err}
		})
	}
	busy := 0
	var waited []answer
	for range 20 {
		a := <-answers
		if fault.CodeOf(a.err) == fault.Busy {
			busy++
			continue
		}
		waited = append(waited, a)
		if len(waited) == 1 && len(l.ev.filter(isLease(protocol.LeaseExpired))) == 0 {
			t.Errorf("a pause was answered (%v) while the step before it still waited for the lease to run out", a.err)
		}
	}
	wg.Wait()
	if busy == 0 || len(waited) == 0 || len(waited) > 16 {
		t.Errorf("20 commands at once: %d refused as busy, %d waited; want some of each, 16 at most waiting", busy, len(waited))
	}
	for _, a := range waited {
		if fault.CodeOf(a.err) != fault.Conflict { // a step run has no pause
			t.Errorf("a pause of a step run answered %v, want a conflict", a.err)
		}
	}
	if err := <-long; err != nil {
		t.Fatalf("the expiry step: %v\n%s", err, l.ev.dump())
	}
	// The step given up was never played.
	if got := r.StepIndex(); got != expiry+1 {
		t.Fatalf("after the expiry step the run is at step %d, want %d: the step given up was played", got, expiry+1)
	}

	// The run plays on to its end through the same line.
	for i := expiry + 1; i < len(steps); i++ {
		res, err := r.Do(ctx, step)
		if err != nil {
			t.Fatalf("step %d: %v\n%s", i+1, err, l.ev.dump())
		}
		if res.Done != (i == len(steps)-1) {
			t.Fatalf("step %d: done %v", i+1, res.Done)
		}
	}
	if o := r.Outcome(); o == nil || !o.Safe {
		t.Fatalf("the run ended %+v, want safe", o)
	}
	// A command that is not a run's is refused as invalid.
	if _, err := r.Do(ctx, control.Command{Action: control.Run}); fault.CodeOf(err) != fault.Invalid {
		t.Errorf("a run command given to a run answered %v, want invalid", err)
	}
}
