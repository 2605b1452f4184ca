// Package runner runs a scenario with real worker processes. A scripted
// run plays one of the engine's scripts with two `fencelab worker --step`
// processes driven checkpoint by checkpoint, frozen with SIGSTOP, thawed
// with SIGCONT, killed with SIGKILL, while leases run out on the database
// clock. A free-play run has no script: workers run on their own, and a
// person adds jobs and workers and pauses, resumes and kills them at will.
//
// The runner needs no HTTP of its own: `fencelab run` uses it directly and
// the playground server drives it step by step. Every event of a run goes
// to one EmitFunc, numbered by whoever keeps the log. The outcome is read
// from the database and the receiver, never from what the workers believe.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/supervisor"
	"github.com/fencelab/fencelab/server/worker"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config is what a run needs around it.
type Config struct {
	// ID names the run on every event it emits.
	ID          string
	Run         engine.RunConfig
	Pool        *pgxpool.Pool // for the job, the database clock and the outcome
	DatabaseURL string        // passed to the workers, which connect on their own
	Schemas     engine.Schemas
	ReceiverURL string // where the workers deliver
	// ReceiverView reads the receiver for the outcome. Default: the
	// receiver's schema on Pool.
	ReceiverView engine.ReceiverView
	Supervisor   *supervisor.Supervisor
	// EmitFunc receives every event of the run, one at a time, in order. It
	// must not block for long.
	EmitFunc func(engine.Event)
	// StepTimeout bounds each step beyond any lease it waits for. Default 20s.
	StepTimeout time.Duration
	// MaxWorkers and MaxJobs bound a free-play run. Defaults 6 and 100.
	MaxWorkers int
	MaxJobs    int
	// Work is how long a free-play worker works on each job. Default 3s.
	Work time.Duration
	// MaxStall kills a worker that has been frozen longer. 0: no limit.
	MaxStall time.Duration
	// Poll is how often lease expiry is checked on the database clock.
	// Default 100ms.
	Poll time.Duration
}

// ErrLimit marks an error caused by a bound of the run (workers, jobs).
var ErrLimit = limitError{}

type limitError struct{}

func (limitError) Error() string { return "limit reached" }

// HTTPStatus makes a reached limit a 409 Conflict over HTTP.
func (limitError) HTTPStatus() int { return 409 }

// workerState is what the runner knows of a worker, from its events and
// its process state.
type workerState struct {
	label     string
	owner     string
	skew      time.Duration
	proc      *supervisor.Proc
	waitingAt string // the checkpoint it waits at, "" while busy (step mode)
	waits     int    // how many times it has reported waiting at a checkpoint
	frozen    bool
	frozenAt  time.Time
	exited    bool
	jobID     int64
	epoch     int64
	triedDone bool // it sent a commit (complete or fail) statement
}

// WorkerInfo is a worker as the page and the API show it.
type WorkerInfo struct {
	Label     string `json:"label"`
	Owner     string `json:"owner"`
	Pid       int    `json:"pid"`
	State     string `json:"state"` // from /proc while it lives: running, sleeping, stopped, ...
	Frozen    bool   `json:"frozen"`
	Exited    bool   `json:"exited"`
	WaitingAt string `json:"waiting_at,omitempty"`
	JobID     int64  `json:"job_id,omitempty"`
	Epoch     int64  `json:"epoch,omitempty"`
	SkewMS    int64  `json:"skew_ms,omitempty"`
}

// Run is one run. Its methods are safe for concurrent use; the steps of a
// scripted run are played one at a time.
type Run struct {
	cfg      Config
	scenario engine.Scenario
	queue    *engine.Queue
	receiver engine.ReceiverView
	jobID    int64
	free     bool

	stepMu  sync.Mutex // one step at a time
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change of a worker
	workers map[string]*workerState
	order   []string // labels in the order they were spawned
	next    int      // index of the next step
	closed  bool
	expired map[string]bool     // lease expiries already reported
	leases  map[int64]leaseInfo // each running job's lease, as Postgres last reported it
	jobs    int

	emitMu sync.Mutex
	stop   context.CancelFunc
	bg     sync.WaitGroup
}

