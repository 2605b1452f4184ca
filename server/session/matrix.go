package session

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/control"
)

// MatrixCell is one run of the guard × ordering matrix.
type MatrixCell struct {
	Run      string          `json:"run"`
	Ordering engine.Ordering `json:"ordering"`
	Broken   string          `json:"broken"` // "" for the correct build
}

// startMatrix runs every guard × ordering for real, in the background, a
// few at a time, each a run of its own whose verdict fills one cell.
func (s *Session) startMatrix(c control.Command) (Result, error) {
	lease := time.Duration(c.LeaseMS) * time.Millisecond
	if lease == 0 {
		lease = 300 * time.Millisecond
	}
	var cells []MatrixCell
	var handles []*runHandle
	guards := append([]engine.Guard{255}, engine.AllGuards()...) // 255: none broken
	for _, o := range engine.Orderings() {
		for _, g := range guards {
			rc := engine.RunConfig{Ordering: o, Lease: lease, SameIdentity: c.SameIdentity}
			name := ""
			if g != 255 {
				rc.Broken = rc.Broken.Break(g)
				name = g.String()
			}
			if err := rc.Validate(); err != nil {
				return Result{}, fmt.Errorf("%w: %v", engine.ErrInvalidInput, err)
			}
			h, err := s.newHandle(rc, "matrix", true)
			if err != nil {
				return Result{}, err
			}
			handles = append(handles, h)
			cells = append(cells, MatrixCell{Run: h.id, Ordering: o, Broken: name})
		}
	}
	if len(cells) > s.m.cfg.Limits.MaxMatrix {
		return Result{}, fmt.Errorf("%w: the matrix has %d cells, more than this server's limit of %d", ErrBusy, len(cells), s.m.cfg.Limits.MaxMatrix)
	}
	s.mu.Lock()
	for _, h := range handles {
		s.keep(h)
	}
	s.mu.Unlock()
	data, _ := json.Marshal(cells)
	s.emit(engine.Event{Kind: engine.KindRun, Actor: "runner", At: time.Now(), Outcome: "matrix", Data: data,
		Text: fmt.Sprintf("The guard matrix: %d runs, every guard off in every ordering, for real.", len(cells))})

	go func() {
		parallel := max(1, s.m.cfg.Limits.MaxRuns/4)
		sem := make(chan struct{}, parallel)
		var wg sync.WaitGroup
		for _, h := range handles {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				s.playCell(h)
			}()
		}
		wg.Wait()
	}()
	res := Result{OK: true}
	for _, c := range cells {
		res.Runs = append(res.Runs, c.Run)
	}
	return res, nil
}

// playCell plays one matrix run to its verdict.
func (s *Session) playCell(h *runHandle) {
	ctx := s.ctx
	if ctx.Err() != nil {
		return
	}
	if err := h.start(ctx, 2*time.Minute); err != nil {
		h.mu.Lock()
		h.errText = err.Error()
		h.ended = time.Now()
		h.mu.Unlock()
		s.emit(engine.Event{Kind: engine.KindError, Actor: "runner", Run: h.id, At: time.Now(), Error: err.Error(),
			Text: "The run could not start: " + err.Error()})
		return
	}
	s.emitRunState(h)
	for !h.run.Done() {
		if _, err := h.run.Step(ctx); err != nil {
			h.fail(err)
			return
		}
	}
	h.finish(ctx)
}
