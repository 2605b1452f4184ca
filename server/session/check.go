package session

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/check"
	"github.com/fencelab/fencelab/server/run/control"
	"github.com/fencelab/fencelab/server/run/runner"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/session/line"
)

// check checks a reader's own four statements, in two orders to the
// session with a wait in the server's line between them (joinLine,
// waitTurn), the caller's: joinCheck checks what can be checked at once,
// so that a bad lease or a server without custom SQL starts nothing; the
// session takes other commands while the check waits; playCheck, once
// its turn has come, checks the statements as a role on throwaway schemas,
// so that a refused statement is a 400 that starts nothing, then plays
// each of the article's cases as a background run of the session's batch
// "check", whose finished event carries the report.
func (s *Session) check(ctx context.Context, c control.Command) (Result, error) {
	o := &order{cmd: c}
	if _, err := s.in.Do(ctx, string(c.Action), o); err != nil {
		return Result{}, err
	}
	o.turn, o.play = s.joinLine(), true
	if err := s.waitTurn(ctx, o.turn); err != nil {
		return Result{}, err
	}
	res, err := s.in.Do(ctx, string(c.Action), o)
	if err != nil && o.turn.own() { // never played: its turn goes to the next
		o.turn.release()
	}
	return res, err
}

// turn is a check's ticket in the server's line, with its release: the
// turn given back (once) when the check's batch ends, or when the check
// never plays. Whichever of the session's playCheck and the check's caller
// owns it first gives it back.
type turn struct {
	*line.Ticket
	owned   atomic.Bool
	release func()
}

// own takes the turn's ownership, if nobody has.
func (t *turn) own() bool { return t.owned.CompareAndSwap(false, true) }

// Release gives the turn back (check.Turn); only the first call counts.
func (t *turn) Release() { t.release() }

// joinCheck checks the check's lease and cases, and stops the check or
// batch the session played before, so its turn is given back. The caller
// holds s.life.
func (s *Session) joinCheck(o *order, lease time.Duration) (Result, error) {
	if !s.m.cfg.CustomSQL {
		return Result{}, fault.Errorf(fault.Forbidden, "this server does not run readers' own SQL (it was started with --no-custom-sql)")
	}
	lease, err := check.Lease("lease", lease)
	if err != nil {
		return Result{}, err
	}
	lim := s.m.cfg.Limits
	if lease < lim.MinLease || lease > lim.MaxLease {
		return Result{}, fault.Errorf(fault.Invalid, "lease %v must be between %v and %v on this server", lease, lim.MinLease, lim.MaxLease)
	}
	o.cmd.LeaseMS = lease.Milliseconds()
	for _, c := range experiments.CheckCases() {
		rc := c.Config(lease)
		if err := rc.Validate(); err != nil {
			return Result{}, err
		}
	}
	s.stopBatch(protocol.StopReplaced)
	return Result{}, nil
}

// joinLine puts the session's check in the server's line, the session
// told its place (a note, "Your check is 3rd in line.") each time it
// moves. A check of the session's that still waited is replaced, and this
// one keeps its place.
func (s *Session) joinLine() *turn {
	key := s.client
	if key == "" {
		key = "session " + s.ID // loopback: no address caps, each session its own
	}
	s.mu.Lock() // the session's place, read and replaced at once
	defer s.mu.Unlock()
	t := s.m.line.Join(key, s.inLine, func(place int) {
		s.emit(s.m.inLine(place))
	})
	s.inLine = t
	var once sync.Once
	return &turn{Ticket: t, release: func() { once.Do(func() { s.m.line.Done(t) }) }}
}

// lineWait is how long a check waits in line before it gives up.
const lineWait = 10 * time.Minute

// waitTurn waits for the check's turn in the server's line, or until ctx
// or the session ends, or a reset or a newer check takes it out.
func (s *Session) waitTurn(ctx context.Context, t *turn) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	err := s.m.line.Wait(wctx, t.Ticket, lineWait)
	s.mu.Lock()
	if s.inLine == t.Ticket {
		s.inLine = nil
	}
	s.mu.Unlock()
	return err
}

