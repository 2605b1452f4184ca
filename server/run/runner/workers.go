package runner

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/supervisor"
	"github.com/fencelab/fencelab/server/run/worker"
	"github.com/jackc/pgx/v5/pgxpool"
)

// workerState is what the runner knows of a worker, from its events and
// its process state.
type workerState struct {
	label     string
	owner     string
	skew      time.Duration
	proc      *supervisor.Proc
	waitingAt protocol.Checkpoint // the checkpoint it waits at, "" while busy (step mode)
	waits     int                 // how many times it has reported waiting at a checkpoint
	frozen    bool
	frozenAt  time.Time
	stoppedAt time.Time // when it was first seen stopped by a signal from outside the run (zero: not)
	exited    bool
	killCause protocol.Cause // who sent the SIGKILL, if anyone in the run did
	jobID     int64
	epoch     int64
	triedDone bool                   // it sent a commit (complete or fail) statement
	fence     []protocol.FenceReason // what refused its last commit, if anything did
	skipped   bool                   // it looked its key up and did not call (keyed delivery)
	slot      bool                   // it holds one of Env.WorkerSlots
	lastLog   string                 // the last line it wrote on stderr: why it stopped, if it did
}

// takeSlot takes a worker slot, if the server counts them; it refuses at
// once when there is none.
func (r *Run) takeSlot() error {
	if r.env.WorkerSlots != nil { // a server's: its database is shared
		if err := RoomFor(context.Background(), r.env.Pool, 1, "another worker"); err != nil {
			return err
		}
	}
	if r.spec.TakeWorkerFunc != nil {
		if err := r.spec.TakeWorkerFunc(); err != nil {
			return err
		}
	}
	if r.env.WorkerSlots == nil {
		return nil
	}
	select {
	case r.env.WorkerSlots <- struct{}{}:
		return nil
	default:
		if r.spec.GiveWorkerFunc != nil {
			r.spec.GiveWorkerFunc()
		}
		return fault.Errorf(fault.Busy, "the server runs %d workers at once, as many as its database has connections for; try again in a moment", cap(r.env.WorkerSlots))
	}
}

func (r *Run) giveSlot() {
	if r.env.WorkerSlots != nil {
		<-r.env.WorkerSlots
	}
	if r.spec.GiveWorkerFunc != nil {
		r.spec.GiveWorkerFunc()
	}
}

