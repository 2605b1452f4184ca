package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/worker"
)

// ErrDone is returned by Step once the script is over.
var ErrDone = errors.New("the run has no steps left")

// Scenario returns the script the run plays.
func (r *Run) Scenario() engine.Scenario { return r.scenario }

// Done reports whether every step has been played.
func (r *Run) Done() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next >= len(r.scenario.Steps)
}

// StepIndex returns the index of the next step to play.
func (r *Run) StepIndex() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next
}

// Step plays the next step of the script and returns it, or ErrDone when
// every step has been played. Steps are played one at a time.
func (r *Run) Step(ctx context.Context) (engine.Step, error) {
	r.stepMu.Lock()
	defer r.stepMu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return engine.Step{}, errors.New("the run is over")
	}
	if r.next >= len(r.scenario.Steps) {
		r.mu.Unlock()
		return engine.Step{}, ErrDone
	}
	i := r.next
	st := r.scenario.Steps[i]
	r.next++
	r.mu.Unlock()

	data := []byte(fmt.Sprintf(`{"index":%d,"total":%d,"action":%q,"worker":%q}`, i, len(r.scenario.Steps), st.Action, st.Worker))
	r.emit(ctx, engine.Event{Kind: engine.KindStep, Actor: "runner", Name: string(st.Action), Data: data,
		Text: fmt.Sprintf("Step %d of %d: %s", i+1, len(r.scenario.Steps), st.Say)})
	timeout := r.cfg.StepTimeout
	if st.Action == engine.ActAwaitExpiry {
		timeout += r.cfg.Run.Lease
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := r.play(sctx, st); err != nil {
		return st, fmt.Errorf("step %d (%s %s): %w", i+1, st.Action, st.Worker, err)
	}
	return st, nil
}

func (r *Run) play(ctx context.Context, st engine.Step) error {
	if _, err := r.worker(st.Worker); err != nil {
		return err
	}
	switch st.Action {
	case engine.ActClaim:
		return r.proceed(ctx, st.Worker, worker.CheckpointClaim)
	case engine.ActDeliver:
		return r.proceed(ctx, st.Worker, worker.CheckpointDeliver)
	case engine.ActCommit:
		return r.proceed(ctx, st.Worker, worker.CheckpointCommit)
	case engine.ActFreeze:
		return r.freeze(ctx, st.Worker, st.Release)
	case engine.ActThaw:
		return r.thaw(ctx, st.Worker)
	case engine.ActKill:
		return r.Kill(ctx, st.Worker)
	case engine.ActAwaitExpiry:
		return r.awaitExpiry(ctx)
	}
	return fmt.Errorf("unknown action %q", st.Action)
}

// proceed lets a worker past the checkpoint it waits at and waits until it
// settles at the next one. A worker that holds no job skips the job's
// steps; a frozen worker takes the command but cannot act on it until it
// is thawed.
func (r *Run) proceed(ctx context.Context, label, checkpoint string) error {
	r.mu.Lock()
	w := r.workers[label]
	at, frozen, exited, job := w.waitingAt, w.frozen, w.exited, w.jobID
	r.mu.Unlock()
	switch {
	case exited:
		r.note(ctx, engine.KindNote, label, fmt.Sprintf("Worker %s has exited: nothing to do.", label))
		return nil
	case checkpoint != worker.CheckpointClaim && job == 0 && at == worker.CheckpointClaim:
		r.note(ctx, engine.KindNote, label, fmt.Sprintf("Worker %s holds no job: it skips this step.", label))
		return nil
	case at != checkpoint:
		return fmt.Errorf("worker %s waits at %q, not %q", label, at, checkpoint)
	}
	// Mark the worker busy before the command goes out: its answer may
	// arrive before Send returns.
	r.mu.Lock()
	w.waitingAt = ""
	before := w.waits
	r.mu.Unlock()
	if err := w.proc.Send(worker.Command{Cmd: "proceed", Checkpoint: checkpoint}); err != nil {
		return err
	}
	if frozen {
		r.note(ctx, engine.KindNote, label, fmt.Sprintf("Worker %s is frozen: it will go on as soon as it wakes.", label))
		return nil
	}
	return r.waitFor(ctx, label, func(w *workerState) bool { return w.waits > before })
}

// freeze pauses a worker; with release, it also lets the worker past the
// checkpoint it waits at, so it wakes in the middle of its next step.
func (r *Run) freeze(ctx context.Context, label string, release bool) error {
	r.mu.Lock()
	at := r.workers[label].waitingAt
	r.mu.Unlock()
	if err := r.Pause(ctx, label); err != nil {
		return err
	}
	if release && at != "" {
		return r.proceed(ctx, label, at)
	}
	return nil
}

// thaw resumes a worker and waits until it has settled at a checkpoint.
func (r *Run) thaw(ctx context.Context, label string) error {
	if err := r.Resume(ctx, label); err != nil {
		return err
	}
	return r.waitFor(ctx, label, func(w *workerState) bool { return w.waitingAt != "" })
}

// awaitExpiry waits until the lease on the run's job has run out on the
// database clock: it reads lease_until and now() from Postgres, sleeps the
// difference, and reads again.
func (r *Run) awaitExpiry(ctx context.Context) error {
	for {
		j, err := r.queue.Get(ctx, r.jobID)
		if err != nil {
			return err
		}
		if j.Status != engine.StatusRunning || j.LeaseUntil == nil {
			r.note(ctx, engine.KindNote, "postgres", fmt.Sprintf("Job %d holds no lease (it is %s).", j.ID, j.Status))
			return nil
		}
		if !j.LeaseUntil.After(j.DBTime) {
			r.leaseExpired(ctx, j)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timeAfter(j.LeaseUntil.Sub(j.DBTime)):
		}
	}
}

// Finish plays every remaining step, then stops the workers and evaluates
// the outcome.
func (r *Run) Finish(ctx context.Context) (engine.Outcome, error) {
	for !r.Done() {
		if _, err := r.Step(ctx); err != nil {
			return engine.Outcome{}, err
		}
	}
	return r.Evaluate(ctx)
}