func (c *Config) fill() error {
	if err := c.Run.Validate(); err != nil {
		return err
	}
	if err := c.Schemas.Validate(); err != nil {
		return err
	}
	if c.Pool == nil || c.Supervisor == nil || c.DatabaseURL == "" || c.ReceiverURL == "" {
		return errors.New("runner: Pool, Supervisor, DatabaseURL and ReceiverURL are required")
	}
	if c.StepTimeout == 0 {
		c.StepTimeout = 20 * time.Second
	}
	if c.EmitFunc == nil {
		c.EmitFunc = func(engine.Event) {}
	}
	if c.MaxWorkers == 0 {
		c.MaxWorkers = 6
	}
	if c.MaxJobs == 0 {
		c.MaxJobs = 100
	}
	if c.Work == 0 {
		c.Work = 3 * time.Second
	}
	if c.Poll == 0 {
		c.Poll = 100 * time.Millisecond
	}
	return nil
}

// Start validates cfg, inserts the scenario's job and spawns its workers:
// A and B waiting at their first checkpoint for a scripted run; A and B
// working on their own for free play. The caller must Close the run.
func Start(ctx context.Context, cfg Config) (*Run, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	sc, err := engine.Script(cfg.Run.Ordering)
	if err != nil {
		return nil, err
	}
	q, err := engine.NewQueue(cfg.Pool, engine.QueueConfig{Schema: cfg.Schemas.Jobs, Guards: cfg.Run.Broken})
	if err != nil {
		return nil, err
	}
	rv := cfg.ReceiverView
	if rv == nil {
		rcv, err := engine.NewReceiver(cfg.Pool, engine.ReceiverConfig{Schema: cfg.Schemas.Receiver, Guards: cfg.Run.Broken})
		if err != nil {
			return nil, err
		}
		rv = rcv
	}
	r := &Run{cfg: cfg, scenario: sc, queue: q, receiver: rv, free: cfg.Run.Ordering == engine.FreePlay,
		changed: make(chan struct{}), workers: map[string]*workerState{}, expired: map[string]bool{}, leases: map[int64]leaseInfo{}}
	bgctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop = stop

	r.note(ctx, engine.KindStep, "", fmt.Sprintf("Run: %s. %s.", sc.Title, cfg.Run.String()))
	if err := r.listen(bgctx); err != nil {
		r.Close()
		return nil, err
	}
	r.bg.Add(1)
	go r.watch(bgctx)

	if r.free {
		for range 2 {
			if _, err := r.AddWorker(ctx, WorkerOptions{}); err != nil {
				r.Close()
				return nil, err
			}
		}
		return r, nil
	}
	id, err := r.AddJob(ctx, []byte(`{"task":"send invoice #1042 to the billing service"}`))
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("start run: %w", err)
	}
	r.jobID = id
	for _, label := range []string{engine.Zombie, engine.NewOwner} {
		if err := r.spawn(label, cfg.Run.Owner(label), cfg.Run.WorkerSkew(label), true, 0); err != nil {
			r.Close()
			return nil, err
		}
	}
	ctx2, cancel := context.WithTimeout(ctx, cfg.StepTimeout)
	defer cancel()
	for _, label := range []string{engine.Zombie, engine.NewOwner} {
		if err := r.waitFor(ctx2, label, func(w *workerState) bool { return w.waitingAt == worker.CheckpointClaim }); err != nil {
			r.Close()
			return nil, fmt.Errorf("start run: worker %s never became ready: %w", label, err)
		}
	}
	return r, nil
}

// ID returns the run's id.
func (r *Run) ID() string { return r.cfg.ID }

// Config returns the run's settings.
func (r *Run) Config() engine.RunConfig { return r.cfg.Run }