// spawn starts a worker process and waits for nothing.
func (r *Run) spawn(label, owner string, skew time.Duration, receiverURL string, step bool, work time.Duration) error {
	c := r.spec.Config
	args := []string{
		"--schema", r.spec.Schemas.Jobs,
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
	if c.Delivery != "" && c.Delivery != experiments.DeliverDirect {
		args = append(args, "--delivery", string(c.Delivery))
	}
	if err := r.takeSlot(); err != nil {
		return err
	}
	ws := &workerState{label: label, owner: owner, skew: skew, slot: r.env.WorkerSlots != nil || r.spec.GiveWorkerFunc != nil}
	r.mu.Lock()
	if r.phase.Ended() {
		r.mu.Unlock()
		r.giveSlot()
		return fault.Errorf(fault.Conflict, "run %s has ended", r.spec.ID)
	}
	r.workers[label] = ws
	r.order = append(r.order, label)
	r.mu.Unlock()
	if spawnHook != nil {
		spawnHook(r)
	}
	// The connection string, the receiver's URL (its path is a run's key)
	// and the worker's own credential go in the environment, not on the
	// command line, where any local user could read them.
	env := []string{"DATABASE_URL=" + r.env.DatabaseURL, worker.EnvReceiverURL + "=" + receiverURL}
	if cred := r.credential(); cred != "" {
		env = append(env, worker.EnvReceiverCredential+"="+cred)
	}
	env = append(env, r.sqlEnv...)
	p, err := r.env.Supervisor.Start(supervisor.Spec{Label: label, Args: args, Env: env, EventFunc: r.onWorkerEvent})
	if err != nil {
		r.mu.Lock()
		delete(r.workers, label)
		r.order = r.order[:len(r.order)-1]
		r.mu.Unlock()
		r.giveSlot()
		return fmt.Errorf("start worker %s: %w", label, err)
	}
	r.mu.Lock()
	ws.proc = p
	late := r.workersStopped
	r.mu.Unlock()
	if late {
		// The run ended while this worker started: stopWorkers did not
		// see its process, so it goes now, not with the supervisor.
		kctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = p.Kill(kctx)
		cancel()
		return fault.Errorf(fault.Conflict, "run %s has ended", r.spec.ID)
	}
	r.emit(context.Background(), protocol.Event{Kind: protocol.KindProcess, Actor: label, Process: &protocol.ProcessEvent{
		Change: protocol.ProcSpawned, Pid: p.Pid, State: protocol.StateRunning, Owner: owner, SkewMS: skew.Milliseconds()}})
	return nil
}

// lose ends a scripted run whose worker died of something outside it: no
// verdict (the script did not play out, so there is nothing to judge), an
// error event that says why, and every later command answered so.
func (r *Run) lose(why string) {
	f := &protocol.Failure{Code: protocol.ErrWorkerLost, Message: why + "."}
	r.end(protocol.PhaseStopped, protocol.StopWorkerLost, f, func() {
		r.emit(context.Background(), protocol.Event{Kind: protocol.KindError, Actor: protocol.ActorRunner, Error: &protocol.ErrorEvent{Code: protocol.ErrWorkerLost, Message: f.Message}})
	})
}

// credential issues a credential for one more sender of the run to its
// built-in receiver; "" for a standalone receiver, which takes anyone's.
func (r *Run) credential() string {
	r.mu.Lock()
	served := r.served
	r.mu.Unlock()
	if served == nil {
		return ""
	}
	return served.Credential()
}

// onWorkerEvent passes a worker's event on, then updates what the runner
// knows of the worker. In that order: a step that waits on this event must
// not report its end before the event itself is in the log.
func (r *Run) onWorkerEvent(p *supervisor.Proc, e protocol.Event) {
	if s := e.SQL; s != nil && s.Op == protocol.OpClaim && s.Result == protocol.ResultOK && s.Epoch != nil {
		r.takeover(s.JobID, *s.Epoch, p.Label, e.At)
	}
	if s := e.SQL; s != nil && s.Error.TimedOut() {
		r.mu.Lock()
		r.timedOut = s.Error.SQLState
		r.mu.Unlock()
	}
	lost, lostWhy := false, ""
	if pe := e.Process; pe != nil && pe.Change == protocol.ProcExited {
		r.mu.Lock()
		if w := r.workers[p.Label]; w != nil {
			pe.Cause = w.killCause
			if pe.Cause == "" && (pe.Signal != "" || (pe.ExitCode != nil && *pe.ExitCode != 0)) {
				pe.Cause = protocol.CauseOutside
			}
			// A script cannot go on without its worker; free play can.
			lost = (pe.Cause == protocol.CauseOutside || pe.Cause == protocol.CauseStallLimit) && r.spec.Mode != protocol.ModeFree && !r.phase.Ended()
		}
		r.mu.Unlock()
	}
	if n := e.Note; n != nil && n.Code == protocol.NoteLog {
		r.mu.Lock()
		if w := r.workers[p.Label]; w != nil {
			w.lastLog = n.Line
		}
		r.mu.Unlock()
	}
	if lost {
		pe := e.Process
		r.mu.Lock()
		last := ""
		if w := r.workers[p.Label]; w != nil {
			last = w.lastLog
		}
		r.mu.Unlock()
		how := "it exited"
		switch {
		case pe.Cause == protocol.CauseStallLimit:
			how = "it was frozen longer than this server allows, and killed"
		case pe.Signal != "":
			how = "it was killed by " + pe.Signal + ", from outside the run"
		case pe.ExitCode != nil && last != "":
			// It said why on its way out: the database refused it, say.
			how = fmt.Sprintf("it stopped (exit code %d): %s", *pe.ExitCode, strings.TrimPrefix(last, "fencelab: "))
		case pe.ExitCode != nil:
			how = fmt.Sprintf("it exited with code %d", *pe.ExitCode)
		}
		lostWhy = fmt.Sprintf("Worker %s is gone: %s", p.Label, how)
	}
	r.emit(context.Background(), e)
	if lost {
		// After its exit is in the log: the run's end tells nothing more,
		// and a run that ended before this event was told would drop it.
		// Not on this goroutine: ending the run waits for every worker to
		// be reaped, this one's included.
		go r.lose(lostWhy)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[p.Label]
	if w == nil {
		return
	}
	switch {
	case e.Process != nil && e.Process.Change == protocol.ProcExited:
		w.exited, w.waitingAt, w.frozen = true, "", false
		if w.slot {
			w.slot = false
			r.giveSlot() // its connection is closed with it
		}
	case e.Checkpoint != nil:
		w.waitingAt = e.Checkpoint.Name
		w.waits++
		if e.Checkpoint.Name == protocol.CheckpointClaim {
			w.jobID, w.epoch = 0, 0
		}
	case e.Call != nil && e.Call.Result == protocol.DeliverySkipped:
		w.skipped = true
	case e.SQL != nil && e.SQL.Op == protocol.OpClaim && e.SQL.Result == protocol.ResultOK && e.SQL.Epoch != nil:
		w.jobID, w.epoch = e.SQL.JobID, *e.SQL.Epoch
	case e.SQL != nil && (e.SQL.Op == protocol.OpComplete || e.SQL.Op == protocol.OpFail):
		w.triedDone = true
		w.fence = nil
		if e.SQL.Fenced != nil {
			w.fence = e.SQL.Fenced.Reasons
		}
		if r.spec.Mode == protocol.ModeFree {
			w.jobID, w.epoch = 0, 0
		}
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// waitFor blocks until cond holds for the worker, or ctx ends.
func (r *Run) waitFor(ctx context.Context, label string, cond func(*workerState) bool) error {
	for {
		r.mu.Lock()
		w := r.workers[label]
		if w == nil {
			r.mu.Unlock()
			return fault.Errorf(fault.Invalid, "no worker %s in this run", label)
		}
		ok := cond(w)
		exited, frozen := w.exited, w.frozen
		why := exitWords(w)
		ch := r.changed
		r.mu.Unlock()
		switch {
		case ok:
			return nil
		case exited:
			return fault.Errorf(fault.Conflict, "worker %s has exited%s", label, why)
		case frozen:
			// Paused by hand in the middle of a step: the step is over as
			// far as the runner can tell; the worker goes on when resumed.
			return nil
		}
		select {
		case <-ctx.Done():
			return fault.Errorf(fault.Unavailable, "worker %s did not answer in time", label)
		case <-ch:
		}
	}
}

func (r *Run) worker(label string) (*workerState, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[label]
	if w == nil || w.proc == nil {
		return nil, fault.Errorf(fault.NotFound, "no worker %q in this run", label)
	}
	return w, nil
}

// Workers describes every worker of the run, its state read from the
// operating system.
func (r *Run) Workers() []protocol.Worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.workersLocked()
}

func (r *Run) workersLocked() []protocol.Worker {
	out := make([]protocol.Worker, 0, len(r.order))
	for _, l := range r.order {
		w := r.workers[l]
		wi := protocol.Worker{Label: l, Owner: w.owner, Frozen: w.frozen, Exited: w.exited, WaitingAt: w.waitingAt,
			JobID: w.jobID, Epoch: w.epoch, SkewMS: w.skew.Milliseconds(), State: protocol.StateUnknown}
		if w.proc != nil {
			st := w.proc.Status()
			wi.Pid, wi.State, wi.Letter = w.proc.Pid, st.ProcState(), st.Letter()
		}
		out = append(out, wi)
	}
	return out
}

// PauseWorker freezes a worker with SIGSTOP and returns once the
// operating system shows it stopped.
func (r *Run) PauseWorker(ctx context.Context, label string) error {
	if err := r.awaitStart(ctx); err != nil {
		return err
	}
	return r.pause(ctx, label, protocol.CauseDriver)
}

// ResumeWorker thaws a frozen worker with SIGCONT.
func (r *Run) ResumeWorker(ctx context.Context, label string) error {
	if err := r.awaitStart(ctx); err != nil {
		return err
	}
	return r.resume(ctx, label, protocol.CauseDriver)
}

func (r *Run) pause(ctx context.Context, label string, cause protocol.Cause) error {
	return r.freezeOrThaw(ctx, label, cause, true)
}

func (r *Run) resume(ctx context.Context, label string, cause protocol.Cause) error {
	return r.freezeOrThaw(ctx, label, cause, false)
}

// freezeOrThaw sends a worker SIGSTOP (freeze) or SIGCONT, waits until the
// operating system shows the change, and tells it.
func (r *Run) freezeOrThaw(ctx context.Context, label string, cause protocol.Cause, freeze bool) error {
	if err := r.endedErr(); err != nil {
		return err
	}
	w, err := r.worker(label)
	if err != nil {
		return err
	}
	r.mu.Lock()
	exited, frozen := w.exited, w.frozen
	r.mu.Unlock()
	switch {
	case exited:
		return fault.Errorf(fault.Conflict, "worker %s has exited", label)
	case freeze && frozen:
		return fault.Errorf(fault.Conflict, "worker %s is already paused", label)
	case !freeze && !frozen:
		return fault.Errorf(fault.Conflict, "worker %s is not paused", label)
	}
	change, signal, act := protocol.ProcStopped, "SIGSTOP", w.proc.Pause
	if !freeze {
		change, signal, act = protocol.ProcContinued, "SIGCONT", w.proc.Resume
	}
	if err := act(ctx); err != nil {
		return r.gone(w, err)
	}
	r.mu.Lock()
	w.frozen = freeze
	if freeze {
		w.frozenAt = time.Now()
	}
	r.mu.Unlock()
	st := w.proc.Status()
	r.emit(ctx, protocol.Event{Kind: protocol.KindProcess, Actor: label, Process: &protocol.ProcessEvent{
		Change: change, Pid: w.proc.Pid, State: st.ProcState(), Letter: st.Letter(), Signal: signal, Cause: cause}})
	return nil
}

// gone turns an error signalling a worker into a fault: a worker that
// exited meanwhile is a conflict of state, not an internal error.
func (r *Run) gone(w *workerState, err error) error {
	select {
	case <-w.proc.Done():
		return fault.Errorf(fault.Conflict, "worker %s has exited", w.label)
	default:
	}
	return fmt.Errorf("worker %s: %w", w.label, err)
}

// KillWorker kills a worker with SIGKILL and returns once it is reaped.
func (r *Run) KillWorker(ctx context.Context, label string) error {
	if err := r.awaitStart(ctx); err != nil {
		return err
	}
	if err := r.endedErr(); err != nil {
		return err
	}
	return r.kill(ctx, label, protocol.CauseDriver)
}

func (r *Run) kill(ctx context.Context, label string, cause protocol.Cause) error {
	w, err := r.worker(label)
	if err != nil {
		return err
	}
	r.mu.Lock()
	exited := w.exited
	if !exited {
		w.killCause = cause
	}
	r.mu.Unlock()
	if exited {
		return fault.Errorf(fault.Conflict, "worker %s has already exited", label)
	}
	r.emit(ctx, protocol.Event{Kind: protocol.KindProcess, Actor: label, Process: &protocol.ProcessEvent{
		Change: protocol.ProcKilling, Pid: w.proc.Pid, State: w.proc.Status().ProcState(), Signal: "SIGKILL", Cause: cause}})
	if err := w.proc.Kill(ctx); err != nil {
		return r.gone(w, err)
	}
	// Wait for the exit event itself, frozen or not, so it is in the log
	// before the kill is reported done.
	for {
		r.mu.Lock()
		exited, ch := w.exited, r.changed
		r.mu.Unlock()
		if exited {
			return r.cutConnections(ctx, label)
		}
		select {
		case <-ctx.Done():
			return fault.Errorf(fault.Unavailable, "worker %s did not die in time", label)
		case <-ch:
		}
	}
}

// cutConnections ends what a killed worker left in Postgres: a statement it
// sent just before it died (a heartbeat, late on a loaded machine) still
// runs on its backend, and once ran after the runner had seen the lease run
// out, extending it, so that the next claimer found no job. So the kill
// ends only when the worker's backends are gone: those of its application
// name whose last statement names this run's jobs schema (the engine's
// statements are schema-qualified; a reader's, under a search path, send
// no heartbeat). Each is terminated, and waited for; a statement that had
// already committed is then in the row, where the next step reads it.
func (r *Run) cutConnections(ctx context.Context, label string) error {
	const find = `SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity
	 WHERE application_name = $1 AND pid <> pg_backend_pid() AND position($2 in query) > 0`
	for {
		var pids []int32
		if err := r.env.Pool.QueryRow(ctx, find, protocol.AppName(label), r.spec.Schemas.Jobs).Scan(&pids); err != nil {
			return fmt.Errorf("worker %s's connections: %w", label, err)
		}
		if len(pids) == 0 {
			return nil
		}
		if _, err := r.env.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid`, pids); err != nil {
			return fmt.Errorf("worker %s's connections: %w", label, err)
		}
		select {
		case <-ctx.Done():
			return fault.Errorf(fault.Unavailable, "worker %s's connections did not end in time", label)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// exitWords is what a worker that exited said on its way out, as the end
// of a sentence (": connect to Postgres: …"), or nothing; r.mu held.
func exitWords(w *workerState) string {
	if w.lastLog == "" {
		return ""
	}
	return ": " + strings.TrimPrefix(w.lastLog, "fencelab: ")
}

// spawnHook, if set (tests only), is called as a worker has taken its
// place and its process has not started yet.
var spawnHook func(*Run)

// stopWorkers asks idle step-mode workers to exit and kills the rest.
func (r *Run) stopWorkers(ctx context.Context) {
	r.mu.Lock()
	r.workersStopped = true // a worker starting now is killed as it starts (spawn)
	var all []*workerState
	for _, l := range r.order {
		if w := r.workers[l]; w.proc != nil {
			all = append(all, w)
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.mu.Lock()
			frozen, at, exited := w.frozen, w.waitingAt, w.exited
			if !exited {
				w.killCause = protocol.CauseRunEnd
			}
			r.mu.Unlock()
			if exited {
				return
			}
			if !frozen && at != "" {
				_ = w.proc.Send(worker.Command{Cmd: worker.CmdStop})
				select {
				case <-w.proc.Done():
					return
				case <-time.After(2 * time.Second):
				}
			}
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = w.proc.Kill(kctx) // gone either way: reaped, or the supervisor's Close reaps it
			cancel()
		}()
	}
	wg.Wait()
}

// nextLabel returns the next free worker label: A, B, … Z.
func nextLabel(n int) string { return string(rune('A' + n)) }

func ownerFor(label string, same bool) string {
	if same {
		label = experiments.Zombie
	}
	return "worker-" + strings.ToLower(label)
}

// marginOfConns is what a start leaves free for others: psql, a probe,
// a server's pool growing by one.
const marginOfConns = 5

// roomWait bounds RoomFor's question to Postgres.
const roomWait = 10 * time.Second

// RoomFor reads how many connections Postgres has free now, whoever holds
// the others (every fencelab instance on it among them), and refuses as
// busy, naming what for, when fewer than need would be left above a
// margin: several servers on one Postgres share what it has, as it is.
// The question may wait for one of the pool's connections and for a
// machine busy with other work: it has roomWait to be answered. (At 2 s,
// a reader's Run on a busy machine was refused as "could not ask Postgres
// for room", a 503 for no lack of room.)
func RoomFor(ctx context.Context, pool *pgxpool.Pool, need int, what string) error {
	ctx, cancel := context.WithTimeout(ctx, roomWait)
	defer cancel()
	var free int
	err := pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
	    - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int`).Scan(&free)
	if err != nil {
		return fault.Errorf(fault.Unavailable, "could not ask Postgres for room: %v", engine.ErrUnavailable)
	}
	if free-marginOfConns < need {
		return fault.Errorf(fault.Busy, "Postgres has %d connections free, too few for %s; try again when a run has ended", max(free, 0), what)
	}
	return nil
}
