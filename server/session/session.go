package session

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/check"
	"github.com/fencelab/fencelab/server/run/control"
	"github.com/fencelab/fencelab/server/run/inbox"
	"github.com/fencelab/fencelab/server/run/runner"
	"github.com/fencelab/fencelab/server/session/eventlog"
	"github.com/fencelab/fencelab/server/session/line"
	"github.com/fencelab/fencelab/server/session/runschemas"
)

// Session is one visitor's playground: its runs and their event log. The
// person holding Token drives; anyone with ID may watch. A session holds
// its current run (a runner.Run, which owns that run's whole life: its
// workers, schemas and steps), the runs it had, the batch or load lab
// playing, the batch cells waiting for a slot, and its check's ticket in
// the server's line. It is an actor: the commands that start and end runs
// (run, reset, check, batch, load) it carries out itself, one at a time, on
// a goroutine of its own (server/run/inbox); every other it hands to its
// current run, the same kind of actor (runner.Run.Do). Safe for
// concurrent use.
type Session struct {
	ID      string
	Token   string
	Created time.Time
	Log     *eventlog.Log

	m       *Manager
	serial  string
	client  string       // ClientKey of whoever made it; "" for none
	claimed atomic.Bool  // a command or a socket has used it: not a bare page load
	working atomic.Int32 // commands being carried out: a session at work is not idle
	ctx     context.Context
	cancel  context.CancelFunc

	// in carries out the commands that change which runs the session has
	// (run, reset, check, batch, load), one at a time; other commands go
	// straight to the current run, which carries out its own.
	in *inbox.Inbox[*order, Result]
	// life is held by each order in carries out, and by the sweeper's
	// abandonRuns.
	life sync.Mutex

	mu         sync.Mutex
	lastActive time.Time
	current    *runner.Run
	batch      *batch                      // the batch playing, if any
	inLine     *line.Ticket                // the session's check waiting in the server's line, if any
	classLine  ClassLine                   // where its checks wait instead, a class student's
	seat       *ClassSeat                  // the class its student sits in, if any (SetClass)
	awaiting   map[int64]chan played       // by job: the callers waiting for their class check to play
	load       *runner.Load                // the load lab, if one ran; it may have ended
	runs       []*runner.Run               // newest last; bounded
	pending    map[string]protocol.RunInfo // batch cells waiting for a run slot
	runSerial  int64
	inFlight   int // this session's runs that hold a run slot
	closed     bool
}

// maxKeptRuns bounds how many ended runs a session remembers.
const maxKeptRuns = 200

func newSession(m *Manager, id, token, serial string) *Session {
	s := &Session{ID: id, Token: token, Created: time.Now(), m: m, serial: serial, lastActive: time.Now(), pending: map[string]protocol.RunInfo{}, awaiting: map[int64]chan played{},
		Log: eventlog.New(eventlog.Config{MaxEvents: m.cfg.Limits.MaxEvents, MaxBytes: int64(m.cfg.Limits.MaxSessionMB) << 20, SubscriberBuffer: m.cfg.Limits.SocketBuffer, TapFunc: m.cfg.TapFunc, Budget: m.events})}
	s.ctx, s.cancel = context.WithCancel(m.ctx)
	s.in = inbox.New("the session", s.carry)
	return s
}

func (s *Session) short() string { return s.ID[:6] }

// CanDrive reports whether token is this session's control token.
func (s *Session) CanDrive(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.Token)) == 1
}

// Touch marks the session as in use.
func (s *Session) Touch() {
	s.mu.Lock()
	s.lastActive = time.Now()
	s.mu.Unlock()
}

// Claim marks the session as used by someone (a command, a socket), not
// only made by a page load: it lives as long as SessionIdle, not FreshIdle.
func (s *Session) Claim() {
	s.claimed.Store(true)
	s.Touch()
}

func (s *Session) lastActiveAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastActive
}

