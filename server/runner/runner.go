// Package runner plays a scenario script with real worker processes: two
// `fencelab worker --step` processes driven checkpoint by checkpoint, frozen
// with SIGSTOP, thawed with SIGCONT, killed with SIGKILL, while leases run
// out on the database clock. It needs no HTTP of its own: `fencelab run`
// uses it directly, and the playground server drives it step by step.
//
// The outcome of a run is read from the database and the receiver by
// engine.Evaluate, never from what the workers believe.
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
	Run         engine.RunConfig
	Pool        *pgxpool.Pool // for the job, the database clock and the outcome
	DatabaseURL string        // passed to the workers, which connect on their own
	Schemas     engine.Schemas
	ReceiverURL string // where the workers deliver
	Supervisor  *supervisor.Supervisor
	// EmitFunc receives every event of the run in order. It is called from
	// several goroutines, one at a time, and must not block for long.
	EmitFunc func(engine.Event)
	// StepTimeout bounds each step beyond any lease it waits for. Default 20s.
	StepTimeout time.Duration
}

// workerState is what the runner knows of a worker, from its events and
// its process state.
type workerState struct {
	proc      *supervisor.Proc
	ready     bool
	waitingAt string // the checkpoint it waits at, "" while busy
	waits     int    // how many times it has reported waiting at a checkpoint
	released  bool   // let past a checkpoint while frozen
	frozen    bool
	exited    bool
	jobID     int64
	epoch     int64
	triedDone bool // it sent a commit (complete or fail) statement
}

// Run is one run of a scenario. Its methods are safe to call from one
// goroutine at a time; events arrive on other goroutines.
type Run struct {
	cfg      Config
	scenario engine.Scenario
	queue    *engine.Queue
	receiver *engine.Receiver
	jobID    int64

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change of a worker
	workers map[string]*workerState
	next    int // index of the next step
	emitMu  sync.Mutex
	closed  bool
	outcome *engine.Outcome
}

