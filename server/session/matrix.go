package session

import (
	"context"
	"sync"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/runner"
	"github.com/fencelab/fencelab/server/sandbox"
)

// batch is a session's batch of background runs while it plays.
type batch struct {
	name   experiments.BatchName
	ev     *protocol.BatchEvent
	ctx    context.Context
	cancel context.CancelCauseFunc // with a *runner.StopCause: a cell caught starting is stopped for its reason
	done   chan struct{}           // closed when every cell has ended

	mu   sync.Mutex
	runs []*runner.Run // the cells that started
}

// startBatch plays a batch of runs for real, in the background, a few at
// a time, each a run of its own: the guard matrix, or one of the article's
// experiments. When every run has ended, the batch says what they showed
// (judge.BatchAnswer), in its own event. A session plays one batch at a
// time: a new one stops the one before. The caller holds s.life.
func (s *Session) startBatch(name experiments.BatchName, lease time.Duration) (Result, error) {
	if lease == 0 {
		lease = experiments.DefaultBatchLease
	}
	rcs, err := experiments.BatchRuns(name, lease)
	if err != nil {
		return Result{}, err
	}
	lim := s.m.cfg.Limits
	if len(rcs) > lim.MaxMatrix {
		return Result{}, fault.Errorf(fault.Busy, "the batch has %d runs, more than this server's limit of %d", len(rcs), lim.MaxMatrix)
	}
	if err := lim.ValidateLease(lease); err != nil {
		return Result{}, err
	}
	return s.playBatch(name, rcs, lease, nil, nil)
}

// playBatch plays runs in the background as a batch of the name, each
// with the reader's statements when sol is set. A check's batch (chk
// set) has one run for each of its cases, in order, and is played and
// judged by the check's pipeline (check.Play), its cells the Player. The
// caller holds s.life.
func (s *Session) playBatch(name experiments.BatchName, rcs []experiments.RunConfig, lease time.Duration, sol *sandbox.Solution, chk *checkPlan) (Result, error) {
	lim := s.m.cfg.Limits
	s.stopBatch(protocol.StopReplaced)
	release := func() {}
	if chk == nil {
		if err := s.m.admit.TakeBatch(s.client, false); err != nil {
			return Result{}, err
		}
	} else {
		release = chk.check.Release // once played, Play has given it back
	}
	ev := &protocol.BatchEvent{Name: name, Phase: protocol.BatchStarted, LeaseMS: lease.Milliseconds()}
	if chk != nil {
		ev.WaitedMS, ev.Board = chk.check.Waited().Milliseconds(), chk.board
	}
	specs := make([]runner.Spec, len(rcs))
	res := Result{OK: true}
	for i, rc := range rcs {
		id, schemas, err := s.nextRun()
		if err != nil {
			s.m.admit.ReleaseBatch(s.client)
			release()
			return Result{}, err
		}
		specs[i] = runner.Spec{ID: id, Schemas: schemas, Config: rc, Mode: protocol.ModeAuto, Background: true, Solution: sol}
		cell := judge.CellOf(id, rc)
		if chk != nil {
			cell.Case = chk.cases[i]
		}
		ev.Cells = append(ev.Cells, cell)
		res.Runs = append(res.Runs, id)
	}
	b := &batch{name: name, ev: ev, done: make(chan struct{})}
	b.ctx, b.cancel = context.WithCancelCause(s.ctx)
	s.mu.Lock()
	for i, rc := range rcs {
		s.pending[specs[i].ID] = protocol.RunInfo{ID: specs[i].ID, Ordering: rc.Ordering, Mode: protocol.ModeAuto, Phase: protocol.PhaseStarting, Background: true,
			Broken: rc.Broken.Names(), SameIdentity: rc.SameIdentity, Delivery: rc.Delivery, LeaseMS: rc.Lease.Milliseconds(), Steps: []experiments.Step{}, Custom: rc.Custom}
	}
	s.batch = b
	s.mu.Unlock()
	s.emit(protocol.Event{Kind: protocol.KindBatch, Actor: protocol.ActorRunner, Batch: ev})

	// A few at a time, and never more than the session's share of the
	// server's run slots, one of which stays free for its current run.
	parallel := max(1, min(lim.MaxRuns/4, lim.MaxRunsPerSession-1))
	started := time.Now()
	go func() {
		defer close(b.done)
		defer release()
		defer s.m.admit.ReleaseBatch(s.client)
		outcomes := make([]*protocol.Outcome, len(specs))
		failures := make([]*protocol.Failure, len(specs))
		var wg sync.WaitGroup
		var rep *protocol.CheckReport
		if chk != nil && chk.finished != nil {
			defer func() { chk.finished(rep) }() // nil when stopped
		}
		if chk != nil {
			rep = s.judgeBatch(b, *chk, specs, outcomes, failures, parallel)
		} else {
			sem := make(chan struct{}, parallel)
			for i, spec := range specs {
				select {
				case sem <- struct{}{}:
				case <-b.ctx.Done():
				}
				if b.ctx.Err() != nil {
					break
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					outcomes[i], failures[i] = s.playCell(b, spec)
				}()
			}
		}
		wg.Wait()
		s.mu.Lock()
		for _, spec := range specs {
			delete(s.pending, spec.ID) // cells a stopped batch never started
		}
		if s.batch == b {
			s.batch = nil
		}
		s.mu.Unlock()
		if b.ctx.Err() != nil {
			rep = nil
			return // stopped: stopBatch says so
		}
		if rep != nil {
			s.m.checks.Add(time.Since(started)) // for the estimates of the checks in line
		}
		done := judge.FinishBatch(name, ev.LeaseMS, ev.Cells, outcomes)
		if rep != nil {
			done.Check, done.Answer = rep, rep.Words
		}
		s.emit(protocol.Event{Kind: protocol.KindBatch, Actor: protocol.ActorRunner, Batch: done})
	}()
	return res, nil
}

