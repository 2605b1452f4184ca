package session

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/control"
	"github.com/fencelab/fencelab/server/runner"
)

// RunSummary is a run as the page and the API show it.
type RunSummary struct {
	ID           string              `json:"id"`
	Ordering     engine.Ordering     `json:"ordering"`
	Title        string              `json:"title"`
	Mode         string              `json:"mode"`
	Background   bool                `json:"background,omitempty"`
	Broken       []string            `json:"broken"`
	SameIdentity bool                `json:"same_identity"`
	LeaseMS      int64               `json:"lease_ms"`
	SkewMS       int64               `json:"skew_ms,omitempty"`
	PaceMS       int64               `json:"pace_ms"`
	Paused       bool                `json:"paused"`
	StepIndex    int                 `json:"step_index"`
	Steps        []engine.Step       `json:"steps"`
	Started      time.Time           `json:"started"`
	Ended        *time.Time          `json:"ended,omitempty"`
	Outcome      *engine.Outcome     `json:"outcome,omitempty"`
	Report       *engine.Report      `json:"report,omitempty"`
	Error        string              `json:"error,omitempty"`
	Workers      []runner.WorkerInfo `json:"workers,omitempty"`
	Jobs         []engine.Job        `json:"jobs,omitempty"`
}

func (h *runHandle) summary() RunSummary {
	h.mu.Lock()
	defer h.mu.Unlock()
	rs := RunSummary{ID: h.id, Ordering: h.cfg.Ordering, Title: h.cfg.Ordering.Title(), Mode: h.mode, Background: h.background,
		Broken: h.cfg.Broken.Names(), SameIdentity: h.cfg.SameIdentity, LeaseMS: h.cfg.Lease.Milliseconds(),
		SkewMS: h.cfg.Skew.Milliseconds(), PaceMS: h.pace.Milliseconds(), Paused: h.paused, Started: h.started,
		Outcome: h.outcome, Report: h.report, Error: h.errText, Steps: []engine.Step{}}
	if !h.ended.IsZero() {
		t := h.ended
		rs.Ended = &t
	}
	if h.run != nil {
		rs.Steps = h.run.Scenario().Steps
		rs.StepIndex = h.run.StepIndex()
		rs.Workers = h.run.Workers()
	}
	return rs
}

// emitRunState tells the watchers what the run looks like now.
func (s *Session) emitRunState(h *runHandle) {
	rs := h.summary()
	data, _ := json.Marshal(rs)
	state := "running"
	switch {
	case rs.Ended != nil:
		state = "ended"
	case rs.Paused:
		state = "paused"
	}
	text := fmt.Sprintf("Run %s (%s, %s) is %s.", h.id, h.cfg.Ordering, h.mode, state)
	if rs.Mode == "auto" && rs.Ended == nil {
		text = fmt.Sprintf("Run %s (%s) is %s, one step every %v.", h.id, h.cfg.Ordering, state, time.Duration(rs.PaceMS)*time.Millisecond)
	}
	s.emit(engine.Event{Kind: engine.KindRun, Actor: "runner", Run: h.id, At: time.Now(), Outcome: state, Text: text, Data: data})
}

// Snapshot is the whole state of a session: what a page renders first,
// before its socket resumes from LastSeq.
type Snapshot struct {
	ID      string       `json:"id"`
	Role    string       `json:"role"` // driver or viewer
	LastSeq int64        `json:"last_seq"`
	Created time.Time    `json:"created"`
	Run     *RunSummary  `json:"run"`
	Runs    []RunSummary `json:"runs"`
	Limits  Limits       `json:"limits"`
	Actions []string     `json:"actions"`
}

// Snapshot reads the session's state, the current run's jobs from the
// database included. LastSeq is read first, so every event after it is
// newer than what the snapshot shows or shows it again — never missing.
func (s *Session) Snapshot(ctx context.Context, driver bool) Snapshot {
	snap := Snapshot{ID: s.ID, Role: "viewer", LastSeq: s.Log.LastSeq(), Created: s.Created, Runs: []RunSummary{},
		Limits: s.m.cfg.Limits, Actions: control.Actions()}
	if driver {
		snap.Role = "driver"
	}
	s.mu.Lock()
	cur := s.current
	runs := append([]*runHandle(nil), s.runs...)
	s.mu.Unlock()
	for _, h := range runs {
		rs := h.summary()
		rs.Steps, rs.Workers = nil, nil
		snap.Runs = append(snap.Runs, rs)
	}
	if cur != nil {
		rs := cur.summary()
		if cur.run != nil && !cur.isEnded() {
			if jobs, err := cur.run.Jobs(ctx); err == nil {
				rs.Jobs = jobs
			}
		}
		snap.Run = &rs
	}
	return snap
}

// Run returns the summary of one of the session's runs.
func (s *Session) Run(id string) (RunSummary, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.runs {
		if h.id == id {
			return h.summary(), nil
		}
	}
	return RunSummary{}, fmt.Errorf("%w: no run %q in this session", ErrNotFound, shorten(id))
}
