package runner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/lab"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/supervisor"
	"github.com/fencelab/fencelab/server/worker"
)

// The load lab: the same real worker processes as a run, many of them,
// working on their own through many jobs, while the lab freezes one at
// random now and then with SIGSTOP for longer than the lease and thaws it
// with SIGCONT. Once per queue style, one after the other on the same
// machine, so their throughputs compare. The counts are read from
// Postgres as the workers go (lab.Tally), and at each style's end the
// invariant checker reads every job (lab.CheckLoad).

// LoadSpec says which load lab to run.
type LoadSpec struct {
	// ID names the lab on every event it emits.
	ID     string
	Config lab.LoadConfig
	// SchemasFor names the schemas of the i-th style: made when the style
	// begins, dropped when it ends.
	SchemasFor func(i int) engine.Schemas
	// EmitFunc receives every event of the lab, in order.
	EmitFunc func(lab.Event)
	// Tick is how often the live counts are read. Default 500ms.
	Tick time.Duration
	// Seed seeds the stalls and the work times; 0 for a random one.
	Seed uint64
	// OnEndFunc, if set, is called once the lab has ended and its last
	// event is out.
	OnEndFunc func(l *Load)
}

// Load is one load lab. Its methods are safe for concurrent use.
type Load struct {
	env    *Env
	spec   LoadSpec
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	slots  int

	mu       sync.Mutex
	results  []lab.LoadStyleResult
	stopped  lab.StopReason
	finished bool // every style ran to its end
}

// StartLoad checks spec, takes a worker slot for each of its workers (or
// says the server is busy), and starts the lab in the background.
func StartLoad(env *Env, spec LoadSpec) (*Load, error) {
	spec.Config.Fill()
	if err := spec.Config.Validate(); err != nil {
		return nil, err
	}
	if spec.SchemasFor == nil || spec.ID == "" {
		return nil, errors.New("runner: a load lab needs an ID and SchemasFor")
	}
	if env.Pool == nil || env.Supervisor == nil || env.DatabaseURL == "" || env.Receivers == nil {
		return nil, fault.Errorf(fault.Invalid, "the load lab needs the built-in receiver")
	}
	if spec.EmitFunc == nil {
		spec.EmitFunc = func(lab.Event) {}
	}
	if spec.Tick == 0 {
		spec.Tick = 500 * time.Millisecond
	}
	if spec.Seed == 0 {
		spec.Seed = rand.Uint64()
	}
	l := &Load{env: env, spec: spec, done: make(chan struct{})}
	if env.WorkerSlots != nil {
		for range spec.Config.Workers {
			select {
			case env.WorkerSlots <- struct{}{}:
				l.slots++
			default:
				l.giveSlots()
				return nil, fault.Errorf(fault.Busy, "the server runs %d workers at once, and a load lab needs %d of them free; try again in a moment",
					cap(env.WorkerSlots), spec.Config.Workers)
			}
		}
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	go l.run()
	return l, nil
}

func (l *Load) giveSlots() {
	for ; l.slots > 0; l.slots-- {
		<-l.env.WorkerSlots
	}
}

// ID returns the lab's id.
func (l *Load) ID() string { return l.spec.ID }

// Config returns what the lab runs.
func (l *Load) Config() lab.LoadConfig { return l.spec.Config }

// Done is closed once the lab has ended.
func (l *Load) Done() <-chan struct{} { return l.done }

// Results returns the styles that have ended, in order.
func (l *Load) Results() []lab.LoadStyleResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]lab.LoadStyleResult(nil), l.results...)
}

// Finished reports whether every style ran to its end.
func (l *Load) Finished() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.finished
}

// Stop ends the lab for a reason, if it has not ended, and returns once
// its workers are reaped and its schemas dropped.
func (l *Load) Stop(reason lab.StopReason) {
	select {
	case <-l.done:
		return // it has ended already, finished or not: nothing to say
	default:
	}
	l.mu.Lock()
	if l.stopped == "" {
		l.stopped = reason
	}
	l.mu.Unlock()
	l.cancel()
	<-l.done
}

func (l *Load) emit(ev *lab.LoadEvent) {
	ev.Config = l.spec.Config
	at := time.Now()
	if l.env.Clock != nil {
		at = l.env.Clock.Now(context.Background())
	}
	l.spec.EmitFunc(lab.Event{Run: l.spec.ID, At: at, Actor: lab.ActorRunner, Kind: lab.KindLoad, Load: ev})
}

