package session

import (
	"time"

	"github.com/fencelab/fencelab/server/lab/judge"
)

// Made ahead of runs while the server is quiet: spare pairs of schemas
// (runschemas.Spares) and prestarted worker processes.

// Things are made ahead between bursts, never during one: once no run has
// started for quietFor, and, while more than a quarter of the run slots
// are in use (a burst's runs playing on the same cores), only once none
// has started for quietLong.
const (
	quietFor  = time.Second
	quietLong = 10 * time.Second
)

// quietIn is how long until the server is quiet enough to make things
// ahead of runs (spare schemas, prestarted workers): 0 when it is now.
func (m *Manager) quietIn() time.Duration {
	since := time.Since(time.Unix(0, m.lastStart.Load()))
	busy := m.RunsInFlight() > m.admit.MaxRuns()/4 && since < quietLong
	if since >= quietFor && !busy {
		return 0
	}
	wait := quietFor - since
	if busy {
		wait = quietFor
	}
	return max(wait, 50*time.Millisecond)
}

// fillPrestarted keeps Limits.PrestartedWorkers worker processes spawned
// ahead of runs, while the server is quiet, until the manager closes; the
// supervisor kills those nobody took when it closes.
func (m *Manager) fillPrestarted() {
	sup := m.cfg.Supervisor
	for {
		wait := m.quietIn()
		if wait == 0 && sup.Prestarted() >= m.cfg.Limits.PrestartedWorkers {
			wait = 250 * time.Millisecond
		}
		if wait == 0 {
			if _, err := sup.Prestart(); err == nil {
				continue
			} else if m.fill.Err() == nil {
				m.cfg.Log.Warn("could not prestart a worker", "err", err)
			}
			wait = 5 * time.Second
		}
		select {
		case <-m.fill.Done():
			return
		case <-time.After(wait):
		}
	}
}

// Spares is how many spare pairs wait for a run.
func (m *Manager) Spares() int { return m.spares.Len() }

// takeSpare returns a spare pair, if there is one; a run starts either way.
func (m *Manager) takeSpare() (judge.Schemas, bool) {
	m.lastStart.Store(time.Now().UnixNano())
	return m.spares.Take()
}
