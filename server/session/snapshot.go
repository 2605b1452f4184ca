package session

import (
	"context"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/control"
	"github.com/fencelab/fencelab/server/run/runner"
)

// Snapshot is the whole state of a session: what a page renders first,
// before its socket resumes from LastSeq.
type Snapshot struct {
	ID      string             `json:"id"`
	Role    string             `json:"role"` // driver or viewer
	LastSeq int64              `json:"last_seq"`
	Created string             `json:"created"`
	Run     *protocol.RunInfo  `json:"run"`
	Jobs    []engine.Job       `json:"jobs,omitempty"` // the current run's jobs, as the database holds them
	Runs    []protocol.RunInfo `json:"runs"`
	Limits  Limits             `json:"limits"`
	Actions []string           `json:"actions"`
	// Class is the class the session's student sits in; absent for a
	// session in no class.
	Class *ClassSeat `json:"class,omitempty"`
}

// Snapshot reads the session's state, the current run's jobs from the
// database included. LastSeq is read first, so every event after it is
// newer than what the snapshot shows or shows it again — never missing.
func (s *Session) Snapshot(ctx context.Context, driver bool) (Snapshot, error) {
	snap := Snapshot{ID: s.ID, Role: "viewer", LastSeq: s.Log.LastSeq(), Created: s.Created.UTC().Format("2006-01-02T15:04:05Z"),
		Runs: []protocol.RunInfo{}, Limits: s.m.cfg.Limits, Actions: control.Actions(), Class: s.classSeat()}
	if driver {
		snap.Role = "driver"
	}
	s.mu.Lock()
	cur := s.current
	runs := append([]*runner.Run(nil), s.runs...)
	var pending []protocol.RunInfo
	for _, p := range s.pending {
		pending = append(pending, p)
	}
	s.mu.Unlock()
	for _, r := range runs {
		i := r.Info()
		i.Steps, i.Workers = nil, nil
		snap.Runs = append(snap.Runs, i)
	}
	snap.Runs = append(snap.Runs, pending...)
	if cur != nil {
		i := cur.Info()
		snap.Run = &i
		if !i.Phase.Ended() {
			jobs, err := cur.Jobs(ctx)
			if err != nil {
				return snap, err
			}
			snap.Jobs = jobs
		}
	}
	return snap, nil
}

// Run returns one of the session's runs.
func (s *Session) Run(id string) (protocol.RunInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.runs {
		if r.ID() == id {
			return r.Info(), nil
		}
	}
	if p, ok := s.pending[id]; ok {
		return p, nil
	}
	return protocol.RunInfo{}, fault.Errorf(fault.NotFound, "no run %q in this session", shorten(id))
}
