// Package admit keeps the server's caps on what its visitors hold at once:
// the run slots of the whole server, and per client (an address, from
// session.ClientKey) its sessions, runs, batches and worker processes.
// The client "" (loopback: a test, the command line, a proxy on this host)
// has no per-client caps. Package session decides what to take and when;
// this package counts, refuses with a sentence, and forgets a client that
// holds nothing.
package admit

import (
	"context"
	"sync"
	"time"

	"github.com/fencelab/fencelab/server/fault"
)

// Caps are the caps admission keeps.
type Caps struct {
	MaxRuns             int // run slots, server-wide
	MaxRunsPerClient    int
	MaxBatchesPerClient int
	MaxWorkersPerClient int
}

// Admission counts what is held.
type Admission struct {
	caps    Caps
	slots   chan struct{}
	mu      sync.Mutex
	clients map[string]*use // loopback ("") is not counted
}

// use is what one client holds now.
type use struct {
	sessions, runs, batches, workers int
}

// New returns an Admission that keeps caps.
func New(caps Caps) *Admission {
	return &Admission{caps: caps, slots: make(chan struct{}, caps.MaxRuns), clients: map[string]*use{}}
}

// held returns what a client holds; a.mu must be held.
func (a *Admission) held(client string) *use {
	u := a.clients[client]
	if u == nil {
		u = &use{}
		a.clients[client] = u
	}
	return u
}

// forget drops a client that holds nothing any more; a.mu must be held.
func (a *Admission) forget(client string) {
	if u := a.clients[client]; u != nil && *u == (use{}) {
		delete(a.clients, client)
	}
}

// count changes one of a client's counts by delta, never below zero.
func (a *Admission) count(client string, field func(*use) *int, delta int) {
	if client == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if u := a.clients[client]; u != nil || delta > 0 {
		n := field(a.held(client))
		*n = max(0, *n+delta)
		a.forget(client)
	}
}

// take adds one to a client's count unless it is at limit already, when
// it refuses with refuse's words.
func (a *Admission) take(client string, field func(*use) *int, limit int, refuse func(n int) error) error {
	if client == "" {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n := field(a.held(client))
	if *n >= limit {
		a.forget(client)
		return refuse(*n)
	}
	*n++
	return nil
}

func runs(u *use) *int     { return &u.runs }
func batches(u *use) *int  { return &u.batches }
func workers(u *use) *int  { return &u.workers }
func sessions(u *use) *int { return &u.sessions }

// TakeRun takes a run for a client: one of its own (refused at once at
// its cap), then one of the server's slots, waiting up to wait for one.
func (a *Admission) TakeRun(ctx context.Context, client string, wait time.Duration) error {
	err := a.take(client, runs, a.caps.MaxRunsPerClient, func(n int) error {
		return fault.Errorf(fault.Busy, "this address is running %d runs at once here, its limit; try again when one has ended", n)
	})
	if err != nil {
		return err
	}
	if err := a.takeSlot(ctx, wait); err != nil {
		a.count(client, runs, -1)
		return err
	}
	return nil
}

// takeSlot takes one of the server's run slots, waiting up to wait.
func (a *Admission) takeSlot(ctx context.Context, wait time.Duration) error {
	select {
	case a.slots <- struct{}{}:
		return nil
	default:
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case a.slots <- struct{}{}:
			return nil
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return fault.Errorf(fault.Busy, "the server is running %d runs at once, its limit; try again in a moment", a.caps.MaxRuns)
}

// ReleaseRun gives back a run TakeRun took.
func (a *Admission) ReleaseRun(client string) {
	<-a.slots
	a.count(client, runs, -1)
}

// RunsInFlight is how many runs hold a slot.
func (a *Admission) RunsInFlight() int { return len(a.slots) }

// MaxRuns is how many slots there are.
func (a *Admission) MaxRuns() int { return cap(a.slots) }

// TakeBatch counts one more batch playing for a client, refused at its
// cap; a batch replacing one of the client's still playing (stopped before
// the new one plays) is let one over it.
func (a *Admission) TakeBatch(client string, replacing bool) error {
	limit := a.caps.MaxBatchesPerClient
	if replacing {
		limit++
	}
	return a.take(client, batches, limit, func(n int) error {
		return fault.Errorf(fault.Busy, "this address is playing %d batches at once here, its limit; try again when one has ended", n)
	})
}

// ReleaseBatch gives back a batch TakeBatch counted.
func (a *Admission) ReleaseBatch(client string) { a.count(client, batches, -1) }

// TakeWorker takes one of a client's worker processes, refused at its cap.
func (a *Admission) TakeWorker(client string) error {
	return a.take(client, workers, a.caps.MaxWorkersPerClient, func(n int) error {
		return fault.Errorf(fault.Busy, "this address has %d worker processes here, its limit; end a run or kill a worker first", n)
	})
}

// GiveWorker gives back a worker TakeWorker took.
func (a *Admission) GiveWorker(client string) { a.count(client, workers, -1) }

// Sessions is how many sessions a client has open (0 for loopback).
func (a *Admission) Sessions(client string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if u := a.clients[client]; u != nil {
		return u.sessions
	}
	return 0
}

// AddSession counts a session the client opened; the session's owner
// decides, before, whether one must make way (Sessions).
func (a *Admission) AddSession(client string) { a.count(client, sessions, 1) }

// DropSession counts a session of the client's gone.
func (a *Admission) DropSession(client string) { a.count(client, sessions, -1) }

// Clients is how many clients hold anything now.
func (a *Admission) Clients() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.clients)
}
