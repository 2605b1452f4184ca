// Package runner runs a scenario with real worker processes, from start to
// verdict. A scripted run plays one of lab's scripts with two `fencelab
// worker --step` processes driven checkpoint by checkpoint, frozen with
// SIGSTOP, thawed with SIGCONT, killed with SIGKILL, while leases run out on
// the database clock: step by step on command, or automatically at a pace.
// A free-play run has no script: workers run on their own, and a person
// adds jobs and workers and pauses, resumes and kills them at will.
//
// A Run owns its whole life — start (its schemas, its receiver, its
// workers), steps, finish, evaluation and the end — in one explicit mode
// and phase (protocol.Mode, protocol.RunPhase). Open assembles a run for every
// caller: `fencelab run` and the playground server alike. The runner needs
// no HTTP of its own and knows no HTTP status; its errors carry fault
// codes. Every event of a run goes to one EmitFunc, numbered by whoever
// keeps the log. The outcome is read from the database and the receiver,
// never from what the workers believe.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/control"
	"github.com/fencelab/fencelab/server/run/inbox"
	"github.com/fencelab/fencelab/server/run/notify"
	"github.com/fencelab/fencelab/server/run/receiver"
	"github.com/fencelab/fencelab/server/run/supervisor"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Receivers serves a run's receiver over HTTP for its workers: Serve
// returns where they deliver, the credentials they deliver with, and how
// to stop serving. *receiver.Registry is one.
type Receivers interface {
	Serve(r *engine.Receiver, emit func(protocol.Event)) *receiver.Served
}

// Limits bound what a run may hold and how long it may wait.
type Limits struct {
	// MaxWorkers and MaxJobs bound a free-play run. Defaults 6 and 100.
	MaxWorkers int
	MaxJobs    int
	// MaxStall kills a worker that has been frozen longer. 0: no limit.
	MaxStall time.Duration
	// StepTimeout bounds each step beyond any lease it waits for. Default 20s.
	StepTimeout time.Duration
	// Poll is how often lease expiry is checked on the database clock.
	// Default 100ms.
	Poll time.Duration
	// Work is how long a free-play worker works on each job. Default 3s.
	Work time.Duration
}

func (l *Limits) fill() {
	if l.MaxWorkers == 0 {
		l.MaxWorkers = 6
	}
	if l.MaxJobs == 0 {
		l.MaxJobs = 100
	}
	if l.StepTimeout == 0 {
		l.StepTimeout = 20 * time.Second
	}
	if l.Poll == 0 {
		l.Poll = 100 * time.Millisecond
	}
	if l.Work == 0 {
		l.Work = 3 * time.Second
	}
}

// Env is what every run of a process runs in: the database, the worker
// supervisor and where receivers are served. One Env serves any number of
// runs at once; Open does not change it.
type Env struct {
	Pool        *pgxpool.Pool // for the job, the database clock and the outcome
	DatabaseURL string        // handed to the workers, which connect on their own
	Supervisor  *supervisor.Supervisor
	// Notify is the one listening connection every run's row changes come
	// through.
	Notify *notify.Notifier
	// WorkerSlots, if set, bounds the worker processes of every run
	// together: one token per live worker, as each holds a connection to
	// Postgres. A worker that would not fit is refused as busy.
	WorkerSlots chan struct{}
	// Clock, if set, stamps the events a run makes itself with the
	// database's time without a round trip each; without it each such
	// event reads the database clock.
	Clock *DBClock
	// Receivers serves each run's own receiver. Unused when
	// ExternalReceiver is set.
	Receivers Receivers
	// ExternalReceiver, if set, is the base URL of a standalone `fencelab
	// receiver` that every run delivers to and reads its outcome from.
	ExternalReceiver string
	Limits           Limits
	Log              *slog.Logger
}

