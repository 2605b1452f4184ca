package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/worker"
)

// Scenario returns the script the run plays.
func (r *Run) Scenario() experiments.Scenario { return r.scenario }

// StepIndex returns the index of the next step to play.
func (r *Run) StepIndex() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next
}

// Result is what a command on a run comes to: the step it played, and at
// the end the outcome or the report.
type Result struct {
	Step    *experiments.Step `json:"step,omitempty"`
	Done    bool              `json:"done,omitempty"`
	Worker  string            `json:"worker,omitempty"` // the worker add-worker started
	JobID   int64             `json:"job_id,omitempty"` // the job add-job inserted
	Outcome *protocol.Outcome `json:"outcome,omitempty"`
	Report  *protocol.Report  `json:"report,omitempty"`
}

// Step plays the next step of the script, pausing an auto run first. The
// last step finishes the run: its Result carries the outcome. Steps are
// played one at a time.
func (r *Run) Step(ctx context.Context) (Result, error) {
	if err := r.awaitStart(ctx); err != nil {
		return Result{}, err
	}
	if r.spec.Mode == protocol.ModeFree {
		return Result{}, fault.Errorf(fault.Conflict, "free play has no steps")
	}
	r.setPaused(true)
	st, last, err := r.step(ctx)
	if err != nil {
		return Result{}, err
	}
	res := Result{Step: &st}
	if last {
		return r.finish(ctx, res)
	}
	return res, nil
}

// Finish plays every step that is left, then evaluates the run and ends
// it; a free-play run is ended and every job judged.
func (r *Run) Finish(ctx context.Context) (Result, error) {
	if err := r.awaitStart(ctx); err != nil {
		return Result{}, err
	}
	if err := r.endedErr(); err != nil {
		return Result{}, err
	}
	if r.spec.Mode == protocol.ModeFree {
		return r.finish(ctx, Result{})
	}
	r.setPaused(true)
	for {
		_, last, err := r.step(ctx)
		if err != nil {
			return Result{}, err
		}
		if last {
			return r.finish(ctx, Result{})
		}
	}
}

