// Package nemesis runs job-queue workers as real OS processes and freezes
// them at random, Jepsen-style, with SIGSTOP and SIGCONT, to see what a
// queue lets through when a worker stalls past its lease and wakes up as
// if nothing had happened.
//
// It has three parts, usable apart:
//
//   - Schedule: the nemesis itself. Every Interval it picks a random worker
//     that is alive and not frozen, and freezes it (SIGSTOP to its process
//     group) for the lease plus a random 50 to 500 ms, at most MaxFrozen at
//     once, then thaws it (SIGCONT). Its random choices come from a seeded
//     generator, so a run's schedule can be replayed from its seed.
//   - Start and Group: worker processes, each in a process group of its own
//     (so the nemesis freezes the whole of it) that dies with its parent
//     (a parent-death signal on Linux), with a line protocol on their
//     standard input and output: a worker says "ready", is told "go", and
//     stops when its standard input ends.
//   - the fencelab side of a run: SetupEffects and Insert prepare a queue,
//     PoolWorker is the body of a worker process (engine.WorkerPool, each
//     job writing a fenced and an unfenced effect row), and Judge reads the
//     verdict from SQL alone once every worker has stopped. Round runs any
//     queue's worker processes to the end of their jobs, PoolRun does all
//     of it for the pool, and Ceiling runs the pool's own batch statements
//     through pgbench, the physical limit to compare the pool with.
//
// The package's test, TestNemesis_FencedPool_NoZombieCompletes, runs four
// worker processes under the schedule and asserts that no zombie
// completion landed. cmd/internal/bench/river runs the same schedule against
// River (go run . nemesis there).
package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Schedule is the nemesis: which worker to freeze, when, and for how long.
// The zero value of every field but Lease is replaced by the issue's
// figures: every 100 ms, for the lease plus 50 to 500 ms, at most 2 at
// once.
type Schedule struct {
	// Lease is the workers' lease. A freeze always outlasts it.
	Lease time.Duration
	// Interval is how often a worker is picked. Default 100ms.
	Interval time.Duration
	// MinExtra and MaxExtra bound the time a freeze lasts beyond the lease.
	// Default 50ms and 500ms.
	MinExtra, MaxExtra time.Duration
	// MaxFrozen bounds the workers frozen at once. Default 2.
	MaxFrozen int
	// Seed seeds the random choices: the same seed gives the same sequence
	// of (worker, duration) picks.
	Seed uint64
}

func (s *Schedule) fill() error {
	if s.Interval == 0 {
		s.Interval = 100 * time.Millisecond
	}
	if s.MinExtra == 0 && s.MaxExtra == 0 {
		s.MinExtra, s.MaxExtra = 50*time.Millisecond, 500*time.Millisecond
	}
	if s.MaxFrozen == 0 {
		s.MaxFrozen = 2
	}
	switch {
	case s.Lease <= 0:
		return fmt.Errorf("nemesis: the lease %v must be positive", s.Lease)
	case s.Interval <= 0:
		return fmt.Errorf("nemesis: the interval %v must be positive", s.Interval)
	case s.MinExtra < 0 || s.MaxExtra < s.MinExtra:
		return fmt.Errorf("nemesis: the extra freeze %v..%v is not a range", s.MinExtra, s.MaxExtra)
	case s.MaxFrozen < 1:
		return fmt.Errorf("nemesis: at most %d frozen: want 1 or more", s.MaxFrozen)
	}
	return nil
}

// Target is what the nemesis freezes: a Group's workers.
type Target interface {
	// Len is the number of workers, numbered 0 to Len-1.
	Len() int
	// Alive reports whether worker i is still running (not exited).
	Alive(i int) bool
	// Freeze and Thaw send SIGSTOP and SIGCONT to worker i's process group.
	Freeze(i int) error
	Thaw(i int) error
}

// Freeze is one freeze the nemesis made.
type Freeze struct {
	Worker int           // the worker's index in the Target
	At     time.Duration // since the schedule began
	For    time.Duration // how long the worker was meant to stay frozen
}

// Stats is what a schedule did.
type Stats struct {
	Seed      uint64
	Freezes   []Freeze
	MaxFrozen int           // the most workers frozen at once
	Frozen    time.Duration // the sum of the freezes' lengths
}

// Run freezes and thaws t's workers on the schedule until ctx ends, then
// thaws every worker it froze before it returns. Only Run's goroutine
// signals the workers; a worker that exits is no longer picked. The
// returned error is a signal that failed for a worker still alive.
func (s Schedule) Run(ctx context.Context, t Target) (Stats, error) {
	if err := s.fill(); err != nil {
		return Stats{}, err
	}
	if t.Len() == 0 {
		return Stats{}, fmt.Errorf("nemesis: no workers")
	}
	rng := rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15))
	st := Stats{Seed: s.Seed}
	start := time.Now()
	until := make(map[int]time.Time) // the frozen workers and when each thaws
	thawAll := func() error {
		var first error
		for i := range until {
			if err := t.Thaw(i); err != nil && t.Alive(i) && first == nil {
				first = err
			}
			delete(until, i)
		}
		return first
	}
	tick := time.NewTicker(s.Interval)
	defer tick.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		// Thaw whoever is due, then sleep until the next tick or thaw.
		now := time.Now()
		next := now.Add(time.Hour)
		for i, u := range until {
			if !u.After(now) {
				if err := t.Thaw(i); err != nil && t.Alive(i) {
					_ = thawAll()
					return st, fmt.Errorf("nemesis: thaw worker %d: %w", i, err)
				}
				delete(until, i)
			} else if u.Before(next) {
				next = u
			}
		}
		wake.Reset(next.Sub(now))
		select {
		case <-ctx.Done():
			return st, thawAll()
		case <-wake.C:
			continue
		case <-tick.C:
		}
		// Draw on every tick, used or not, so that the draws are a function
		// of the seed alone: the same seed gives the same draws, tick by
		// tick. The worker drawn is taken if it is alive and not frozen,
		// else the next one that is, in order.
		i := rng.IntN(t.Len())
		d := s.Lease + s.MinExtra + time.Duration(rng.Int64N(int64(s.MaxExtra-s.MinExtra)+1))
		if len(until) >= s.MaxFrozen {
			continue
		}
		found := false
		for range t.Len() {
			if _, frozen := until[i]; !frozen && t.Alive(i) {
				found = true
				break
			}
			i = (i + 1) % t.Len()
		}
		if !found {
			continue
		}
		if err := t.Freeze(i); err != nil {
			if !t.Alive(i) {
				continue // it exited meanwhile
			}
			_ = thawAll()
			return st, fmt.Errorf("nemesis: freeze worker %d: %w", i, err)
		}
		until[i] = time.Now().Add(d)
		st.Freezes = append(st.Freezes, Freeze{Worker: i, At: time.Since(start), For: d})
		st.Frozen += d
		st.MaxFrozen = max(st.MaxFrozen, len(until))
	}
}