// Spec says which run to start.
type Spec struct {
	// ID names the run on every event it emits.
	ID     string
	Config experiments.RunConfig
	Mode   protocol.Mode
	// Pace is the delay between the steps of an auto run (0: none).
	Pace time.Duration
	// Background marks a run that is not its session's current one (a
	// matrix cell).
	Background bool
	Schemas    judge.Schemas
	// Prepared says the schemas were set up already, and are empty (a
	// server's spare pair): the run uses them as they are.
	Prepared bool
	// KeepSchemas leaves the schemas in the database when the run ends, to
	// be looked at (the CLI with a DATABASE_URL of the user's own).
	KeepSchemas bool
	// Solution, if set, is a reader's own four statements: the run's
	// workers and receiver run them, as a role made for the run
	// (sandbox), in place of the engine's. Each is checked before any
	// worker starts; a refusal is a *sandbox.Error, bad input. Only a
	// scripted run with the built-in receiver and direct delivery takes
	// one.
	Solution *sandbox.Solution
	// TakeWorkerFunc, if set, is asked before each worker process starts
	// (one of the client's worker slots, say) and may refuse it; each
	// worker that took one gives it back with GiveWorkerFunc when it is
	// gone.
	TakeWorkerFunc func() error
	GiveWorkerFunc func()
	// EmitFunc receives every event of the run, one at a time, in order. It
	// must not block for long.
	EmitFunc func(protocol.Event)
	// OnEndFunc, if set, is called once, after the run has ended and its
	// last event is out, with its final state.
	OnEndFunc func(r *Run)
}

// Run is one run. Its methods are safe for concurrent use; the steps of a
// scripted run are played one at a time.
type Run struct {
	env      *Env
	spec     Spec
	lim      Limits
	scenario experiments.Scenario
	queue    *engine.Queue
	receiver judge.ReceiverView
	jobID    int64

	in     *inbox.Inbox[control.Command, Result] // the commands of the people driving it, in line
	stepMu sync.Mutex                            // one step at a time: the auto loop's and a command's

	mu         sync.Mutex
	phase      protocol.RunPhase
	paused     bool // an auto run waits between steps
	pace       time.Duration
	started    time.Time
	ended      time.Time
	stopReason protocol.StopReason
	outcome    *protocol.Outcome
	report     *protocol.Report
	failure    *protocol.Failure
	// timedOut is the SQLSTATE of a worker's statement that ran out of
	// time (Failure.TimedOut), if one did; a failure the run ends with
	// carries it.
	timedOut   string
	changed    chan struct{} // closed and replaced on every change of a worker
	workers    map[string]*workerState
	order      []string        // labels in the order they were spawned
	next       int             // index of the next step
	expired    map[string]bool // lease expiries already reported
	leases     map[int64]lease // each running job's lease, as Postgres last reported it
	jobs       int
	receiverAt string           // where this run's workers deliver
	served     *receiver.Served // the built-in receiver's credentials, or nil for a standalone one
	rows       rowFeed          // the history seqs the listener told
	lastAt     time.Time        // the time of the last event told: events never go back in time

	sqlEnv []string // a reader's statements and role, for each worker's environment
	// workersStopped: stopWorkers has run; a worker whose process starts
	// after it is killed at once.
	workersStopped bool

	relayMu     sync.Mutex // one relay pass at a time
	relayClient *http.Client
	relayURL    string
	wake        chan struct{} // pokes the auto loop
	ready       chan struct{} // closed when Start has returned
	done        chan struct{} // closed when the run has ended
	endOnce     sync.Once
	cleanups    []func() // run in reverse order at the end

	emitMu sync.Mutex
	stopBG context.CancelFunc
	bg     sync.WaitGroup // the watchers: lease polling and row notifications
	loops  sync.WaitGroup // the auto loop, which may end the run itself
}

