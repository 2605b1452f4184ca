package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/receiver"
	"github.com/fencelab/fencelab/server/run/supervisor"
	"github.com/fencelab/fencelab/server/run/worker"
	"github.com/jackc/pgx/v5/pgconn"
)

// The load lab: the same real worker processes as a run, many of them,
// working on their own through many jobs, while the lab freezes one at
// random now and then with SIGSTOP for longer than the lease and thaws it
// with SIGCONT. Once per queue style and round, one after the other on the
// same machine, each round in an order turned one place from the round
// before (experiments.LoadConfig.RoundOrder), so that no style gains from its
// place in the sequence and their throughputs compare round by round. The
// counts are read from Postgres as the workers go (judge.Tally), and at the
// end of each style's round the invariant checker reads every job
// (judge.AuditLoad).

// LoadSpec says which load lab to run.
type LoadSpec struct {
	// ID names the lab on every event it emits.
	ID     string
	Config experiments.LoadConfig
	// SchemasFor names the schemas of the i-th style's round to run
	// (from 0): made when it begins, dropped when it ends.
	SchemasFor func(i int) judge.Schemas
	// EmitFunc receives every event of the lab, in order.
	EmitFunc func(protocol.Event)
	// Tick is how often the live counts are read. Default 500ms.
	Tick time.Duration
	// Seed seeds the stalls and the work times; 0 for a random one.
	Seed uint64
	// ReleaseFunc, if set, is called once the lab has ended, its schemas
	// dropped and its workers reaped, before its last event is sent: what
	// holds the server's place for a lab is given back there.
	ReleaseFunc func()
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

	drops sync.WaitGroup // schemas being dropped in the background

	mu       sync.Mutex
	results  []experiments.LoadStyleResult
	stopped  protocol.StopReason
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
		spec.EmitFunc = func(protocol.Event) {}
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
func (l *Load) Config() experiments.LoadConfig { return l.spec.Config }

// Done is closed once the lab has ended.
func (l *Load) Done() <-chan struct{} { return l.done }

// Results returns the styles that have ended (run every round), in the
// configured order.
func (l *Load) Results() []experiments.LoadStyleResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]experiments.LoadStyleResult(nil), l.results...)
}

// Finished reports whether every style ran to its end.
func (l *Load) Finished() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.finished
}