// step plays the next step and says whether it was the last. A step that
// fails ends the run.
func (r *Run) step(ctx context.Context) (experiments.Step, bool, error) {
	r.stepMu.Lock()
	defer r.stepMu.Unlock()
	if err := r.endedErr(); err != nil {
		return experiments.Step{}, false, err
	}
	r.mu.Lock()
	total := len(r.scenario.Steps)
	if r.next >= total {
		r.mu.Unlock()
		return experiments.Step{}, true, nil
	}
	i := r.next
	st := r.scenario.Steps[i]
	r.next++
	r.mu.Unlock()

	r.emit(ctx, protocol.Event{Kind: protocol.KindStep, Actor: protocol.ActorRunner, Text: fmt.Sprintf("Step %d of %d: %s", i+1, total, st.Say),
		Step: &protocol.StepEvent{Index: i, Total: total, Action: st.Action, Worker: st.Worker}})
	timeout := r.lim.StepTimeout
	if st.Action == experiments.ActAwaitExpiry {
		timeout += r.spec.Config.Lease
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := r.play(sctx, st); err != nil {
		if err := r.endedErr(); err != nil {
			return st, false, err // stopped in the middle of the step
		}
		err = fmt.Errorf("step %d (%s %s): %w", i+1, st.Action, st.Worker, err)
		r.fail(protocol.ErrStepFailed, &i, err, "")
		return st, false, err
	}
	return st, i+1 == total, nil
}

func (r *Run) play(ctx context.Context, st experiments.Step) error {
	if _, err := r.worker(st.Worker); err != nil {
		return err
	}
	switch st.Action {
	case experiments.ActClaim:
		return r.proceed(ctx, st.Worker, protocol.CheckpointClaim)
	case experiments.ActDeliver:
		return r.proceed(ctx, st.Worker, protocol.CheckpointDeliver)
	case experiments.ActCommit:
		if st.Fail {
			return r.proceedWith(ctx, st.Worker, protocol.CheckpointCommit, worker.CmdFail)
		}
		return r.proceed(ctx, st.Worker, protocol.CheckpointCommit)
	case experiments.ActFreeze:
		return r.freeze(ctx, st.Worker, st.Release)
	case experiments.ActThaw:
		return r.thaw(ctx, st.Worker)
	case experiments.ActKill:
		return r.kill(ctx, st.Worker, protocol.CauseScript)
	case experiments.ActAwaitExpiry:
		return r.awaitExpiry(ctx)
	}
	return fmt.Errorf("unknown action %q", st.Action)
}

func (r *Run) note(ctx context.Context, actor string, n protocol.NoteEvent) {
	r.emit(ctx, protocol.Event{Kind: protocol.KindNote, Actor: actor, Note: &n})
}

// proceed lets a worker past the checkpoint it waits at and waits until it
// settles at the next one. A worker that holds no job skips the job's
// steps; a frozen worker takes the command but cannot act on it until it
// is thawed.
func (r *Run) proceed(ctx context.Context, label string, checkpoint protocol.Checkpoint) error {
	return r.proceedWith(ctx, label, checkpoint, worker.CmdProceed)
}

// proceedWith is proceed with the command that lets the worker go: at the
// commit checkpoint, worker.CmdFail makes it report a failure instead.
func (r *Run) proceedWith(ctx context.Context, label string, checkpoint protocol.Checkpoint, cmd string) error {
	r.mu.Lock()
	w := r.workers[label]
	at, frozen, exited, job := w.waitingAt, w.frozen, w.exited, w.jobID
	r.mu.Unlock()
	switch {
	case exited:
		r.note(ctx, label, protocol.NoteEvent{Code: protocol.NoteGone, Worker: label})
		return nil
	case checkpoint != protocol.CheckpointClaim && job == 0 && at == protocol.CheckpointClaim:
		r.note(ctx, label, protocol.NoteEvent{Code: protocol.NoteSkip, Worker: label})
		return nil
	case at != checkpoint:
		return fault.Errorf(fault.Conflict, "worker %s waits at %q, not %q", label, at, checkpoint)
	}
	// Mark the worker busy before the command goes out: its answer may
	// arrive before Send returns.
	r.mu.Lock()
	w.waitingAt = ""
	before := w.waits
	r.mu.Unlock()
	if err := w.proc.Send(worker.Command{Cmd: cmd, Checkpoint: checkpoint}); err != nil {
		return r.gone(w, err)
	}
	if frozen {
		r.note(ctx, label, protocol.NoteEvent{Code: protocol.NoteWakesLater, Worker: label})
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
	if err := r.pause(ctx, label, protocol.CauseScript); err != nil {
		return err
	}
	if release && at != "" {
		return r.proceed(ctx, label, at)
	}
	return nil
}

// thaw resumes a worker and waits until it has settled at a checkpoint.
func (r *Run) thaw(ctx context.Context, label string) error {
	if err := r.resume(ctx, label, protocol.CauseScript); err != nil {
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
			r.note(ctx, protocol.ActorPostgres, protocol.NoteEvent{Code: protocol.NoteNoLease, JobID: j.ID, Status: string(j.Status)})
			return nil
		}
		if !j.LeaseUntil.After(j.DBTime) {
			r.leaseExpired(ctx, j)
			return nil
		}
		select {
		case <-ctx.Done():
			return fault.Errorf(fault.Unavailable, "the lease did not run out in time")
		case <-time.After(j.LeaseUntil.Sub(j.DBTime) + 2*time.Millisecond):
		}
	}
}

// finish evaluates the run (or judges every job of free play), says the
// verdict and ends the run, once. A run that ended meanwhile answers that
// it has.
func (r *Run) finish(ctx context.Context, res Result) (Result, error) {
	r.stepMu.Lock()
	defer r.stepMu.Unlock()
	if err := r.endedErr(); err != nil {
		if o := r.Outcome(); o != nil {
			res.Done, res.Outcome = true, o
			return res, nil
		}
		return res, err
	}
	r.stopWorkers(ctx)
	if r.spec.Mode == protocol.ModeFree {
		r.drain(ctx)
		rep, err := r.judge(ctx)
		if err != nil {
			r.fail(protocol.ErrEvaluate, nil, err, "")
			return res, err
		}
		r.mu.Lock()
		r.report = &rep
		r.mu.Unlock()
		r.end(protocol.PhaseFinished, "", nil, nil)
		res.Done, res.Report = true, &rep
		return res, nil
	}
	r.drain(ctx)
	r.mu.Lock()
	z := r.workers[experiments.Zombie]
	tried, fence, skipped := z.triedDone, z.fence, z.skipped
	r.mu.Unlock()
	o, err := judge.Evaluate(ctx, r.env.Pool, r.spec.Schemas.Jobs, r.receiver, judge.EvaluateInput{Config: r.spec.Config, JobID: r.jobID,
		ZombieTriedCommit: tried, ZombieFence: fence, ZombieSkipped: skipped})
	if err != nil {
		r.fail(protocol.ErrEvaluate, nil, err, "")
		return res, err
	}
	r.emit(ctx, protocol.Event{Kind: protocol.KindVerdict, Actor: protocol.ActorRunner, Verdict: &protocol.VerdictEvent{Safe: o.Safe, Outcome: &o}})
	r.mu.Lock()
	r.outcome = &o
	r.mu.Unlock()
	r.end(protocol.PhaseFinished, "", nil, nil)
	res.Done, res.Outcome = true, &o
	return res, nil
}