// Open is New and Start: it returns a run that has started, or an error.
func Open(ctx context.Context, env *Env, spec Spec) (*Run, error) {
	r, err := New(env, spec)
	if err != nil {
		return nil, err
	}
	if err := r.Start(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// New validates spec and returns a run that has not started yet: a caller
// can make it its current run before Start, so that commands arriving
// while it starts wait for it (see Started) rather than miss it.
func New(env *Env, spec Spec) (*Run, error) {
	if err := spec.Config.Validate(); err != nil {
		return nil, err
	}
	if err := spec.Schemas.Validate(); err != nil {
		return nil, err
	}
	if env.Pool == nil || env.Supervisor == nil || env.Notify == nil || env.DatabaseURL == "" || (env.Receivers == nil && env.ExternalReceiver == "") {
		return nil, errors.New("runner: Env needs Pool, Supervisor, Notify, DatabaseURL and Receivers or ExternalReceiver")
	}
	switch {
	case spec.Config.Ordering == experiments.FreePlay:
		spec.Mode = protocol.ModeFree
	case spec.Mode == protocol.ModeFree:
		return nil, fault.Errorf(fault.Invalid, "free play is its own ordering: %s has a script", spec.Config.Ordering)
	case spec.Mode == "":
		spec.Mode = protocol.ModeAuto
	case spec.Mode != protocol.ModeAuto && spec.Mode != protocol.ModeStep:
		return nil, fault.Errorf(fault.Invalid, "mode %q must be auto or step", spec.Mode)
	}
	if spec.EmitFunc == nil {
		spec.EmitFunc = func(protocol.Event) {}
	}
	sc, err := experiments.ScriptOf(spec.Config)
	if err != nil {
		return nil, err
	}
	lim := env.Limits
	lim.fill()
	if env.Log == nil {
		env.Log = slog.New(slog.DiscardHandler)
	}
	r := &Run{env: env, spec: spec, lim: lim, scenario: sc, phase: protocol.PhaseStarting, pace: spec.Pace, started: time.Now(),
		changed: make(chan struct{}), workers: map[string]*workerState{}, expired: map[string]bool{}, leases: map[int64]lease{},
		wake: make(chan struct{}, 1), done: make(chan struct{}), ready: make(chan struct{})}
	r.in = inbox.New("run "+spec.ID, r.carry)
	r.stopBG = func() {}
	if spec.Prepared && !spec.KeepSchemas {
		r.cleanup(r.dropSchemas) // its schemas exist already, however soon it ends
	}
	return r, nil
}

// dropSchemas drops the run's schemas.
func (r *Run) dropSchemas() { dropSchemas(r.env, r.spec.Schemas, "a run's", r.spec.ID) }

// dropSchemas drops schemas, and tries again for up to 30 s while the
// database is unavailable (a restart: 57P03, "the database system is
// starting up"), so that a server's end or a run's leaves none behind an
// outage; it logs once if it could not.
func dropSchemas(env *Env, s judge.Schemas, whose, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wait := 100 * time.Millisecond
	for {
		err := judge.Drop(ctx, env.Pool, s)
		if err == nil {
			return
		}
		if !errors.Is(err, engine.ErrUnavailable) || ctx.Err() != nil {
			env.Log.Warn("could not drop "+whose+" schemas", "id", id, "schemas", s.Jobs+","+s.Receiver, "err", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// Start sets up the run's schemas and receiver, starts watching its leases
// and rows, spawns its workers and, for an auto run, starts playing. A
// scripted run's workers are waiting at their first checkpoint when Start
// returns; free play's are at work. On an error the run has ended, and has
// told its EmitFunc why. The caller must eventually end the run (Finish or
// Stop) or Close it. Start may be called once.
func (r *Run) Start(ctx context.Context) error {
	defer close(r.ready)
	if err := r.endedErr(); err != nil {
		return err // stopped before it began
	}
	bgctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.mu.Lock()
	r.stopBG = stop
	r.mu.Unlock()
	r.emitState(ctx)
	if err := r.start(ctx, bgctx); err != nil {
		// Its caller stopped it as it started (a batch reset while its
		// cells start): a stop, told with the caller's reason, not a
		// failure whose words would be the cancel's ("the database is
		// unavailable", "worker A never became ready").
		if reason, ok := StopReasonOf(ctx); ok {
			r.Stop(reason)
			return r.endedErr()
		}
		r.fail(protocol.ErrStartFailed, nil, err, protocol.StopStartFailed)
		return err
	}
	r.mu.Lock()
	if r.phase.Ended() { // stopped while it started
		r.mu.Unlock()
		return r.endedErr()
	}
	switch r.spec.Mode {
	case protocol.ModeStep:
		r.phase = protocol.PhaseReady
	default:
		r.phase = protocol.PhasePlaying
	}
	r.mu.Unlock()
	r.emitState(ctx)
	if r.spec.Mode == protocol.ModeAuto {
		r.loops.Add(1)
		go r.autoLoop(bgctx)
	}
	return nil
}

// StopCause is the cause a caller cancels a run's start with
// (context.WithCancelCause) when it stops the run as it starts: Start then
// ends the run as stopped for Reason, not as failed.
type StopCause struct{ Reason protocol.StopReason }

func (c *StopCause) Error() string { return "stopped: " + string(c.Reason) }

// StopReasonOf is the reason ctx was cancelled with, if its cause is a
// *StopCause.
func StopReasonOf(ctx context.Context) (protocol.StopReason, bool) {
	var sc *StopCause
	if errors.As(context.Cause(ctx), &sc) {
		return sc.Reason, true
	}
	return "", false
}

// awaitStart waits until the run has started (or failed to), so that a
// command arriving while it starts acts on the started run.
func (r *Run) awaitStart(ctx context.Context) error {
	select {
	case <-r.ready: // a run that has started answers, whatever ctx says
		return nil
	default:
	}
	select {
	case <-r.ready:
		return nil
	case <-ctx.Done():
		return fault.Errorf(fault.Unavailable, "run %s is still starting", r.spec.ID)
	}
}

// start does the work of Open that can fail.
func (r *Run) start(ctx, bgctx context.Context) error {
	env, spec := r.env, r.spec
	if !spec.Prepared {
		err := judge.Reset(ctx, env.Pool, spec.Schemas)
		// Dropped at the end whether or not Reset says it worked: a set-up
		// whose context was cancelled during its COMMIT may have committed
		// all the same (a batch reset while its cells start did leave such
		// schemas behind). Registered after Reset, not before, so that a run
		// stopped during it drops what it made.
		if !spec.KeepSchemas {
			r.cleanup(r.dropSchemas)
		}
		if err != nil {
			return fmt.Errorf("set up the run's schemas: %w", err)
		}
	}
	q, err := playground.NewQueue(env.Pool, engine.QueueConfig{Schema: spec.Schemas.Jobs}, playground.QueueHooks{Broken: spec.Config.Broken})
	if err != nil {
		return err
	}
	r.queue = q
	receiverURL := ""
	if spec.Solution != nil && (env.ExternalReceiver != "" || spec.Mode == protocol.ModeFree || spec.Config.Delivery != experiments.DeliverDirect) {
		return fault.Errorf(fault.Invalid, "a reader's statements run only in a scripted run, with direct delivery to the built-in receiver")
	}
	if env.ExternalReceiver != "" && spec.Config.Delivery == experiments.DeliverKeyed {
		return fault.Errorf(fault.Invalid, "a standalone receiver keeps epochs: the keyed delivery needs the built-in one")
	}
	if env.ExternalReceiver != "" {
		// Job ids must not meet other runs' at a shared receiver.
		st := jobIDRestart(spec.Schemas.Jobs, time.Now().UnixMicro())
		if _, err := env.Pool.Exec(ctx, st.SQL); err != nil {
			return fmt.Errorf("number the run's jobs: %w", err)
		}
		receiverURL = env.ExternalReceiver + "/deliveries"
		r.receiver = &receiver.Client{BaseURL: env.ExternalReceiver}
	} else {
		rule, err := r.readerSQL(ctx)
		if err != nil {
			return err
		}
		rcv, err := playground.NewReceiver(env.Pool, engine.ReceiverConfig{Schema: spec.Schemas.Receiver}, playground.ReceiverHooks{Broken: spec.Config.Broken, Keyed: spec.Config.Delivery == experiments.DeliverKeyed, Rule: rule})
		if err != nil {
			return err
		}
		r.receiver = rcv
		served := env.Receivers.Serve(rcv, r.Emit)
		receiverURL = served.URL
		r.cleanup(served.Stop)
		r.mu.Lock()
		r.served = served
		r.mu.Unlock()
	}
	r.mu.Lock()
	r.receiverAt = receiverURL
	r.mu.Unlock()
	if err := r.listen(ctx, bgctx); err != nil {
		return err
	}
	r.bg.Add(1)
	go r.watch(bgctx)
	if spec.Config.Delivery == experiments.DeliverOutbox {
		r.bg.Add(1)
		go r.relay(bgctx, receiverURL)
	}

	if spec.Mode == protocol.ModeFree {
		for range 2 {
			if _, err := r.addWorker(receiverURL, WorkerOptions{}); err != nil {
				return err
			}
		}
		return nil
	}
	id, err := r.addJob(ctx, []byte(JobPayload))
	if err != nil {
		return err
	}
	r.jobID = id
	for _, label := range []string{experiments.Zombie, experiments.NewOwner} {
		if err := r.spawn(label, spec.Config.Owner(label), spec.Config.WorkerSkew(label), receiverURL, true, 0); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, r.lim.StepTimeout)
	defer cancel()
	for _, label := range []string{experiments.Zombie, experiments.NewOwner} {
		if err := r.waitFor(wctx, label, func(w *workerState) bool { return w.waitingAt == protocol.CheckpointClaim }); err != nil {
			return fmt.Errorf("worker %s never became ready: %w", label, err)
		}
	}
	return nil
}

// cleanup adds fn to what the end of the run undoes, last first.
// A run that has ended already (stopped while it started) undoes it at
// once.
func (r *Run) cleanup(fn func()) {
	r.mu.Lock()
	if r.phase.Ended() {
		r.mu.Unlock()
		fn()
		return
	}
	r.cleanups = append(r.cleanups, fn)
	r.mu.Unlock()
}

// ID returns the run's id.
func (r *Run) ID() string { return r.spec.ID }

// Config returns the run's settings.
func (r *Run) Config() experiments.RunConfig { return r.spec.Config }

// Mode returns how the run is played.
func (r *Run) Mode() protocol.Mode { return r.spec.Mode }

// Done is closed once the run has ended.
func (r *Run) Done() <-chan struct{} { return r.done }

// Phase returns where the run is in its life.
func (r *Run) Phase() protocol.RunPhase {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.phase
}

// Outcome returns a finished scripted run's outcome, or nil.
func (r *Run) Outcome() *protocol.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcome
}

// Report returns a finished free-play run's report, or nil.
func (r *Run) Report() *protocol.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.report
}

// Info describes the run as the page and the API show it, its workers'
// states read from the operating system.
func (r *Run) Info() protocol.RunInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.infoLocked()
}

func (r *Run) infoLocked() protocol.RunInfo {
	c := r.spec.Config
	i := protocol.RunInfo{ID: r.spec.ID, Ordering: c.Ordering, Mode: r.spec.Mode, Phase: r.phase, Background: r.spec.Background, Custom: r.spec.Solution != nil,
		Broken: c.Broken.Names(), SameIdentity: c.SameIdentity, Delivery: c.Delivery, LeaseMS: c.Lease.Milliseconds(), SkewMS: c.Skew.Milliseconds(),
		PaceMS: r.pace.Milliseconds(), StepIndex: r.next, Steps: r.scenario.Steps, Started: r.started, StopReason: r.stopReason,
		Outcome: r.outcome, Report: r.report, Error: r.failure, Workers: r.workersLocked()}
	if i.Steps == nil {
		i.Steps = []experiments.Step{}
	}
	if !r.ended.IsZero() {
		t := r.ended
		i.Ended = &t
	}
	return i
}

// emitState tells the watchers what the run looks like now.
func (r *Run) emitState(ctx context.Context) {
	r.emit(ctx, protocol.Event{Kind: protocol.KindRunState, Actor: protocol.ActorRunner, RunState: &protocol.RunStateEvent{Info: r.Info()}})
}

// endedErr reports whether the run has ended, with a fault to return if so.
func (r *Run) endedErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase.Ended() {
		if r.failure != nil && r.failure.Code == protocol.ErrWorkerLost {
			return fault.Errorf(fault.Conflict, "run %s has ended: %s; start another", r.spec.ID, lowerFirst(r.failure.Message))
		}
		return fault.Errorf(fault.Conflict, "run %s has ended (%s); start another", r.spec.ID, r.phase)
	}
	return nil
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// Stop ends a run that has not finished, for a reason: its workers are
// stopped, its schemas dropped, its receiver no longer served. It does
// nothing to a run that has ended already.
func (r *Run) Stop(reason protocol.StopReason) {
	r.end(protocol.PhaseStopped, reason, nil, func() {
		r.emit(context.Background(), protocol.Event{Kind: protocol.KindNote, Actor: protocol.ActorRunner, Note: &protocol.NoteEvent{Code: protocol.NoteStopped, Reason: reason}})
	})
}

// Close stops the run if it has not ended (as a shutdown) and waits until
// everything it started is gone. Safe to call more than once.
func (r *Run) Close() {
	r.Stop(protocol.StopShutdown)
	r.loops.Wait()
	r.bg.Wait()
}

// fail ends a run that could not go on, saying why.
func (r *Run) fail(code protocol.ErrorCode, step *int, err error, reason protocol.StopReason) {
	f := &protocol.Failure{Code: code, Message: fault.MessageOf(err)}
	r.mu.Lock()
	stopping := r.phase.Ended()
	r.mu.Unlock()
	// A run stopped while it started (a reset) fails by its own stop:
	// nothing went wrong that a log should shout about.
	if fault.CodeOf(err) == fault.Internal && !stopping && !errors.Is(err, context.Canceled) {
		r.env.Log.Error("a run failed", "run", r.spec.ID, "err", err)
	}
	r.end(protocol.PhaseFailed, reason, f, func() {
		r.emit(context.Background(), protocol.Event{Kind: protocol.KindError, Actor: protocol.ActorRunner, Error: &protocol.ErrorEvent{Code: code, Message: f.Message, Step: step}})
	})
}

// end moves the run to its final phase once: say so (first), stop its
// workers and watchers, give back its schemas and receiver, tell the
// watchers the final state, then the OnEndFunc.
func (r *Run) end(phase protocol.RunPhase, reason protocol.StopReason, f *protocol.Failure, say func()) {
	r.endOnce.Do(func() {
		if say != nil {
			say()
		}
		r.mu.Lock()
		if f != nil && f.SQLState == "" && r.timedOut != "" {
			f.SQLState = r.timedOut
		}
		r.phase, r.ended, r.failure = phase, time.Now(), f
		if phase != protocol.PhaseFinished {
			r.stopReason = reason
		}
		cleanups := r.cleanups
		r.cleanups = nil
		r.mu.Unlock()
		close(r.done)
		r.poke()
		r.stopWorkers(context.Background())
		r.mu.Lock()
		stopBG := r.stopBG
		r.mu.Unlock()
		stopBG()
		r.bg.Wait()
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		r.emitState(context.Background())
		if r.spec.OnEndFunc != nil {
			r.spec.OnEndFunc(r)
		}
	})
}

// Jobs reads the run's jobs as the database holds them.
func (r *Run) Jobs(ctx context.Context) ([]engine.Job, error) {
	return r.queue.List(ctx, r.lim.MaxJobs)
}
