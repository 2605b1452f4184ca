package line

import (
	"sync"
	"time"
)

// Times keeps how long this instance's checks take to play, for the
// estimate a check in line is told with its place.
type Times struct {
	mu   sync.Mutex
	mean time.Duration // an exponentially weighted mean; 0 before the first
}

// Add notes a check that played in d.
func (c *Times) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mean == 0 {
		c.mean = d
		return
	}
	c.mean = (3*c.mean + d) / 4
}

// Wait estimates how long a check at place (1: next) waits for its turn
// when at most at once start together: a check holds its slot until it
// ends or has played YoungFor (Line), so each round of them ahead of
// it is the shorter of the two, rounded up to the second; 0 when no check
// has played here yet, so nothing is known. Past 3×atOnce checks playing
// the wait is longer: an estimate, not a promise.
func (c *Times) Wait(place, atOnce int) time.Duration {
	c.mu.Lock()
	mean := c.mean
	c.mu.Unlock()
	if mean == 0 || place < 1 {
		return 0
	}
	rounds := (place + max(atOnce, 1) - 1) / max(atOnce, 1)
	return (time.Duration(rounds) * min(mean, YoungFor)).Round(time.Second)
}
