package runner

import (
	"context"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// Free play: no script. Workers run on their own, with leases and
// heartbeats; a person adds jobs and workers and pauses, resumes and kills
// them, and asks for the verdict on every job whenever they like.

// WorkerOptions configures a worker added to a free-play run.
type WorkerOptions struct {
	// Skew is how far the worker's own clock runs ahead.
	Skew time.Duration
	// Work overrides how long it works on each job.
	Work time.Duration
}

// AddJob inserts a job into a free-play run's queue.
func (r *Run) AddJob(ctx context.Context, payload []byte) (int64, error) {
	if err := r.awaitStart(ctx); err != nil {
		return 0, err
	}
	if r.spec.Mode != protocol.ModeFree {
		return 0, fault.Errorf(fault.Conflict, "jobs can only be added in free play")
	}
	if err := r.endedErr(); err != nil {
		return 0, err
	}
	return r.addJob(ctx, payload)
}

// JobPayload is the payload of a scripted run's job; a check's trial run
// (server/run/check) gives its job the same, so that no statement can tell
// the trial from a run by the job.
const JobPayload = `{"task":"send invoice #1042 to the billing service"}`

func (r *Run) addJob(ctx context.Context, payload []byte) (int64, error) {
	r.mu.Lock()
	if r.jobs >= r.lim.MaxJobs {
		r.mu.Unlock()
		return 0, fault.Errorf(fault.Limit, "this run already has %d jobs, its limit", r.lim.MaxJobs)
	}
	r.jobs++
	r.mu.Unlock()
	id, err := r.queue.Insert(ctx, payload, r.maxAttempts())
	if err != nil {
		r.mu.Lock()
		r.jobs--
		r.mu.Unlock()
		return 0, err
	}
	return id, nil // Postgres reports the new row itself
}

// maxAttempts is how often a run's job may be tried. A script claims its
// job twice at most, within the queue's default of 3; in free play a
// person may freeze and take over a job again and again, and the job must
// go on, as the article's does, rather than end failed once its attempts
// are used up (the engine ends a job whose lease runs out on its last
// attempt).
func (r *Run) maxAttempts() int {
	if r.spec.Mode == protocol.ModeFree {
		return engine.MaxAttemptsCap
	}
	return 0
}

// AddWorker spawns a worker for a free-play run, labelled with the next
// letter, working on its own with leases and renewals.
func (r *Run) AddWorker(ctx context.Context, o WorkerOptions) (string, error) {
	if err := r.awaitStart(ctx); err != nil {
		return "", err
	}
	if r.spec.Mode != protocol.ModeFree {
		return "", fault.Errorf(fault.Conflict, "workers can only be added in free play")
	}
	if err := r.endedErr(); err != nil {
		return "", err
	}
	return r.addWorker(r.receiverURL(), o)
}

func (r *Run) addWorker(receiverURL string, o WorkerOptions) (string, error) {
	if o.Skew < -experiments.MaxSkew || o.Skew > experiments.MaxSkew {
		return "", fault.Errorf(fault.Invalid, "skew %v must be within ±%v", o.Skew, experiments.MaxSkew)
	}
	if o.Work < 0 || o.Work > time.Minute {
		return "", fault.Errorf(fault.Invalid, "work %v must be between 0 and 1m", o.Work)
	}
	if o.Work == 0 {
		o.Work = r.lim.Work
	}
	r.mu.Lock()
	live := 0
	for _, w := range r.workers {
		if !w.exited {
			live++
		}
	}
	n := len(r.order)
	r.mu.Unlock()
	if live >= r.lim.MaxWorkers {
		return "", fault.Errorf(fault.Limit, "this run already has %d live workers, its limit", r.lim.MaxWorkers)
	}
	if n >= 26 {
		return "", fault.Errorf(fault.Limit, "a run has at most 26 workers, A to Z")
	}
	label := nextLabel(n)
	if err := r.spawn(label, ownerFor(label, r.spec.Config.SameIdentity), o.Skew, receiverURL, false, o.Work); err != nil {
		return "", err
	}
	return label, nil
}

func (r *Run) receiverURL() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.receiverAt
}

// Verdict judges every job of a free-play run now, says so as a verdict
// event, and lets the run go on.
func (r *Run) Verdict(ctx context.Context) (protocol.Report, error) {
	if err := r.awaitStart(ctx); err != nil {
		return protocol.Report{}, err
	}
	if r.spec.Mode != protocol.ModeFree {
		return protocol.Report{}, fault.Errorf(fault.Conflict, "a scripted run gives its verdict when it ends")
	}
	if err := r.endedErr(); err != nil {
		return protocol.Report{}, err
	}
	return r.judge(ctx)
}

// judge checks every job and tells the verdict.
func (r *Run) judge(ctx context.Context) (protocol.Report, error) {
	rep, err := judge.ReportJobs(ctx, r.env.Pool, r.spec.Schemas.Jobs, r.receiver, r.lim.MaxJobs)
	if err != nil {
		return rep, err
	}
	r.emit(ctx, protocol.Event{Kind: protocol.KindVerdict, Actor: protocol.ActorRunner, Verdict: &protocol.VerdictEvent{Safe: rep.Safe, Report: &rep}})
	return rep, nil
}
