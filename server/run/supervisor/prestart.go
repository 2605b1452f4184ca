package supervisor

import (
	"encoding/json"
	"slices"
	"strings"
	"syscall"

	"github.com/fencelab/fencelab/server/run/worker"
)

// Prestarted workers. Spawning a worker costs the machine a few
// milliseconds of work that cannot be shared out: a hundred readers who
// press Run together want two hundred, on the same cores as their runs.
// A prestarted worker is spawned ahead, while the server is quiet, and
// waits (`fencelab worker --prestarted`) until a Start gives it its
// assignment: then it is the worker Start asked for, a real process like
// any other, frozen with SIGSTOP and killed with its run. It holds no
// Postgres connection while it waits.

// Prestart spawns one prestarted worker, kept until a Start takes it or
// the supervisor closes, and returns its pid.
func (s *Supervisor) Prestart() (int, error) {
	p, err := s.spawn([]string{"worker", worker.FlagPrestarted}, nil, nil, true)
	if err != nil {
		return 0, err
	}
	s.cfg.Log.Debug("worker prestarted", "pid", p.Pid)
	return p.Pid, nil
}

// Prestarted is how many prestarted workers wait for a Start.
func (s *Supervisor) Prestarted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

// assign gives spec to the oldest prestarted worker and returns it, or
// nil when there is none (or spec's environment holds what an assignment
// may not carry: then a new process starts with it, as without any).
func (s *Supervisor) assign(spec Spec) *Proc {
	env, ok := assignmentEnv(spec.Env)
	if !ok {
		return nil
	}
	line, err := json.Marshal(worker.Assignment{Args: append([]string{"--label", spec.Label}, spec.Args...), Env: env})
	if err != nil || len(line) >= worker.MaxAssignmentBytes {
		return nil
	}
	for {
		s.mu.Lock()
		if s.closed || len(s.waiting) == 0 {
			s.mu.Unlock()
			return nil
		}
		p := s.waiting[0]
		s.waiting = slices.Delete(s.waiting, 0, 1)
		// Named before anyone can see it: from here Procs lists it.
		p.Label = spec.Label
		p.bound.Store(&binding{label: spec.Label, fn: spec.EventFunc})
		s.mu.Unlock()
		p.inMu.Lock()
		_, err := p.stdin.Write(append(line, '\n'))
		p.inMu.Unlock()
		if err == nil {
			s.cfg.Log.Info("worker started", "label", spec.Label, "pid", p.Pid, "prestarted", true)
			return p
		}
		// It died while it waited: gone with its events, it is reaped by
		// its own goroutine, and the next one is tried.
		_ = p.proc.Signal(syscall.SIGKILL)
		s.cfg.Log.Warn("a prestarted worker could not be assigned", "pid", p.Pid, "err", err)
	}
}

// assignmentEnv is env ("KEY=value" entries) as an assignment carries it,
// and false if it holds an entry an assignment may not carry.
func assignmentEnv(env []string) (map[string]string, bool) {
	out := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !slices.Contains(worker.AssignmentEnv, k) {
			return nil, false
		}
		out[k] = v
	}
	return out, true
}