func (s *Session) idleFor() time.Duration {
	if s.Log.Subscribers() > 0 || s.working.Load() > 0 {
		return 0 // someone is watching, or a command is being carried out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.lastActive)
}

// emit adds an event to the session's log.
func (s *Session) emit(e protocol.Event) {
	e.V = protocol.ProtocolVersion
	if e.At.IsZero() {
		e.At = time.Now()
	}
	protocol.Narrate(&e)
	s.Log.Append(e)
}

// Result is what a command answers.
type Result struct {
	OK  bool   `json:"ok"`
	Run string `json:"run,omitempty"`
	runner.Result
	Runs []string `json:"runs,omitempty"`
}

// Execute carries out one decoded command. The ones that start and end
// runs (run, reset, check, batch, load) are the session's own: it carries
// them out itself, one at a time, in the order they came, on a goroutine of
// its own (its inbox, server/run/inbox). Every other is its current run's,
// carried out by that run's own inbox (runner.Run.Do). A check waits for
// its turn in the server's line between two orders to the session, so the
// session takes other commands meanwhile, and a reset takes the check out
// of the line. The caller has checked that it may drive. Its errors carry
// fault codes.
func (s *Session) Execute(ctx context.Context, c control.Command) (Result, error) {
	s.Claim()
	// Idle counts from a command's end, not its start: a run that takes
	// longer to start than SessionIdle on a busy machine is not swept
	// away under the command starting it.
	s.working.Add(1)
	defer func() {
		s.Touch()
		s.working.Add(-1)
	}()
	switch c.Action {
	case control.Run, control.Load, control.Matrix, control.Batch:
		return s.in.Do(ctx, string(c.Action), &order{cmd: c})
	case control.Reset:
		s.leaveLine() // at once, even while the session carries out another order
		return s.in.Do(ctx, string(c.Action), &order{cmd: c})
	case control.Check:
		if q := s.classLineOf(); q != nil {
			res, err := s.classCheck(ctx, q, c)
			if !errors.Is(err, ErrClassEnded) {
				return res, err
			}
			// Ended where this instance did not see it (on another, or
			// idle): the page is told now, and the check is its own.
			_ = s.EndClass()
		}
		return s.check(ctx, c)
	}
	r := s.currentRun()
	if r == nil {
		return Result{}, fault.Errorf(fault.Conflict, "there is no run: start one with {\"action\":\"run\",\"ordering\":\"zombie-first\"}")
	}
	rr, err := r.Do(ctx, c) // carried out by the run itself, in line with any other command to it
	return Result{OK: true, Run: r.ID(), Result: rr}, err
}

// order is a command to the session, as its inbox carries it out.
type order struct {
	cmd control.Command
	// play marks a check's second order, once its turn has come
	// (playCheck); its first (joinCheck) only checks what can be checked
	// at once.
	play bool
	// turn is a check's place in the server's line, given back when the
	// check ends; nil for a class check, whose turn is given.
	turn *turn
	// given is a class check's turn: its job in the class's line, claimed
	// (PlayClassCheck).
	given check.Turn
	// finished, if set, is told a check's report when its batch ends (nil:
	// stopped): a class check's (PlayClassCheck).
	finished func(*protocol.CheckReport)
}

// carry carries out one order to the session, holding s.life.
func (s *Session) carry(ctx context.Context, o *order) (Result, error) {
	s.life.Lock()
	defer s.life.Unlock()
	c := o.cmd
	switch c.Action {
	case control.Run:
		return s.startRun(ctx, c)
	case control.Reset:
		s.stopBatch(protocol.StopReset)
		s.stopLoad(protocol.StopReset)
		r := s.currentRun()
		if r == nil {
			return Result{OK: true}, nil
		}
		r.Stop(protocol.StopReset)
		return Result{OK: true, Run: r.ID()}, nil
	case control.Load:
		return s.startLoad(c.LoadConfig())
	case control.Check:
		if !o.play {
			return s.joinCheck(o, time.Duration(c.LeaseMS)*time.Millisecond)
		}
		t, board := o.given, ""
		if seat := s.classSeat(); t != nil && seat != nil {
			board = seat.Code // a class check, played in its turn in the class's line
		}
		if o.turn != nil {
			if !o.turn.own() {
				return Result{}, fault.Errorf(fault.Unavailable, "the check was given up before it was played")
			}
			t = o.turn
		}
		if t == nil {
			return Result{}, fault.Errorf(fault.Internal, "a check plays only in its turn")
		}
		return s.playCheck(ctx, t, board, *c.Solution, time.Duration(c.LeaseMS)*time.Millisecond, o.finished)
	case control.Matrix, control.Batch:
		name := c.Name
		if c.Action == control.Matrix {
			name = experiments.BatchMatrix
		}
		return s.startBatch(name, time.Duration(c.LeaseMS)*time.Millisecond)
	}
	return Result{}, fault.Errorf(fault.Invalid, "%q is not a command to a session", c.Action)
}

func (s *Session) currentRun() *runner.Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

// nextRun names the session's next run (r1, r2, …) and its schemas.
func (s *Session) nextRun() (id string, schemas judge.Schemas, err error) { return s.next("r") }

// next names the session's next run or load lab — kind and a serial the
// two share — and its schemas.
func (s *Session) next(kind string) (id string, schemas judge.Schemas, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", judge.Schemas{}, fault.Errorf(fault.NotFound, "the session has ended")
	}
	s.runSerial++
	n := strconv.FormatInt(s.runSerial, 36)
	return kind + n, runschemas.Pair(s.m.instance, s.serial+"_"+n), nil
}

// startRun ends the current run and starts a new one. The caller holds
// s.life, so the run it ends is the only other one there is.
func (s *Session) startRun(ctx context.Context, c control.Command) (Result, error) {
	rc, err := c.RunConfig()
	if err != nil {
		return Result{}, err
	}
	lim := s.m.cfg.Limits
	if err := lim.ValidateLease(rc.Lease); err != nil {
		return Result{}, err
	}
	if old := s.currentRun(); old != nil {
		old.Stop(protocol.StopReplaced) // returns when it has ended: workers reaped, schemas dropped
	}
	spec := runner.Spec{Config: rc, Mode: c.Mode, Pace: 900 * time.Millisecond}
	if c.PaceMS != nil {
		spec.Pace = time.Duration(*c.PaceMS) * time.Millisecond
	}
	r, err := s.open(ctx, spec, 0, func(r *runner.Run) {
		// The current run from the moment it exists: a command that comes
		// while it starts waits for it.
		s.mu.Lock()
		s.current = r
		s.mu.Unlock()
	})
	if err != nil {
		return Result{}, err
	}
	return Result{OK: true, Run: r.ID()}, nil
}

