package session

import (
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine/lab"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/runner"
)

// startBatch plays a batch of runs for real, in the background, a few at
// a time, each a run of its own: the guard matrix, or one of the article's
// experiments. When every run has ended, the batch says what they showed
// (lab.BatchAnswer), in its own event.
func (s *Session) startBatch(name lab.BatchName, lease time.Duration) (Result, error) {
	if lease == 0 {
		lease = 300 * time.Millisecond
	}
	rcs, err := lab.BatchRuns(name, lease)
	if err != nil {
		return Result{}, err
	}
	if len(rcs) > s.m.cfg.Limits.MaxMatrix {
		return Result{}, fault.Errorf(fault.Busy, "the batch has %d runs, more than this server's limit of %d", len(rcs), s.m.cfg.Limits.MaxMatrix)
	}
	ev := &lab.BatchEvent{Name: name, Phase: lab.BatchStarted, LeaseMS: lease.Milliseconds()}
	specs := make([]runner.Spec, len(rcs))
	res := Result{OK: true}
	for i, rc := range rcs {
		id, schemas, err := s.nextRun()
		if err != nil {
			return Result{}, err
		}
		specs[i] = runner.Spec{ID: id, Schemas: schemas, Config: rc, Mode: lab.ModeAuto, Background: true}
		ev.Cells = append(ev.Cells, lab.CellOf(id, rc))
		res.Runs = append(res.Runs, id)
		s.mu.Lock()
		s.pending[id] = lab.RunInfo{ID: id, Ordering: rc.Ordering, Mode: lab.ModeAuto, Phase: lab.PhaseStarting, Background: true,
			Broken: rc.Broken.Names(), SameIdentity: rc.SameIdentity, Delivery: rc.Delivery, LeaseMS: rc.Lease.Milliseconds(), Steps: []lab.Step{}}
		s.mu.Unlock()
	}
	s.emit(lab.Event{Kind: lab.KindBatch, Actor: lab.ActorRunner, Batch: ev})

	go func() {
		parallel := max(1, s.m.cfg.Limits.MaxRuns/4)
		sem := make(chan struct{}, parallel)
		outcomes := make([]*lab.Outcome, len(specs))
		var wg sync.WaitGroup
		for i, spec := range specs {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				outcomes[i] = s.playCell(spec)
			}()
		}
		wg.Wait()
		if s.ctx.Err() != nil {
			return // the session ended: nobody is left to tell
		}
		done := &lab.BatchEvent{Name: name, Phase: lab.BatchFinished, LeaseMS: ev.LeaseMS, Cells: ev.Cells}
		done.Answer, done.Unsafe = lab.BatchAnswer(name, ev.Cells, outcomes)
		if done.Unsafe == nil {
			done.Unsafe = []string{}
		}
		s.emit(lab.Event{Kind: lab.KindBatch, Actor: lab.ActorRunner, Batch: done})
	}()
	return res, nil
}

// playCell plays one run of a batch to its verdict and returns its
// outcome, or nil. A run that cannot start says why in its own events.
func (s *Session) playCell(spec runner.Spec) *lab.Outcome {
	ctx := s.ctx
	if ctx.Err() != nil {
		return nil
	}
	r, err := s.open(ctx, spec, 2*time.Minute, nil)
	if err != nil {
		s.mu.Lock()
		p, pending := s.pending[spec.ID]
		if pending {
			p.Phase, p.Error = lab.PhaseFailed, &lab.Failure{Code: string(fault.CodeOf(err)), Message: fault.MessageOf(err)}
			s.pending[spec.ID] = p
		}
		s.mu.Unlock()
		if pending { // it never began, so nothing has said so yet
			s.emit(lab.Event{Kind: lab.KindError, Actor: lab.ActorRunner, Run: spec.ID,
				Error: &lab.ErrorEvent{Code: lab.ErrStartFailed, Message: fault.MessageOf(err)}})
		}
		return nil
	}
	<-r.Done()
	return r.Outcome()
}