// Stop ends the lab for a reason, if it has not ended, and returns once
// its workers are reaped and its schemas dropped.
func (l *Load) Stop(reason protocol.StopReason) {
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

func (l *Load) emit(ev *protocol.LoadEvent) {
	ev.Config = l.spec.Config
	at := time.Now()
	if l.env.Clock != nil {
		at = l.env.Clock.Now(context.Background())
	}
	l.spec.EmitFunc(protocol.Event{Run: l.spec.ID, At: at, Actor: protocol.ActorRunner, Kind: protocol.KindLoad, Load: ev})
}

// run plays the lab, then ends it: its schemas dropped (Stop returns once
// they are), its slots given back and ReleaseFunc told, and only then its
// last event sent. A reader who sees "finished" and runs another lab at
// once finds the server's place for one free.
func (l *Load) run() {
	last := l.play()
	l.drops.Wait()
	l.cancel()
	l.giveSlots()
	if l.spec.ReleaseFunc != nil {
		l.spec.ReleaseFunc()
	}
	if last != nil {
		l.emit(last)
	}
	close(l.done)
	if l.spec.OnEndFunc != nil {
		l.spec.OnEndFunc(l)
	}
}

// play runs the lab's rounds and returns its last event (nil when it did
// not finish: it said why as it ended).
func (l *Load) play() *protocol.LoadEvent {
	l.emit(&protocol.LoadEvent{Phase: experiments.LoadStarted})
	cfg := l.spec.Config
	acc := map[string]*experiments.LoadStyleResult{}
	type slot struct {
		round, pos int
		name       string
	}
	var plan []slot
	for round := range cfg.Rounds {
		for pos, name := range cfg.RoundOrder(round) {
			plan = append(plan, slot{round, pos, name})
		}
	}
	for _, name := range cfg.Styles {
		acc[name] = &experiments.LoadStyleResult{Style: name}
	}
	// Each run's schemas are made while the run before it settles (ready),
	// and dropped in the background after it: the machine's time goes to
	// the runs, not to their set-up.
	ready := make([]chan *stage, len(plan)+1)
	for i := range ready {
		ready[i] = make(chan *stage, 1)
	}
	started := make([]sync.Once, len(plan)+1)
	prepare := func(i int) {
		started[i].Do(func() {
			if i == len(plan) {
				ready[i] <- nil
				return
			}
			go func() { ready[i] <- l.prepare(l.ctx, l.spec.SchemasFor(i), plan[i].name) }()
		})
	}
	// While a run's last zombies settle, the next one's workers start up
	// against its still empty queue, in worker slots of their own if the
	// server has them free: their start-up is not waited for. A stage goes
	// from ready to final once: with its crew started (ahead), or without
	// (the run starts it).
	final := make([]chan *stage, len(plan))
	moved := make([]sync.Once, len(plan))
	for i := range final {
		final[i] = make(chan *stage, 1)
	}
	move := func(i int, spawn bool) {
		moved[i].Do(func() {
			go func() {
				st := <-ready[i]
				if spawn && st != nil && st.err == nil && l.ctx.Err() == nil && l.spareSlots(cfg.Workers) {
					if c, err := l.spawn(st, plan[i].round); err == nil {
						c.slots, st.crew = cfg.Workers, c
					} else if l.env.WorkerSlots != nil {
						for range cfg.Workers {
							<-l.env.WorkerSlots
						}
					}
				}
				final[i] <- st
			}()
		})
	}
	ahead := func(i int) {
		if i < len(plan) {
			move(i, true)
		}
	}
	defer func() { // a run made ready but never run is dropped too
		for i := range plan {
			started[i].Do(func() { ready[i] <- nil })
			move(i, false)
			if st := <-final[i]; st != nil && !st.ran {
				l.stopCrew(st.crew)
				l.dropLater(st.schemas)
			}
		}
	}()
	prepare(0)
	for i, at := range plan {
		round, pos, name := at.round, at.pos, at.name
		where := experiments.LoadRound{Round: round + 1, Position: pos + 1, Jobs: cfg.RoundJobs(round)}
		move(i, false) // unless it has gone ahead already
		st := <-final[i]
		final[i] <- st // kept for the deferred clean-up above
		err := st.err
		if err == nil {
			err = l.runStyle(l.ctx, st, where, acc[name], func() { prepare(i + 1); ahead(i + 1) })
		}
		prepare(i + 1)
		if err != nil || l.ctx.Err() != nil {
			l.mu.Lock()
			reason := l.stopped
			l.mu.Unlock()
			ev := &protocol.LoadEvent{Phase: experiments.LoadStopped, Reason: reason}
			if reason == "" {
				if fault.CodeOf(err) == fault.Internal && lostConnection(err) {
					err = fault.Errorf(fault.Unavailable, "the database stopped answering (a restart or an outage): %s's round %d could not go on", name, round+1)
				}
				ev.Message = fault.MessageOf(err)
				if fault.CodeOf(err) == fault.Internal {
					l.env.Log.Error("a load lab failed", "lab", l.spec.ID, "style", name, "round", round+1, "err", err)
				}
			}
			l.emit(ev)
			return nil
		}
		res := *acc[name]
		res.Rounds = append([]experiments.LoadRound(nil), res.Rounds...)
		phase := experiments.LoadRoundDone
		if round == cfg.Rounds-1 {
			phase = experiments.LoadStyleDone
			l.mu.Lock()
			l.results = append(l.results, res)
			l.mu.Unlock()
		}
		l.emit(&protocol.LoadEvent{Phase: phase, Style: name, Round: where.Round, Position: where.Position, Result: &res})
	}
	rs := make([]experiments.LoadStyleResult, 0, len(cfg.Styles))
	for _, name := range cfg.Styles {
		rs = append(rs, *acc[name])
	}
	l.mu.Lock()
	l.finished = true
	l.results = append([]experiments.LoadStyleResult(nil), rs...)
	l.mu.Unlock()
	ev := &protocol.LoadEvent{Phase: experiments.LoadFinished, Results: rs, Verdict: judge.LoadVerdict(rs)}
	if c, ok := experiments.CompareLoad(rs); ok {
		ev.Throughput = &c
	}
	return ev
}

// loadWorker is one worker process of a style, and whether it is frozen.
type loadWorker struct {
	proc   *supervisor.Proc
	frozen atomic.Bool
	exited atomic.Bool
	polled atomic.Bool // it has run a statement: it is up and polling
	busy   atomic.Bool // it holds a claimed job it has not completed or failed
}

// stage is one style's round made ready to run: its schemas made. Once
// ran, runStyle owns it and drops its schemas.
type stage struct {
	name    string
	schemas judge.Schemas
	style   experiments.Style
	rcv     *engine.Receiver
	err     error
	crew    *crew // its workers, if started ahead of it
	// ran says its schemas are dropped by another already: it ran, or
	// could not be made.
	ran bool
}

// prepare makes a style's round ready to run: fresh schemas, its queue
// and its receiver. On an error its schemas are dropped (in the
// background) and the stage says why.
func (l *Load) prepare(ctx context.Context, schemas judge.Schemas, name string) *stage {
	env := l.env
	st := &stage{name: name, schemas: schemas, ran: true}
	fail := func(err error) *stage {
		l.dropLater(schemas)
		st.err = err
		return st
	}
	style, err := experiments.StyleByName(name)
	if err != nil {
		return fail(err)
	}
	st.style = style
	if err := judge.Reset(ctx, env.Pool, schemas); err != nil {
		return fail(fmt.Errorf("set up the style's schemas: %w", err))
	}
	if st.rcv, err = playground.NewReceiver(env.Pool, engine.ReceiverConfig{Schema: schemas.Receiver}, playground.ReceiverHooks{Broken: style.Broken}); err != nil {
		return fail(err)
	}
	st.ran = false
	return st
}

// lostConnection says err is a statement's connection going away under it
// (the server ended it, or the network did), however the driver said so.
func lostConnection(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, engine.ErrUnavailable) || pgconn.SafeToRetry(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "write failed") || strings.Contains(msg, "conn closed") || strings.Contains(msg, "broken pipe")
}