// stopBatch stops the session's batch, if one is playing: no cell starts
// any more, and the ones playing end (workers reaped, schemas dropped)
// before it returns.
func (s *Session) stopBatch(reason protocol.StopReason) {
	s.mu.Lock()
	b := s.batch
	s.batch = nil
	s.mu.Unlock()
	if b == nil {
		return
	}
	b.cancel(&runner.StopCause{Reason: reason})
	b.mu.Lock()
	runs := append([]*runner.Run(nil), b.runs...)
	b.mu.Unlock()
	for _, r := range runs {
		r.Stop(reason)
	}
	<-b.done
	if s.ctx.Err() == nil {
		s.emit(protocol.Event{Kind: protocol.KindBatch, Actor: protocol.ActorRunner, Batch: &protocol.BatchEvent{Name: b.name, Phase: protocol.BatchStopped,
			LeaseMS: b.ev.LeaseMS, Cells: b.ev.Cells, Answer: protocol.StopWords(reason), Unsafe: []string{}}})
	}
}

// playCell plays one run of a batch to its verdict and returns its
// outcome, or nil and why. A run that cannot start says why in its own
// events too.
func (s *Session) playCell(b *batch, spec runner.Spec) (*protocol.Outcome, *protocol.Failure) {
	ctx := b.ctx
	if ctx.Err() != nil {
		return nil, nil
	}
	r, err := s.open(ctx, spec, 2*time.Minute, func(r *runner.Run) {
		b.mu.Lock()
		b.runs = append(b.runs, r)
		b.mu.Unlock()
		if ctx.Err() != nil { // the batch was stopped as this one began: for its reason
			reason, ok := runner.StopReasonOf(ctx)
			if !ok {
				reason = protocol.StopReplaced
			}
			r.Stop(reason)
		}
	})
	if err != nil {
		s.mu.Lock()
		p, pending := s.pending[spec.ID]
		if pending {
			p.Phase, p.Error = protocol.PhaseFailed, protocol.FailureOf(err)
			s.pending[spec.ID] = p
		}
		s.mu.Unlock()
		if pending && ctx.Err() == nil { // it never began, so nothing has said so yet
			s.emit(protocol.Event{Kind: protocol.KindError, Actor: protocol.ActorRunner, Run: spec.ID,
				Error: &protocol.ErrorEvent{Code: protocol.ErrStartFailed, Message: fault.MessageOf(err)}})
		}
		return nil, protocol.FailureOf(err)
	}
	<-r.Done()
	if o := r.Outcome(); o != nil {
		return o, nil
	}
	return nil, r.Info().Error
}