// Start validates cfg, inserts the scenario's job, spawns workers A and B
// and waits until both are ready to claim. The caller must Close the run.
func Start(ctx context.Context, cfg Config) (*Run, error) {
	if err := cfg.Run.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Schemas.Validate(); err != nil {
		return nil, err
	}
	if cfg.StepTimeout == 0 {
		cfg.StepTimeout = 20 * time.Second
	}
	if cfg.EmitFunc == nil {
		cfg.EmitFunc = func(engine.Event) {}
	}
	sc, err := engine.Script(cfg.Run.Ordering)
	if err != nil {
		return nil, err
	}
	q, err := engine.NewQueue(cfg.Pool, engine.QueueConfig{Schema: cfg.Schemas.Jobs, Guards: cfg.Run.Broken})
	if err != nil {
		return nil, err
	}
	rcv, err := engine.NewReceiver(cfg.Pool, engine.ReceiverConfig{Schema: cfg.Schemas.Receiver, Guards: cfg.Run.Broken})
	if err != nil {
		return nil, err
	}
	r := &Run{cfg: cfg, scenario: sc, queue: q, receiver: rcv, changed: make(chan struct{}), workers: map[string]*workerState{}}

	r.note(ctx, engine.KindStep, "", fmt.Sprintf("Run: %s. %s.", sc.Title, cfg.Run.String()))
	id, err := q.Insert(ctx, []byte(`{"task":"send invoice #1042 to the billing service"}`), 0)
	if err != nil {
		return nil, fmt.Errorf("start run: %w", err)
	}
	r.jobID = id
	r.note(ctx, engine.KindNote, "postgres", fmt.Sprintf("Job %d is inserted, pending, at epoch 0.", id))

	for _, label := range []string{engine.Zombie, engine.NewOwner} {
		if err := r.spawn(label); err != nil {
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

func (r *Run) spawn(label string) error {
	c := r.cfg.Run
	args := []string{
		"--step",
		"--database-url", r.cfg.DatabaseURL,
		"--schema", r.cfg.Schemas.Jobs,
		"--receiver", r.cfg.ReceiverURL,
		"--name", c.Owner(label),
		"--lease", c.Lease.String(),
	}
	for _, g := range c.Broken.Broken() {
		args = append(args, "--break", g.String())
	}
	if s := c.WorkerSkew(label); s != 0 {
		args = append(args, "--skew", s.String())
	}
	ws := &workerState{}
	r.mu.Lock()
	r.workers[label] = ws
	r.mu.Unlock()
	p, err := r.cfg.Supervisor.Start(supervisor.Spec{Label: label, Args: args, EventFunc: r.onWorkerEvent})
	if err != nil {
		return err
	}
	r.mu.Lock()
	ws.proc = p
	r.mu.Unlock()
	r.emit(context.Background(), engine.Event{Kind: engine.KindProcess, Actor: label, Pid: p.Pid, State: "running", Outcome: "spawned",
		Text: fmt.Sprintf("Worker %s is spawned as a real process (pid %d), claiming as %s.", label, p.Pid, c.Owner(label))})
	return nil
}

// onWorkerEvent passes a worker's event on, then updates what the runner
// knows of the worker. In that order: a step that waits on this event must
// not report its end before the event itself is in the log.
func (r *Run) onWorkerEvent(p *supervisor.Proc, e engine.Event) {
	r.emit(context.Background(), e)
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[p.Label]
	if w == nil {
		return
	}
	switch {
	case e.Kind == engine.KindProcess && e.Outcome == "ready":
		w.ready = true
	case e.Kind == engine.KindProcess && e.Outcome == "exited":
		w.exited, w.waitingAt = true, ""
	case e.Kind == engine.KindCheckpoint && e.Outcome == "waiting":
		w.waitingAt, w.released = e.Name, false
		w.waits++
		if e.Name == worker.CheckpointClaim {
			w.jobID, w.epoch = 0, 0
		}
	case e.Kind == engine.KindSQL && e.Name == "JobClaim" && e.Rows != nil && *e.Rows == 1:
		w.jobID, w.epoch = e.JobID, *e.Epoch
	case e.Kind == engine.KindSQL && (e.Name == "JobComplete" || e.Name == "JobFail"):
		w.triedDone = true
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// emit stamps an event that has no database time with the database clock
// and hands it on. Events reach EmitFunc one at a time.
func (r *Run) emit(ctx context.Context, e engine.Event) {
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
		ok := cond(w)
		exited := w.exited
		ch := r.changed
		r.mu.Unlock()
		if ok {
			return nil
		}
		if exited {
			return fmt.Errorf("worker %s has exited", label)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// JobID returns the run's job.
func (r *Run) JobID() int64 { return r.jobID }

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

// Step plays the next step of the script and returns it. It returns
// io.EOF-like ErrDone when every step has been played.
func (r *Run) Step(ctx context.Context) (engine.Step, error) {
	r.mu.Lock()
	if r.next >= len(r.scenario.Steps) {
		r.mu.Unlock()
		return engine.Step{}, ErrDone
	}
	i := r.next
	st := r.scenario.Steps[i]
	r.next++
	r.mu.Unlock()

	r.emit(ctx, engine.Event{Kind: engine.KindStep, Actor: "runner", Name: string(st.Action),
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

// ErrDone is returned by Step once the script is over.
var ErrDone = errors.New("the run has no steps left")

func (r *Run) worker(label string) *workerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.workers[label]
}

func (r *Run) play(ctx context.Context, st engine.Step) error {
	w := r.worker(st.Worker)
	if w == nil {
		return fmt.Errorf("no worker %q", st.Worker)
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
		return r.kill(ctx, st.Worker)
	case engine.ActAwaitExpiry:
		return r.awaitExpiry(ctx, st.Worker)
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
	w.released = frozen
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

func (r *Run) freeze(ctx context.Context, label string, release bool) error {
	w := r.worker(label)
	if err := w.proc.Pause(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	w.frozen = true
	at := w.waitingAt
	r.mu.Unlock()
	r.emit(ctx, engine.Event{Kind: engine.KindProcess, Actor: label, Pid: w.proc.Pid, State: w.proc.Status().String(), Outcome: "stopped",
		Text: fmt.Sprintf("Worker %s (pid %d) is frozen by SIGSTOP: /proc says %q.", label, w.proc.Pid, w.proc.Status().String())})
	if release && at != "" {
		return r.proceed(ctx, label, at)
	}
	return nil
}

func (r *Run) thaw(ctx context.Context, label string) error {
	w := r.worker(label)
	if err := w.proc.Resume(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	w.frozen = false
	r.mu.Unlock()
	r.emit(ctx, engine.Event{Kind: engine.KindProcess, Actor: label, Pid: w.proc.Pid, State: w.proc.Status().String(), Outcome: "continued",
		Text: fmt.Sprintf("Worker %s (pid %d) is thawed by SIGCONT and carries on as if no time had passed.", label, w.proc.Pid)})
	return r.waitFor(ctx, label, func(w *workerState) bool { return w.waitingAt != "" })
}

func (r *Run) kill(ctx context.Context, label string) error {
	w := r.worker(label)
	if err := w.proc.Kill(ctx); err != nil {
		return err
	}
	return r.waitFor(ctx, label, func(w *workerState) bool { return w.exited })
}

// awaitExpiry waits until the lease on the worker's job has run out on the
// database clock: it reads lease_until and now() from Postgres, sleeps the
// difference, and reads again.
func (r *Run) awaitExpiry(ctx context.Context, label string) error {
	for {
		j, err := r.queue.Get(ctx, r.jobID)
		if err != nil {
			return err
		}
		if j.Status != engine.StatusRunning || j.LeaseUntil == nil || !j.LeaseUntil.After(j.DBTime) {
			lease := "no lease"
			if j.LeaseUntil != nil {
				lease = fmt.Sprintf("lease_until %s < now() %s", j.LeaseUntil.UTC().Format("15:04:05.000"), j.DBTime.UTC().Format("15:04:05.000"))
			}
			r.emit(ctx, engine.Event{Kind: engine.KindLease, Actor: "postgres", At: j.DBTime, JobID: j.ID, Epoch: engine.Int64(j.Epoch),
				Owner: j.Owner, LeaseUntil: j.LeaseUntil, Outcome: "expired",
				Text: fmt.Sprintf("Job %d's lease (epoch %d, %s) has run out on the database clock: %s.", j.ID, j.Epoch, j.Owner, lease)})
			return nil
		}
		wait := j.LeaseUntil.Sub(j.DBTime) + 2*time.Millisecond
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
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

// Evaluate stops the workers and reads the outcome from the database and
// the receiver. It reports the verdict as an event.
func (r *Run) Evaluate(ctx context.Context) (engine.Outcome, error) {
	r.stopWorkers(ctx)
	r.mu.Lock()
	tried := r.workers[engine.Zombie].triedDone
	r.mu.Unlock()
	o, err := engine.Evaluate(ctx, r.queue, r.receiver, engine.EvaluateInput{Config: r.cfg.Run, JobID: r.jobID, ZombieTriedCommit: tried})
	if err != nil {
		return o, err
	}
	r.mu.Lock()
	r.outcome = &o
	r.mu.Unlock()
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

// stopWorkers asks idle workers to exit and kills the rest.
func (r *Run) stopWorkers(ctx context.Context) {
	r.mu.Lock()
	var all []*workerState
	for _, w := range r.workers {
		all = append(all, w)
	}
	r.mu.Unlock()
	for _, w := range all {
		if w.proc == nil {
			continue
		}
		r.mu.Lock()
		frozen, at := w.frozen, w.waitingAt
		r.mu.Unlock()
		if !frozen && at != "" {
			_ = w.proc.Send(worker.Command{Cmd: "stop"})
			select {
			case <-w.proc.Done():
				continue
			case <-time.After(2 * time.Second):
			}
		}
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = w.proc.Kill(kctx)
		cancel()
	}
}

// Close kills whatever workers are left. It is safe to call twice.
func (r *Run) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	r.stopWorkers(context.Background())
}

// Table renders an outcome as the article's table row.
func Table(o engine.Outcome) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s  %-26s  %-15s  %s\n", "ordering", "zombie's receiver call", "zombie's commit", "final state")
	fmt.Fprintf(&b, "%-20s  %-26s  %-15s  %s\n", o.Ordering, o.ZombieReceiverCall.Words(), o.ZombieCommit.Words(), FinalWords(o))
	return b.String()
}

// FinalWords says the final state as the article's table does.
func FinalWords(o engine.Outcome) string {
	row, rcv := workerName(o.Final.ResultFrom), workerName(o.Receiver.PayloadFrom)
	s := fmt.Sprintf("epoch %d, ", o.Final.Epoch)
	if row == rcv {
		s += fmt.Sprintf("%s's result in the row and at the receiver", row)
	} else {
		s += fmt.Sprintf("%s's result in the row, %s's at the receiver (epoch %d)", row, rcv, o.Receiver.Epoch)
	}
	if o.Final.Status != engine.StatusDone {
		s += fmt.Sprintf("; the job is %s", o.Final.Status)
	}
	return s
}

func workerName(label string) string {
	switch label {
	case "":
		return "nobody"
	case engine.Zombie:
		return "the zombie (A)"
	case engine.NewOwner:
		return "the new owner (B)"
	}
	return "worker " + label
}