// open starts a run of the session: a run slot (waiting up to wait for
// one), its names, and runner.Open. The slot is given back, and a finished
// run recorded, when the run ends.
// made, if set, is told of the run before it starts.
func (s *Session) open(ctx context.Context, spec runner.Spec, wait time.Duration, made func(*runner.Run)) (*runner.Run, error) {
	if spec.ID == "" {
		id, schemas, err := s.nextRun()
		if err != nil {
			return nil, err
		}
		spec.ID, spec.Schemas = id, schemas
	}
	if err := s.m.acquireRun(ctx, s.client, wait); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.inFlight++
	s.mu.Unlock()
	var released atomic.Bool
	release := func() {
		if released.CompareAndSwap(false, true) {
			s.mu.Lock()
			s.inFlight--
			s.mu.Unlock()
			s.m.admit.ReleaseRun(s.client)
		}
	}
	// A spare pair of schemas, made in advance, if there is one.
	if spare, ok := s.m.takeSpare(); ok {
		spec.Schemas, spec.Prepared = spare, true
	}
	spec.EmitFunc = s.emit
	client := s.client
	spec.TakeWorkerFunc = func() error { return s.m.admit.TakeWorker(client) }
	spec.GiveWorkerFunc = func() { s.m.admit.GiveWorker(client) }
	spec.OnEndFunc = func(r *runner.Run) {
		release()
		if o := r.Outcome(); o != nil {
			s.m.record(s, r, o)
		}
	}
	r, err := runner.New(s.m.env, spec)
	if err != nil {
		release() // refused before it began: nothing will end to give the slot back
		if spec.Prepared {
			runschemas.Drop(s.m.cfg.Pool, s.m.cfg.Log, spec.Schemas) // no run took them over
		}
		return nil, err
	}
	s.mu.Lock()
	delete(s.pending, r.ID())
	s.runs = append(s.runs, r)
	if over := len(s.runs) - maxKeptRuns; over > 0 {
		s.runs = append([]*runner.Run(nil), s.runs[over:]...)
	}
	closed := s.closed
	s.mu.Unlock()
	if closed { // the session ended meanwhile: ending the run gives its slot back
		r.Stop(protocol.StopSessionEnd)
		return nil, fault.Errorf(fault.NotFound, "the session has ended")
	}
	if made != nil {
		made(r)
	}
	if err := r.Start(ctx); err != nil {
		release() // if it never ended, nothing else gives the slot back
		return nil, err
	}
	return r, nil
}

// expireRuns stops runs that have gone on longer than max.
func (s *Session) expireRuns(max time.Duration) {
	s.mu.Lock()
	runs := append([]*runner.Run(nil), s.runs...)
	s.mu.Unlock()
	for _, r := range runs {
		if i := r.Info(); !i.Phase.Ended() && time.Since(i.Started) > max {
			r.Stop(protocol.StopTimeLimit)
		}
	}
}

// abandonRuns stops the session's current run and batch when nobody has
// watched the session or sent it a command for longer than idle: a reader
// who closed the tab gives back the run's slot within about a minute.
func (s *Session) abandonRuns(idle time.Duration) {
	if s.idleFor() <= idle {
		return
	}
	s.life.Lock()
	defer s.life.Unlock()
	if s.idleFor() <= idle { // a command came meanwhile
		return
	}
	s.stopBatch(protocol.StopAbandoned)
	s.stopLoad(protocol.StopAbandoned)
	if r := s.currentRun(); r != nil && !r.Phase().Ended() {
		r.Stop(protocol.StopAbandoned)
	}
}

// close ends the session: every run, then the log and its sockets.
func (s *Session) close(why protocol.SessionEndReason) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	runs := append([]*runner.Run(nil), s.runs...)
	load := s.load
	s.mu.Unlock()
	reason := protocol.StopSessionEnd
	if why == protocol.SessionShutdown {
		reason = protocol.StopShutdown
	}
	if load != nil {
		load.Stop(reason)
	}
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Stop(reason)
		}()
	}
	wg.Wait()
	s.cancel()
	s.emit(protocol.Event{Kind: protocol.KindSession, Actor: protocol.ActorServer, Session: &protocol.SessionEvent{Reason: why}})
	s.Log.Close()
	if why != protocol.SessionShutdown { // at shutdown the instance's row goes, and its sessions' with it
		s.m.inst.Remove(s.ID)
	}
}

// String names the session in a log line.
func (s *Session) String() string { return fmt.Sprintf("session %s", s.short()) }
