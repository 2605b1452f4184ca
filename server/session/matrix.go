package session

import (
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/lab"
	"github.com/fencelab/fencelab/server/control"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/runner"
)

// startMatrix runs every guard × ordering for real, in the background, a
// few at a time, each a run of its own whose verdict fills one cell.
func (s *Session) startMatrix(c control.Command) (Result, error) {
	lease := time.Duration(c.LeaseMS) * time.Millisecond
	if lease == 0 {
		lease = 300 * time.Millisecond
	}
	type cell struct {
		lab.MatrixCell
		spec runner.Spec
	}
	var cells []cell
	for _, o := range lab.Orderings() {
		for _, g := range append([]*engine.Guard{nil}, guardPtrs()...) {
			rc := lab.RunConfig{Ordering: o, Lease: lease, SameIdentity: c.SameIdentity}
			name := ""
			if g != nil {
				rc.Broken = rc.Broken.Break(*g)
				name = g.String()
			}
			if err := rc.Validate(); err != nil {
				return Result{}, err
			}
			cells = append(cells, cell{MatrixCell: lab.MatrixCell{Ordering: o, Broken: name},
				spec: runner.Spec{Config: rc, Mode: lab.ModeAuto, Background: true}})
		}
	}
	if len(cells) > s.m.cfg.Limits.MaxMatrix {
		return Result{}, fault.Errorf(fault.Busy, "the matrix has %d cells, more than this server's limit of %d", len(cells), s.m.cfg.Limits.MaxMatrix)
	}
	ev := &lab.MatrixEvent{SameIdentity: c.SameIdentity, LeaseMS: lease.Milliseconds()}
	res := Result{OK: true}
	for i := range cells {
		id, schemas, err := s.nextRun()
		if err != nil {
			return Result{}, err
		}
		cells[i].Run, cells[i].spec.ID, cells[i].spec.Schemas = id, id, schemas
		ev.Cells = append(ev.Cells, cells[i].MatrixCell)
		res.Runs = append(res.Runs, id)
		rc := cells[i].spec.Config
		s.mu.Lock()
		s.pending[id] = lab.RunInfo{ID: id, Ordering: rc.Ordering, Mode: lab.ModeAuto, Phase: lab.PhaseStarting, Background: true,
			Broken: rc.Broken.Names(), SameIdentity: rc.SameIdentity, LeaseMS: rc.Lease.Milliseconds(), Steps: []lab.Step{}}
		s.mu.Unlock()
	}
	s.emit(lab.Event{Kind: lab.KindMatrix, Actor: lab.ActorRunner, Matrix: ev})

	go func() {
		parallel := max(1, s.m.cfg.Limits.MaxRuns/4)
		sem := make(chan struct{}, parallel)
		var wg sync.WaitGroup
		for _, c := range cells {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				s.playCell(c.spec)
			}()
		}
		wg.Wait()
	}()
	return res, nil
}

func guardPtrs() []*engine.Guard {
	var out []*engine.Guard
	for _, g := range engine.AllGuards() {
		out = append(out, &g)
	}
	return out
}

// playCell plays one matrix run to its verdict. A cell that cannot start
// says why in its own run's events.
func (s *Session) playCell(spec runner.Spec) {
	ctx := s.ctx
	if ctx.Err() != nil {
		return
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
		return
	}
	<-r.Done()
}
