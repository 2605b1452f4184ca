package session

import (
	"sync"
	"time"

	"github.com/fencelab/fencelab/server/lab/protocol"
)

// checkTimes keeps how long this instance's checks take to play, for the
// estimate a check in line is told with its place.
type checkTimes struct {
	mu   sync.Mutex
	mean time.Duration // an exponentially weighted mean; 0 before the first
}

// add notes a check that played in d.
func (c *checkTimes) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mean == 0 {
		c.mean = d
		return
	}
	c.mean = (3*c.mean + d) / 4
}

// wait estimates how long a check at place (1: next) waits for its turn
// when at most at once start together: a check holds its slot until it
// ends or has played youngFor (checkLine), so each round of them ahead of
// it is the shorter of the two, rounded up to the second; 0 when no check
// has played here yet, so nothing is known. Past 3×atOnce checks playing
// the wait is longer: an estimate, not a promise.
func (c *checkTimes) wait(place, atOnce int) time.Duration {
	c.mu.Lock()
	mean := c.mean
	c.mu.Unlock()
	if mean == 0 || place < 1 {
		return 0
	}
	rounds := (place + max(atOnce, 1) - 1) / max(atOnce, 1)
	return (time.Duration(rounds) * min(mean, youngFor)).Round(time.Second)
}

// inLine is the note that tells a session its check's place in a line,
// with the estimate of its wait.
func (m *Manager) inLine(place int) protocol.Event {
	wait := m.checks.wait(place, m.cfg.Limits.MaxChecks)
	return protocol.Event{Kind: protocol.KindNote, Actor: protocol.ActorRunner,
		Note: &protocol.NoteEvent{Code: protocol.NoteInLine, Place: place, WaitS: int(wait / time.Second)}}
}