// spawn starts a worker process and waits for nothing.
func (r *Run) spawn(label, owner string, skew time.Duration, step bool, work time.Duration) error {
	c := r.cfg.Run
	args := []string{
		"--schema", r.cfg.Schemas.Jobs,
		"--receiver", r.cfg.ReceiverURL,
		"--name", owner,
		"--lease", c.Lease.String(),
	}
	if step {
		args = append(args, "--step")
	} else {
		args = append(args, "--work", work.String(), "--poll", "200ms")
	}
	for _, g := range c.Broken.Broken() {
		args = append(args, "--break", g.String())
	}
	if skew != 0 {
		args = append(args, "--skew", skew.String())
	}
	ws := &workerState{label: label, owner: owner, skew: skew}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return errors.New("the run is over")
	}
	r.workers[label] = ws
	r.order = append(r.order, label)
	r.mu.Unlock()
	// The connection string goes in the environment, not on the command
	// line, where any local user could read its password.
	p, err := r.cfg.Supervisor.Start(supervisor.Spec{Label: label, Args: args, Env: []string{"DATABASE_URL=" + r.cfg.DatabaseURL},
		EventFunc: r.onWorkerEvent})
	if err != nil {
		r.mu.Lock()
		delete(r.workers, label)
		r.order = r.order[:len(r.order)-1]
		r.mu.Unlock()
		return err
	}
	r.mu.Lock()
	ws.proc = p
	r.mu.Unlock()
	text := fmt.Sprintf("Worker %s is spawned as a real process (pid %d), claiming as %s.", label, p.Pid, owner)
	if skew != 0 {
		text = strings.TrimSuffix(text, ".") + fmt.Sprintf("; its own clock runs %v ahead.", skew)
	}
	r.emit(context.Background(), engine.Event{Kind: engine.KindProcess, Actor: label, Pid: p.Pid, State: "running", Outcome: "spawned", Owner: owner, Text: text})
	return nil
}

