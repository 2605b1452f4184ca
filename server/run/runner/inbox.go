package runner

import (
	"context"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/control"
)

// A person's commands to a run (step, pause, kill worker B, add a job, the
// verdict...) are carried out by the run itself, one at a time and in the
// order they came, on a goroutine of the run's own (server/run/inbox).

// Do carries out one command to the run: step, finish, pause, play, pace,
// pause-worker, resume-worker, kill-worker, add-job, add-worker or verdict
// (any other action is refused as invalid). Commands to one run are carried
// out one at a time, in the order Do was called, by the run's inbox
// (server/run/inbox); Do waits for its own. ctx bounds the wait and the
// command: a caller that gives up is answered at once, and its command, if
// begun, sees ctx cancelled. With more than a few commands waiting
// already, Do refuses as busy.
func (r *Run) Do(ctx context.Context, c control.Command) (Result, error) {
	return r.in.Do(ctx, string(c.Action), c)
}

// carry carries out one command.
func (r *Run) carry(ctx context.Context, c control.Command) (Result, error) {
	var res Result
	var err error
	switch c.Action {
	case control.Step:
		return r.Step(ctx)
	case control.Finish:
		return r.Finish(ctx)
	case control.Pause:
		err = r.Pause(ctx)
	case control.Play:
		err = r.Play(ctx)
	case control.Pace:
		if c.PaceMS == nil {
			return res, fault.Errorf(fault.Invalid, "pace needs pace_ms")
		}
		err = r.SetPace(ctx, time.Duration(*c.PaceMS)*time.Millisecond)
	case control.PauseWorker:
		err = r.PauseWorker(ctx, c.Worker)
	case control.ResumeWorker:
		err = r.ResumeWorker(ctx, c.Worker)
	case control.KillWorker:
		err = r.KillWorker(ctx, c.Worker)
	case control.AddJob:
		res.JobID, err = r.AddJob(ctx, c.Payload)
	case control.AddWorker:
		res.Worker, err = r.AddWorker(ctx, WorkerOptions{Skew: time.Duration(c.SkewMS) * time.Millisecond, Work: time.Duration(c.WorkMS) * time.Millisecond})
	case control.Verdict:
		var rep protocol.Report
		rep, err = r.Verdict(ctx)
		if err == nil {
			res.Report = &rep
		}
	default:
		err = fault.Errorf(fault.Invalid, "%q is not a command to a run", c.Action)
	}
	return res, err
}