// workerLost says why a style could not go on when one of its workers
// exited: the database going away (a restart, an outage) is said as such,
// anything else is the server's own failure.
func (l *Load) workerLost(ctx context.Context, label string) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := l.env.Pool.Ping(pctx); err != nil {
		return fault.Errorf(fault.Unavailable, "worker %s exited before the style ended: the database stopped answering (a restart or an outage)", label)
	}
	return fault.Errorf(fault.Internal, "worker %s exited before the style ended", label)
}

// dropLater drops a run's schemas in the background; run waits for it
// before the lab ends.
func (l *Load) dropLater(schemas judge.Schemas) {
	l.drops.Add(1)
	go func() {
		defer l.drops.Done()
		dropSchemas(l.env, schemas, "a load lab's", l.spec.ID)
	}()
}

// crew is a style's round's worker processes and the receiver they
// deliver to. It may be started while the round before settles (then it
// holds worker slots of its own, given back when it stops).
type crew struct {
	ws      []*loadWorker
	lost    chan string   // a worker exited on its own
	up      chan struct{} // a worker ran its first statement
	served  *receiver.Served
	maxWork time.Duration
	rng     *rand.Rand // the round's draws: the work times, then the stalls
	slots   int        // extra worker slots it holds
	stopped bool
}

// spawn starts a stage's workers against its (empty) queue: each works a
// while on every job (20–150 ms, its own, drawn from the round's rng),
// renews a third of the lease, and polls quickly when it finds nothing.
// The caller stops the crew.
func (l *Load) spawn(st *stage, round int) (*crew, error) {
	env, cfg := l.env, l.spec.Config
	// Every style's workers in a round draw the same work times, and its
	// stalls come from the same sequence: only the guards differ. Each
	// round draws anew.
	c := &crew{lost: make(chan string, cfg.Workers), up: make(chan struct{}, cfg.Workers),
		rng: rand.New(rand.NewPCG(l.spec.Seed, (l.spec.Seed>>1|1)+uint64(round)))}
	c.served = env.Receivers.Serve(st.rcv, func(protocol.Event) {}) // thousands of decisions: counted, not told
	lease := cfg.Lease()
	for i := range cfg.Workers {
		label := nextLabel(i)
		work := time.Duration(20+c.rng.IntN(131)) * time.Millisecond
		c.maxWork = max(c.maxWork, work)
		args := []string{"--schema", st.schemas.Jobs, "--name", ownerFor(label, false), "--lease", lease.String(),
			"--work", work.String(), "--poll", "20ms"}
		for _, g := range st.style.Broken.Broken() {
			args = append(args, "--break", g.String())
		}
		wenv := []string{"DATABASE_URL=" + env.DatabaseURL, worker.EnvReceiverURL + "=" + c.served.URL,
			worker.EnvReceiverCredential + "=" + c.served.Credential()}
		w := &loadWorker{}
		p, err := env.Supervisor.Start(supervisor.Spec{Label: label, Args: args, Env: wenv, EventFunc: func(_ *supervisor.Proc, e protocol.Event) {
			// Its thousands of statements are counted from Postgres, not
			// told; what it says on stderr goes to the server's log.
			switch {
			case e.Process != nil && e.Process.Change == protocol.ProcExited && !w.exited.Swap(true):
				c.lost <- label
			case e.SQL != nil:
				// Only what the lab needs to know of its statements: that
				// it is up, and whether it holds a job.
				if !w.polled.Swap(true) {
					c.up <- struct{}{}
				}
				switch e.SQL.Op {
				case protocol.OpClaim:
					if e.SQL.Result == protocol.ResultOK {
						w.busy.Store(true)
					}
				case protocol.OpComplete, protocol.OpFail:
					w.busy.Store(false)
				}
			case e.Note != nil && e.Note.Code == protocol.NoteLog:
				env.Log.Debug("load lab worker", "lab", l.spec.ID, "worker", label, "line", e.Note.Line)
			}
		}})
		if err != nil {
			l.stopCrew(c)
			return nil, fmt.Errorf("start worker %s: %w", label, err)
		}
		w.proc = p
		c.ws = append(c.ws, w)
	}
	return c, nil
}

