package session

import (
	"fmt"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/recording"
	"github.com/fencelab/fencelab/server/run/runner"
)

// startLoad starts the session's load lab, ending the one before. The
// server runs MaxLoads at once; a client counts one as a batch. The caller
// holds s.life.
func (s *Session) startLoad(cfg experiments.LoadConfig) (Result, error) {
	s.stopLoad(protocol.StopReplaced)
	id, schemas, err := s.next("l")
	if err != nil {
		return Result{}, err
	}
	select {
	case s.m.loads <- struct{}{}:
	default:
		return Result{}, fault.Errorf(fault.Busy, "the server runs %d load lab%s at a time, and it is busy; try again in half a minute", cap(s.m.loads), plural(cap(s.m.loads)))
	}
	if err := s.m.admit.TakeBatch(s.client, false); err != nil {
		<-s.m.loads
		return Result{}, err
	}
	release := func() {
		s.m.admit.ReleaseBatch(s.client)
		<-s.m.loads
	}
	l, err := runner.StartLoad(s.m.env, runner.LoadSpec{ID: id, Config: cfg, EmitFunc: s.emit,
		SchemasFor: func(i int) judge.Schemas {
			return judge.Schemas{Jobs: fmt.Sprintf("%s%d", schemas.Jobs, i), Receiver: fmt.Sprintf("%s%d", schemas.Receiver, i)}
		},
		ReleaseFunc: release,
		OnEndFunc: func(l *runner.Load) {
			if l.Finished() {
				s.m.recordLoad(s, l)
			}
		}})
	if err != nil {
		release()
		return Result{}, err
	}
	s.mu.Lock()
	s.load = l
	closed := s.closed
	s.mu.Unlock()
	if closed {
		l.Stop(protocol.StopSessionEnd)
		return Result{}, fault.Errorf(fault.NotFound, "the session has ended")
	}
	return Result{OK: true, Run: id}, nil
}

// stopLoad stops the session's load lab, if one is running, and returns
// once its workers are reaped and its schemas dropped.
func (s *Session) stopLoad(reason protocol.StopReason) {
	s.mu.Lock()
	l := s.load
	s.load = nil
	s.mu.Unlock()
	if l != nil {
		l.Stop(reason)
	}
}

// recordLoad keeps a finished load lab's events, to replay when the
// server is too busy to run another.
func (m *Manager) recordLoad(s *Session, l *runner.Load) {
	if m.cfg.Recordings == nil {
		return
	}
	evs, err := s.Log.Since(0, l.ID(), 0)
	if err != nil || len(evs) == 0 {
		return // its first events are no longer kept
	}
	rs := l.Results()
	m.cfg.Recordings.AddLoad(recording.LoadRecording{Recorded: time.Now(), Config: l.Config(), Verdict: judge.LoadVerdict(rs), Results: rs, Events: evs})
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
