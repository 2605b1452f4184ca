package runner

import (
	"context"
	"sync"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/control"
)

// The inbox: a person's commands to a run (step, pause, kill worker B, add
// a job, the verdict...) are carried out by the run itself, one at a time
// and in the order they came, on a goroutine of the run's own. The caller
// hands a command over and waits for the reply; it never walks through the
// run's steps, workers and judge itself. Six clicks at once are six orders
// in a line, not six goroutines racing through one run.

// maxWaiting bounds the orders in a run's line, beyond the one being
// carried out.
const maxWaiting = 16

// order is one command in a run's line, with where its reply goes.
type order struct {
	ctx   context.Context
	cmd   control.Command
	reply chan reply // buffered: the run never waits for a caller
}

type reply struct {
	res Result
	err error
}

// inbox is a run's line of orders. A goroutine serves it while it holds
// any, and is gone once it is empty: an idle run has none.
type inbox struct {
	mu      sync.Mutex
	line    []*order
	serving bool
}

// Do carries out one command to the run: step, finish, pause, play, pace,
// pause-worker, resume-worker, kill-worker, add-job, add-worker or verdict
// (any other action is refused as invalid). Commands to one run are carried
// out one at a time, in the order Do was called; Do waits for its own. ctx
// bounds the wait and the command: a caller that gives up is answered at
// once, and its command, if begun, sees ctx cancelled. With more than a
// few commands waiting already, Do refuses as busy.
func (r *Run) Do(ctx context.Context, c control.Command) (Result, error) {
	o := &order{ctx: ctx, cmd: c, reply: make(chan reply, 1)}
	r.in.mu.Lock()
	if len(r.in.line) >= maxWaiting {
		r.in.mu.Unlock()
		return Result{}, fault.Errorf(fault.Busy, "run %s has %d commands waiting already: try again when they are done", r.spec.ID, maxWaiting)
	}
	r.in.line = append(r.in.line, o)
	if !r.in.serving {
		r.in.serving = true
		go r.serve()
	}
	r.in.mu.Unlock()
	select {
	case rp := <-o.reply:
		return rp.res, rp.err
	case <-ctx.Done():
		return Result{}, fault.Errorf(fault.Unavailable, "the command %s to run %s was given up before it was done", c.Action, r.spec.ID)
	}
}

// serve carries out the orders in the line until it is empty. An order
// whose caller has given up is skipped.
func (r *Run) serve() {
	for {
		r.in.mu.Lock()
		if len(r.in.line) == 0 {
			r.in.serving = false
			r.in.mu.Unlock()
			return
		}
		o := r.in.line[0]
		r.in.line = r.in.line[1:]
		r.in.mu.Unlock()
		if o.ctx.Err() != nil {
			continue
		}
		res, err := r.carry(o.ctx, o.cmd)
		o.reply <- reply{res, err}
	}
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