// playCheck plays a check whose turn has come in its line (the server's,
// or a class's): the caps come before any work: the address's count of
// batches (one more while this session's own is about to be replaced),
// then a run slot, the server's and the address's, held while the check
// starts (check.Start: its lease and its statements' trial, on schemas and
// a role of their own). A flood from one address is refused here, before
// a schema, a role or a trial run is made. The check owns its turn from
// here, and gives it back when it ends or never plays. board is the
// class whose board it counts on (its code), "" for none. The caller
// holds s.life.
func (s *Session) playCheck(ctx context.Context, t check.Turn, board string, sol sandbox.Solution, lease time.Duration, finished func(*protocol.CheckReport)) (Result, error) {
	s.mu.Lock()
	replacing := s.batch != nil
	s.mu.Unlock()
	if err := s.m.admit.TakeBatch(s.client, replacing); err != nil {
		t.Release()
		return Result{}, err
	}
	if err := s.m.acquireRun(ctx, s.client, 20*time.Second); err != nil {
		s.m.admit.ReleaseBatch(s.client)
		t.Release()
		return Result{}, err
	}
	ck, err := check.Start(ctx, check.Request{Turn: t, Lease: lease, Validate: func(ctx context.Context) (experiments.Probes, error) {
		return s.validate(ctx, sol)
	}})
	s.m.admit.ReleaseRun(s.client)
	if err != nil { // the turn is given back
		s.m.admit.ReleaseBatch(s.client)
		return Result{}, err
	}
	cases := ck.Cases()
	rcs := make([]experiments.RunConfig, len(cases))
	for i, c := range cases {
		rcs[i] = c.Config(ck.Lease())
	}
	// playBatch's now: it gives the count and the turn back when the batch ends, or on its own error
	return s.playBatch(experiments.BatchCheck, rcs, ck.Lease(), &sol, &checkPlan{check: ck, cases: cases, board: board, finished: finished})
}

// leaveLine takes the session's check out of the line, if it waits there.
func (s *Session) leaveLine() {
	s.mu.Lock()
	t := s.inLine
	s.mu.Unlock()
	if t != nil {
		s.m.line.Leave(t)
	}
}

// validate checks a solution's statements on schemas of the session's own
// (check.Validate), within 20 s.
func (s *Session) validate(ctx context.Context, sol sandbox.Solution) (experiments.Probes, error) {
	_, schemas, err := s.next("v")
	if err != nil {
		return experiments.Probes{}, err
	}
	vctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return check.Validate(vctx, s.m.cfg.Pool, schemas, sol)
}

// checkPlan is a check's batch: the check started (its cases, one run
// each in the batch's order; its turn), whose address's batch count
// playCheck has taken.
type checkPlan struct {
	check *check.Checking
	cases []experiments.CheckCase
	board string // the class whose board it counts on, "" for none
	// finished, if set, is told the report when the batch ends (nil:
	// stopped, or not judged).
	finished func(*protocol.CheckReport)
}

// judgeBatch plays a check's batch through the check's pipeline, each
// case the batch's cell for it, and returns the report, or nil when the
// batch was stopped. It fills each cell's outcome or failure, for the
// batch's finished event.
func (s *Session) judgeBatch(b *batch, chk checkPlan, specs []runner.Spec, outcomes []*protocol.Outcome, failures []*protocol.Failure, parallel int) *protocol.CheckReport {
	var mu sync.Mutex
	played := make([]int, len(specs))
	cell := check.PlayerFunc(func(ctx context.Context, c experiments.CheckCase) (judge.CheckInput, error) {
		i := slices.Index(chk.cases, c)
		if i < 0 || i >= len(specs) {
			return judge.CheckInput{Case: c}, fmt.Errorf("the check's batch has no cell for the %s case", c)
		}
		mu.Lock()
		played[i]++
		again := played[i] > 1
		mu.Unlock()
		spec := specs[i]
		if again { // played again (a statement timeout ended its first play): a run of its own
			id, schemas, err := s.nextRun()
			if err != nil {
				return judge.CheckInput{Case: c}, err
			}
			spec.ID, spec.Schemas = id, schemas
		}
		o, f := s.playCell(b, spec)
		mu.Lock()
		outcomes[i], failures[i] = o, f
		mu.Unlock()
		return judge.CheckInput{Case: c, Run: spec.ID, Outcome: o, Err: f}, ctx.Err()
	})
	rep, err := chk.check.Play(b.ctx, cell, parallel, nil)
	if err != nil {
		if b.ctx.Err() == nil {
			s.m.cfg.Log.Error("a check's batch could not be judged", "err", err)
		}
		return nil
	}
	return &rep
}

// inLine is the note that tells a session its check's place in a line,
// with the estimate of its wait.
func (m *Manager) inLine(place int) protocol.Event {
	wait := m.checks.Wait(place, m.cfg.Limits.MaxChecks)
	return protocol.Event{Kind: protocol.KindNote, Actor: protocol.ActorRunner,
		Note: &protocol.NoteEvent{Code: protocol.NoteInLine, Place: place, WaitS: int(wait / time.Second)}}
}