func (l *Load) run() {
	defer func() {
		l.giveSlots()
		close(l.done)
		if l.spec.OnEndFunc != nil {
			l.spec.OnEndFunc(l)
		}
	}()
	defer l.cancel()
	l.emit(&lab.LoadEvent{Phase: lab.LoadStarted})
	for i, name := range l.spec.Config.Styles {
		// Every style's workers draw the same work times, and its stalls
		// come from the same sequence: only the guards differ.
		rng := rand.New(rand.NewPCG(l.spec.Seed, l.spec.Seed>>1|1))
		res, err := l.runStyle(l.ctx, rng, l.spec.SchemasFor(i), name)
		if err != nil || l.ctx.Err() != nil {
			l.mu.Lock()
			reason := l.stopped
			l.mu.Unlock()
			ev := &lab.LoadEvent{Phase: lab.LoadStopped, Reason: reason}
			if reason == "" {
				ev.Message = fault.MessageOf(err)
				if fault.CodeOf(err) == fault.Internal {
					l.env.Log.Error("a load lab failed", "lab", l.spec.ID, "style", name, "err", err)
				}
			}
			l.emit(ev)
			return
		}
		l.mu.Lock()
		l.results = append(l.results, res)
		l.mu.Unlock()
		l.emit(&lab.LoadEvent{Phase: lab.LoadStyleDone, Style: name, Result: &res})
	}
	l.mu.Lock()
	l.finished = true
	rs := append([]lab.LoadStyleResult(nil), l.results...)
	l.mu.Unlock()
	l.emit(&lab.LoadEvent{Phase: lab.LoadFinished, Results: rs, Verdict: lab.LoadVerdict(rs)})
}

// loadWorker is one worker process of a style, and whether it is frozen.
type loadWorker struct {
	proc   *supervisor.Proc
	frozen atomic.Bool
	exited atomic.Bool
}