// stopCrew kills a crew's workers, stops serving its receiver and gives
// back its extra slots; once, however often it is called.
func (l *Load) stopCrew(c *crew) {
	if c == nil || c.stopped {
		return
	}
	c.stopped = true
	kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, w := range c.ws {
		w.exited.Store(true) // expected from here on
		_ = w.proc.Kill(kctx)
	}
	c.served.Stop()
	for ; c.slots > 0 && l.env.WorkerSlots != nil; c.slots-- {
		<-l.env.WorkerSlots
	}
}

// spareSlots takes n worker slots if they are free at once, all or none.
func (l *Load) spareSlots(n int) bool {
	if l.env.WorkerSlots == nil {
		return true
	}
	for i := range n {
		select {
		case l.env.WorkerSlots <- struct{}{}:
		default:
			for range i {
				<-l.env.WorkerSlots
			}
			return false
		}
	}
	return true
}

// runStyle runs one style's round, where says which, from its stage (and
// its crew, if one was started for it) to its checked counts, and adds
// them to acc, the style's rounds before it; its ticks count those rounds
// in. It calls endedFunc once every job of the round has ended, while its
// last zombies settle.
func (l *Load) runStyle(ctx context.Context, st *stage, where experiments.LoadRound, acc *experiments.LoadStyleResult, endedFunc func()) error {
	env, cfg := l.env, l.spec.Config
	st.ran = true
	defer l.dropLater(st.schemas)
	name, schemas, rcv := st.name, st.schemas, st.rcv
	c := st.crew
	if c == nil {
		var err error
		if c, err = l.spawn(st, where.Round-1); err != nil {
			return err
		}
	}
	defer l.stopCrew(c)
	ws, lost, up, rng, maxWork := c.ws, c.lost, c.up, c.rng, c.maxWork
	lease := cfg.Lease()
	killWorkers := func() { l.stopCrew(c) } // before the last count, or on the way out

	// The queue is filled once every worker is up and polling it, so that
	// all of them start together and the round's span is work, not the
	// workers' start-up (which a loaded machine stretches unevenly).
	waitUp := time.NewTimer(10 * time.Second)
	defer waitUp.Stop()
	for n := 0; n < cfg.Workers; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case label := <-lost:
			return l.workerLost(ctx, label)
		case <-up:
			n++
		case <-waitUp.C:
			n = cfg.Workers // go on: the span starts at the first claim
		}
	}
	for _, stmt := range judge.JobsFill(schemas.Jobs, where.Jobs) {
		if _, err := env.Pool.Exec(ctx, stmt.SQL, stmt.Args...); err != nil {
			return fmt.Errorf("fill the queue: %s: %w", stmt.Name, err)
		}
	}
	start := time.Now()

	// The stalls: every 120 ms or so one more worker freezes, for longer
	// than the lease (by 20–250 ms: often while the job's next owner is
	// still at work, the article's premise), at most half of them at once,
	// until every job has ended.
	var stalls atomic.Int64
	var lastThaw atomic.Int64
	var frozen sync.WaitGroup
	chaosCtx, cancelChaos := context.WithCancel(ctx)
	chaosDone := make(chan struct{}) // closed when the stalls' goroutine has returned
	// stopChaos ends the stalls and waits for their goroutine: only then
	// may frozen be waited for, as no stall starts any more.
	stopChaos := func() {
		cancelChaos()
		<-chaosDone
	}
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
		defer close(chaosDone)
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

	// The counts, read ten times a second and told a few times a second,
	// until every job has ended, every worker is thawed (they thaw as the
	// stalls stop: a worker still frozen then holds a job that another has
	// ended, so it is past its lease already) and the last one thawed has
	// finished what it was doing: no worker holds a job any more (each says
	// so with its statements; a fifth of a second after the last thaw, so
	// that one frozen between its claim and its word of it has spoken), or,
	// at the latest, settle after the last thaw.
	settle := maxWork + lease/2 + 100*time.Millisecond
	busyNow := func() int {
		n := 0
		for _, w := range ws {
			if w.busy.Load() {
				n++
			}
		}
		return n
	}
	poll := time.NewTicker(min(100*time.Millisecond, l.spec.Tick))
	defer poll.Stop()
	var prev experiments.LoadTally
	prevAt := start
	ended := false // a count saw every job ended
	cutShort := false
	// tell reads the live counts and tells them.
	tell := func(now time.Time) error {
		t, err := judge.Tally(ctx, env.Pool, schemas)
		if err != nil {
			return err
		}
		t.Style, t.ElapsedMS, t.Stalls = name, now.Sub(start).Milliseconds(), int(stalls.Load())
		t.PerSecond = float64(t.Done-prev.Done) / now.Sub(prevAt).Seconds()
		prev, prevAt = t, now
		sum := acc.Tally.Add(t)
		l.emit(&protocol.LoadEvent{Phase: experiments.LoadTick, Style: name, Round: where.Round, Position: where.Position, Tally: &sum})
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case label := <-lost:
			return l.workerLost(ctx, label)
		case <-poll.C:
		}
		// Often, only whether the jobs have ended (the history and the
		// receiver's decisions are longer reads, for the ticks alone).
		t, err := judge.TallyJobs(ctx, env.Pool, schemas)
		if err != nil {
			return err
		}
		now := time.Now()
		if t.Done+t.Failed >= t.Jobs && !ended {
			ended = true
			stopChaos()
			endedFunc()
			if err := tell(now); err != nil { // the moment the last job ended
				return err
			}
		} else if now.Sub(prevAt) >= l.spec.Tick {
			if err := tell(now); err != nil {
				return err
			}
		}
		if sinceThaw := time.Since(time.Unix(0, lastThaw.Load())); ended && frozenNow() == 0 &&
			(sinceThaw > settle || sinceThaw > 200*time.Millisecond && busyNow() == 0) {
			break
		}
		if now.Sub(start) > experiments.MaxLoadStyleTime {
			cutShort = true
			stopChaos()
			break
		}
	}
	stopChaos()
	frozen.Wait()
	elapsed := time.Since(start)
	killWorkers() // nothing more is written: the last count is the end

	t, err := judge.Tally(ctx, env.Pool, schemas)
	if err != nil {
		return err
	}
	t.Style, t.ElapsedMS, t.Stalls = name, elapsed.Milliseconds(), int(stalls.Load())
	// Throughput up to the moment the last job ended, not the settling,
	// on the database clock.
	span, err := judge.Span(ctx, env.Pool, schemas)
	if err != nil {
		return err
	}
	if span == 0 {
		span = elapsed
	}
	span = max(time.Millisecond, span)
	check, err := judge.AuditLoad(ctx, env.Pool, schemas.Jobs, rcv, where.Jobs)
	if err != nil {
		return err
	}
	t.PerSecond = float64(t.Done-prev.Done) / time.Since(prevAt).Seconds()
	where.SpanMS, where.PerSecond, where.CutShort = span.Milliseconds(), float64(t.Done)/span.Seconds(), cutShort
	acc.AddRound(where, t, check)
	return nil
}