// onWorkerEvent passes a worker's event on, then updates what the runner
// knows of the worker. In that order: a step that waits on this event must
// not report its end before the event itself is in the log.
func (r *Run) onWorkerEvent(p *supervisor.Proc, e engine.Event) {
	if e.Kind == engine.KindSQL && e.Name == "JobClaim" && e.Rows != nil && *e.Rows == 1 && e.Epoch != nil {
		r.takeover(e.JobID, *e.Epoch, e.At)
	}
	r.emit(context.Background(), e)
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[p.Label]
	if w == nil {
		return
	}
	switch {
	case e.Kind == engine.KindProcess && e.Outcome == "exited":
		w.exited, w.waitingAt, w.frozen = true, "", false
	case e.Kind == engine.KindCheckpoint && e.Outcome == "waiting":
		w.waitingAt = e.Name
		w.waits++
		if e.Name == worker.CheckpointClaim {
			w.jobID, w.epoch = 0, 0
		}
	case e.Kind == engine.KindSQL && e.Name == "JobClaim" && e.Rows != nil && *e.Rows == 1:
		w.jobID, w.epoch = e.JobID, *e.Epoch
	case e.Kind == engine.KindSQL && (e.Name == "JobComplete" || e.Name == "JobFail"):
		w.triedDone = true
		if r.free {
			w.jobID, w.epoch = 0, 0
		}
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// Emit adds an event from outside the run — the receiver's decisions —
// to the run's events, in order with the rest.
func (r *Run) Emit(ctx context.Context, e engine.Event) { r.emit(ctx, e) }

// emit stamps an event with the run's id and, when it has no database
// time, with the database clock, and hands it on, one at a time.
func (r *Run) emit(ctx context.Context, e engine.Event) {
	e.Run = r.cfg.ID
	if e.At.IsZero() {
		e.At = r.dbNow(ctx)
	}
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	r.cfg.EmitFunc(e)
}

func (r *Run) dbNow(ctx context.Context) time.Time {
	st := engine.ClockNow()
	var t time.Time
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := r.cfg.Pool.QueryRow(ctx, st.SQL).Scan(&t); err != nil {
		return time.Now() // the database is gone; the event still needs a time
	}
	return t
}

func (r *Run) note(ctx context.Context, kind engine.Kind, actor, text string) {
	if actor == "" {
		actor = "runner"
	}
	r.emit(ctx, engine.Event{Kind: kind, Actor: actor, Text: text})
}

// waitFor blocks until cond holds for the worker, or ctx ends.
func (r *Run) waitFor(ctx context.Context, label string, cond func(*workerState) bool) error {
	for {
		r.mu.Lock()
		w := r.workers[label]
		if w == nil {
			r.mu.Unlock()
			return fmt.Errorf("no worker %s", label)
		}
		ok := cond(w)
		exited, frozen := w.exited, w.frozen
		ch := r.changed
		r.mu.Unlock()
		switch {
		case ok:
			return nil
		case exited:
			return fmt.Errorf("worker %s has exited", label)
		case frozen:
			// Paused by hand in the middle of a step: the step is over as
			// far as the runner can tell; the worker goes on when resumed.
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (r *Run) worker(label string) (*workerState, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[label]
	if w == nil || w.proc == nil {
		return nil, fmt.Errorf("%w: no worker %q in this run", engine.ErrInvalidInput, label)
	}
	return w, nil
}

// Workers describes every worker of the run, its state read from /proc.
func (r *Run) Workers() []WorkerInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]WorkerInfo, 0, len(r.order))
	for _, l := range r.order {
		w := r.workers[l]
		wi := WorkerInfo{Label: l, Owner: w.owner, Frozen: w.frozen, Exited: w.exited, WaitingAt: w.waitingAt,
			JobID: w.jobID, Epoch: w.epoch, SkewMS: w.skew.Milliseconds()}
		if w.proc != nil {
			wi.Pid = w.proc.Pid
			wi.State = w.proc.Status().String()
		}
		out = append(out, wi)
	}
	return out
}

// Pause freezes a worker with SIGSTOP and returns once /proc shows it stopped.
func (r *Run) Pause(ctx context.Context, label string) error {
	w, err := r.worker(label)
	if err != nil {
		return err
	}
	r.mu.Lock()
	exited, frozen := w.exited, w.frozen
	r.mu.Unlock()
	switch {
	case exited:
		return fmt.Errorf("%w: worker %s has exited", engine.ErrInvalidInput, label)
	case frozen:
		return fmt.Errorf("%w: worker %s is already paused", engine.ErrInvalidInput, label)
	}
	if err := w.proc.Pause(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	w.frozen, w.frozenAt = true, time.Now()
	r.mu.Unlock()
	st := w.proc.Status().String()
	r.emit(ctx, engine.Event{Kind: engine.KindProcess, Actor: label, Pid: w.proc.Pid, State: st, Outcome: "stopped",
		Text: fmt.Sprintf("Worker %s (pid %d) is frozen by SIGSTOP: /proc says %q. Its heartbeat stops with it.", label, w.proc.Pid, st)})
	return nil
}

// Resume thaws a frozen worker with SIGCONT.
func (r *Run) Resume(ctx context.Context, label string) error {
	w, err := r.worker(label)
	if err != nil {
		return err
	}
	r.mu.Lock()
	exited, frozen := w.exited, w.frozen
	r.mu.Unlock()
	switch {
	case exited:
		return fmt.Errorf("%w: worker %s has exited", engine.ErrInvalidInput, label)
	case !frozen:
		return fmt.Errorf("%w: worker %s is not paused", engine.ErrInvalidInput, label)
	}
	if err := w.proc.Resume(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	w.frozen = false
	r.mu.Unlock()
	st := w.proc.Status().String()
	r.emit(ctx, engine.Event{Kind: engine.KindProcess, Actor: label, Pid: w.proc.Pid, State: st, Outcome: "continued",
		Text: fmt.Sprintf("Worker %s (pid %d) is thawed by SIGCONT (/proc says %q) and carries on as if no time had passed.", label, w.proc.Pid, st)})
	return nil
}

// Kill kills a worker with SIGKILL and returns once it is reaped.
func (r *Run) Kill(ctx context.Context, label string) error {
	w, err := r.worker(label)
	if err != nil {
		return err
	}
	r.mu.Lock()
	exited := w.exited
	r.mu.Unlock()
	if exited {
		return fmt.Errorf("%w: worker %s has already exited", engine.ErrInvalidInput, label)
	}
	r.emit(ctx, engine.Event{Kind: engine.KindProcess, Actor: label, Pid: w.proc.Pid, Outcome: "killing",
		Text: fmt.Sprintf("Worker %s (pid %d) is sent SIGKILL.", label, w.proc.Pid)})
	if err := w.proc.Kill(ctx); err != nil {
		return err
	}
	// Wait for the exit event itself, frozen or not, so it is in the log
	// before the kill is reported done.
	for {
		r.mu.Lock()
		exited, ch := w.exited, r.changed
		r.mu.Unlock()
		if exited {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// leaseInfo is a lease as Postgres last reported it.
type leaseInfo struct {
	epoch int64
	owner string
	until time.Time
}

// noteLease keeps track of each running job's lease from the row changes
// Postgres reports; before a claim takes a job over, it reports the lease
// that ran out, if the watcher has not seen it yet.
func (r *Run) noteLease(ctx context.Context, c rowChange) {
	switch c.Op {
	case "claim":
		r.takeover(c.JobID, c.Epoch, c.At)
		fallthrough
	case "renew":
		if c.LeaseUntil != nil {
			owner := ""
			if c.Owner != nil {
				owner = *c.Owner
			}
			r.mu.Lock()
			r.leases[c.JobID] = leaseInfo{epoch: c.Epoch, owner: owner, until: *c.LeaseUntil}
			r.mu.Unlock()
		}
	default:
		r.mu.Lock()
		delete(r.leases, c.JobID)
		r.mu.Unlock()
	}
}

// takeover reports the lease a new claim of a job replaced, if it had run
// out on the database clock by the time of the claim: a claim can beat the
// watcher to an expired lease, and the log must still say it ran out.
func (r *Run) takeover(jobID, epoch int64, at time.Time) {
	r.mu.Lock()
	old, ok := r.leases[jobID]
	r.mu.Unlock()
	if !ok || at.IsZero() || old.until.After(at) || (old.epoch == epoch && epoch != 0) {
		return
	}
	until := old.until
	r.leaseExpired(context.Background(), engine.Job{ID: jobID, Epoch: old.epoch, Owner: old.owner, LeaseUntil: &until, DBTime: at})
}

// leaseExpired reports a lease that ran out on the database clock, once.
func (r *Run) leaseExpired(ctx context.Context, j engine.Job) {
	key := fmt.Sprintf("%d/%d/%d", j.ID, j.Epoch, j.LeaseUntil.UnixMicro())
	r.mu.Lock()
	seen := r.expired[key]
	r.expired[key] = true
	holder := ""
	for _, l := range r.order {
		if w := r.workers[l]; w.jobID == j.ID && w.epoch == j.Epoch {
			holder = l
		}
	}
	r.mu.Unlock()
	if seen {
		return
	}
	who := j.Owner
	if holder != "" {
		who = "worker " + holder
	}
	r.emit(ctx, engine.Event{Kind: engine.KindLease, Actor: "postgres", At: j.DBTime, JobID: j.ID, Epoch: engine.Int64(j.Epoch),
		Owner: j.Owner, LeaseUntil: j.LeaseUntil, Outcome: "expired",
		Text: fmt.Sprintf("Job %d's lease (epoch %d, %s) ran out on the database clock: lease_until %s < now() %s. The job is claimable again.",
			j.ID, j.Epoch, who, j.LeaseUntil.UTC().Format("15:04:05.000"), j.DBTime.UTC().Format("15:04:05.000"))})
}

// watch reports lease expiries as the database clock passes them, and
// kills a worker frozen longer than MaxStall.
func (r *Run) watch(ctx context.Context) {
	defer r.bg.Done()
	t := time.NewTicker(r.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		jobs, err := r.queue.Expired(ctx)
		if err == nil {
			for _, j := range jobs {
				r.leaseExpired(ctx, j)
			}
		}
		if r.cfg.MaxStall > 0 {
			r.killStalled(ctx)
		}
	}
}

func (r *Run) killStalled(ctx context.Context) {
	r.mu.Lock()
	var stalled []string
	for _, l := range r.order {
		if w := r.workers[l]; w.frozen && !w.exited && time.Since(w.frozenAt) > r.cfg.MaxStall {
			stalled = append(stalled, l)
		}
	}
	r.mu.Unlock()
	for _, l := range stalled {
		r.note(ctx, engine.KindNote, l, fmt.Sprintf("Worker %s has been frozen for longer than %v, this server's limit: it is killed.", l, r.cfg.MaxStall))
		kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = r.Kill(kctx, l)
		cancel()
	}
}

// AddJob inserts a job into the run's queue.
func (r *Run) AddJob(ctx context.Context, payload []byte) (int64, error) {
	r.mu.Lock()
	if r.jobs >= r.cfg.MaxJobs {
		r.mu.Unlock()
		return 0, fmt.Errorf("%w: this run already has %d jobs, its limit", ErrLimit, r.cfg.MaxJobs)
	}
	r.jobs++
	r.mu.Unlock()
	id, err := r.queue.Insert(ctx, payload, 0)
	if err != nil {
		r.mu.Lock()
		r.jobs--
		r.mu.Unlock()
		return 0, err
	}
	return id, nil // Postgres reports the new row itself
}

// WorkerOptions configures a worker added to a free-play run.
type WorkerOptions struct {
	// Skew is how far the worker's own clock runs ahead.
	Skew time.Duration
	// Work overrides how long it works on each job.
	Work time.Duration
}

// AddWorker spawns a worker for a free-play run, labelled with the next
// letter, working on its own with leases and renewals.
func (r *Run) AddWorker(ctx context.Context, o WorkerOptions) (string, error) {
	if !r.free {
		return "", fmt.Errorf("%w: workers can only be added in free play", engine.ErrInvalidInput)
	}
	if o.Skew < -engine.MaxSkew || o.Skew > engine.MaxSkew {
		return "", fmt.Errorf("%w: skew %v must be within ±%v", engine.ErrInvalidInput, o.Skew, engine.MaxSkew)
	}
	if o.Work < 0 || o.Work > time.Minute {
		return "", fmt.Errorf("%w: work %v must be between 0 and 1m", engine.ErrInvalidInput, o.Work)
	}
	if o.Work == 0 {
		o.Work = r.cfg.Work
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
	if live >= r.cfg.MaxWorkers {
		return "", fmt.Errorf("%w: this run already has %d live workers, its limit", ErrLimit, r.cfg.MaxWorkers)
	}
	if n >= 26 {
		return "", fmt.Errorf("%w: a run has at most 26 workers, A to Z", ErrLimit)
	}
	label := string(rune('A' + n))
	owner := "worker-" + strings.ToLower(label)
	if r.cfg.Run.SameIdentity {
		owner = "worker-a"
	}
	if err := r.spawn(label, owner, o.Skew, false, o.Work); err != nil {
		return "", err
	}
	return label, nil
}

// Report checks every job of the run against the invariants.
func (r *Run) Report(ctx context.Context) (engine.Report, error) {
	return engine.ReportJobs(ctx, r.queue, r.receiver, r.cfg.MaxJobs)
}

// Jobs reads the run's jobs as the database holds them.
func (r *Run) Jobs(ctx context.Context) ([]engine.Job, error) {
	return r.queue.List(ctx, r.cfg.MaxJobs)
}

// stopWorkers asks idle step-mode workers to exit and kills the rest.
func (r *Run) stopWorkers(ctx context.Context) {
	r.mu.Lock()
	var all []*workerState
	for _, l := range r.order {
		all = append(all, r.workers[l])
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range all {
		if w.proc == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.mu.Lock()
			frozen, at := w.frozen, w.waitingAt
			r.mu.Unlock()
			if !frozen && at != "" {
				_ = w.proc.Send(worker.Command{Cmd: "stop"})
				select {
				case <-w.proc.Done():
					return
				case <-time.After(2 * time.Second):
				}
			}
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = w.proc.Kill(kctx)
			cancel()
		}()
	}
	wg.Wait()
}

// Close stops the run's watchers and kills whatever workers are left. It
// is safe to call more than once.
func (r *Run) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	r.stopWorkers(context.Background())
	if r.stop != nil {
		r.stop()
	}
	r.bg.Wait()
}

// Evaluate stops the workers and reads the outcome from the database and
// the receiver. It reports the verdict as an event. For free play it
// returns the zero Outcome and reports on every job instead (see Report).
func (r *Run) Evaluate(ctx context.Context) (engine.Outcome, error) {
	r.stopWorkers(ctx)
	if r.free {
		rep, err := r.Report(ctx)
		if err != nil {
			return engine.Outcome{}, err
		}
		data, _ := json.Marshal(rep)
		r.emit(ctx, engine.Event{Kind: engine.KindVerdict, Actor: "runner", Outcome: safeWord(rep.Safe), Text: rep.Verdict, Data: data})
		return engine.Outcome{}, nil
	}
	r.mu.Lock()
	tried := r.workers[engine.Zombie].triedDone
	r.mu.Unlock()
	o, err := engine.Evaluate(ctx, r.queue, r.receiver, engine.EvaluateInput{Config: r.cfg.Run, JobID: r.jobID, ZombieTriedCommit: tried})
	if err != nil {
		return o, err
	}
	data, _ := json.Marshal(o)
	r.emit(ctx, engine.Event{Kind: engine.KindVerdict, Actor: "runner", Outcome: safeWord(o.Safe), Text: o.Verdict, Data: data})
	return o, nil
}

func safeWord(safe bool) string {
	if safe {
		return "safe"
	}
	return "unsafe"
}