// runStyle runs one style from empty schemas to its checked result.
func (l *Load) runStyle(ctx context.Context, rng *rand.Rand, schemas engine.Schemas, name string) (lab.LoadStyleResult, error) {
	env, cfg := l.env, l.spec.Config
	res := lab.LoadStyleResult{Style: name}
	style, err := lab.StyleByName(name)
	if err != nil {
		return res, err
	}
	if err := engine.Reset(ctx, env.Pool, schemas); err != nil {
		return res, fmt.Errorf("set up the style's schemas: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := engine.Drop(dctx, env.Pool, schemas); err != nil {
			env.Log.Warn("could not drop a load lab's schemas", "lab", l.spec.ID, "err", err)
		}
	}()
	q, err := engine.NewQueue(env.Pool, engine.QueueConfig{Schema: schemas.Jobs, Guards: style.Broken})
	if err != nil {
		return res, err
	}
	rcv, err := engine.NewReceiver(env.Pool, engine.ReceiverConfig{Schema: schemas.Receiver, Guards: style.Broken})
	if err != nil {
		return res, err
	}
	served := env.Receivers.Serve(rcv, func(lab.Event) {}) // thousands of decisions: counted, not told
	defer served.Stop()
	for _, st := range engine.JobsFill(schemas.Jobs, cfg.Jobs) {
		if _, err := env.Pool.Exec(ctx, st.SQL, st.Args...); err != nil {
			return res, fmt.Errorf("fill the queue: %s: %w", st.Name, err)
		}
	}

	// The workers: each works a while on every job (20–150 ms, its own),
	// renews a third of the lease, and polls quickly when it finds nothing.
	lease := cfg.Lease()
	lost := make(chan string, cfg.Workers)
	var ws []*loadWorker
	killed := false
	killWorkers := func() { // once: before the last count, or on the way out
		if killed {
			return
		}
		killed = true
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, w := range ws {
			w.exited.Store(true) // expected from here on
			_ = w.proc.Kill(kctx)
		}
	}
	defer killWorkers()
	var maxWork time.Duration
	for i := range cfg.Workers {
		label := nextLabel(i)
		work := time.Duration(20+rng.IntN(131)) * time.Millisecond
		maxWork = max(maxWork, work)
		args := []string{"--schema", schemas.Jobs, "--name", ownerFor(label, false), "--lease", lease.String(),
			"--work", work.String(), "--poll", "20ms"}
		for _, g := range style.Broken.Broken() {
			args = append(args, "--break", g.String())
		}
		wenv := []string{"DATABASE_URL=" + env.DatabaseURL, worker.EnvReceiverURL + "=" + served.URL,
			worker.EnvReceiverCredential + "=" + served.Credential()}
		w := &loadWorker{}
		p, err := env.Supervisor.Start(supervisor.Spec{Label: label, Args: args, Env: wenv, EventFunc: func(_ *supervisor.Proc, e lab.Event) {
			// Its thousands of statements are counted from Postgres, not
			// told; what it says on stderr goes to the server's log.
			switch {
			case e.Process != nil && e.Process.Change == lab.ProcExited && !w.exited.Swap(true):
				lost <- label
			case e.Note != nil && e.Note.Code == lab.NoteLog:
				env.Log.Debug("load lab worker", "lab", l.spec.ID, "worker", label, "line", e.Note.Line)
			}
		}})
		if err != nil {
			return res, fmt.Errorf("start worker %s: %w", label, err)
		}
		w.proc = p
		ws = append(ws, w)
	}
	start := time.Now()

	// The stalls: every 120 ms or so one more worker freezes, for longer
	// than the lease (by 20–250 ms: often while the job's next owner is
	// still at work, the article's premise), at most half of them at once,
	// until every job has ended.
	var stalls atomic.Int64
	var lastThaw atomic.Int64
	var frozen sync.WaitGroup
	chaosCtx, stopChaos := context.WithCancel(ctx)
	defer func() {
		stopChaos()
		frozen.Wait()
	}()
	var rngMu sync.Mutex
	randDur := func(lo, hi time.Duration) time.Duration {
		rngMu.Lock()
		defer rngMu.Unlock()
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	frozenNow := func() int {
		n := 0
		for _, w := range ws {
			if w.frozen.Load() {
				n++
			}
		}
		return n
	}
	go func() {
		for {
			select {
			case <-chaosCtx.Done():
				return
			case <-time.After(randDur(60*time.Millisecond, 180*time.Millisecond)):
			}
			if frozenNow() >= cfg.Workers/2 {
				continue
			}
			rngMu.Lock()
			w := ws[rng.IntN(len(ws))]
			rngMu.Unlock()
			if w.exited.Load() || !w.frozen.CompareAndSwap(false, true) {
				continue
			}
			if err := w.proc.Pause(chaosCtx); err != nil {
				// SIGSTOP may have gone out before the wait for it was cut
				// short: a worker is never left frozen.
				rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = w.proc.Resume(rctx)
				cancel()
				w.frozen.Store(false)
				continue
			}
			stalls.Add(1)
			frozen.Add(1)
			go func() {
				defer frozen.Done()
				select {
				case <-chaosCtx.Done():
				case <-time.After(randDur(lease+20*time.Millisecond, lease+250*time.Millisecond)):
				}
				rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = w.proc.Resume(rctx)
				lastThaw.Store(time.Now().UnixNano())
				w.frozen.Store(false)
			}()
		}
	}()

	// The counts, a few times a second, until every job has ended, every
	// worker is thawed and the last one thawed has had time to finish what
	// it was doing.
	settle := maxWork + lease/2 + 100*time.Millisecond
	tick := time.NewTicker(l.spec.Tick)
	defer tick.Stop()
	var prev lab.LoadTally
	prevAt := start
	ended := false // a tick saw every job ended
	for {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case label := <-lost:
			return res, fault.Errorf(fault.Internal, "worker %s exited before the style ended", label)
		case <-tick.C:
		}
		t, err := lab.Tally(ctx, env.Pool, schemas)
		if err != nil {
			return res, err
		}
		now := time.Now()
		t.Style, t.ElapsedMS, t.Stalls = name, now.Sub(start).Milliseconds(), int(stalls.Load())
		t.PerSecond = float64(t.Done-prev.Done) / now.Sub(prevAt).Seconds()
		prev, prevAt = t, now
		l.emit(&lab.LoadEvent{Phase: lab.LoadTick, Style: name, Tally: &t})
		if t.Done+t.Failed >= t.Jobs && !ended {
			ended = true
			stopChaos()
		}
		if ended && frozenNow() == 0 && time.Since(time.Unix(0, lastThaw.Load())) > settle {
			break
		}
		if now.Sub(start) > lab.MaxLoadStyleTime {
			res.CutShort = true
			stopChaos()
			break
		}
	}
	stopChaos()
	frozen.Wait()
	elapsed := time.Since(start)
	killWorkers() // nothing more is written: the last count is the end

	t, err := lab.Tally(ctx, env.Pool, schemas)
	if err != nil {
		return res, err
	}
	t.Style, t.ElapsedMS, t.Stalls = name, elapsed.Milliseconds(), int(stalls.Load())
	res.Tally = t
	// Throughput up to the moment the last job ended, not the settling,
	// on the database clock.
	span, err := lab.Span(ctx, env.Pool, schemas)
	if err != nil {
		return res, err
	}
	if span == 0 {
		span = elapsed
	}
	res.PerSecond = float64(t.Done) / max(time.Millisecond, span).Seconds()
	check, err := lab.CheckLoad(ctx, q, rcv, cfg.Jobs)
	if err != nil {
		return res, err
	}
	res.Check = check
	res.Agrees = int64(check.StaleWrites) == t.LateRow && int64(check.OlderAccepted) == t.LateReceiver
	return res, nil
}
