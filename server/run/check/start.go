package check

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// A Turn is a check's turn to play, given by the line it waited in: the
// server's fair line in memory (a ticket of server/session/line, as the
// session holds it) or a class's line in Postgres (the claimed job,
// class.Turn). A check owns its turn from Start until it ends, and gives
// it back once, whatever it came to: then the line's next check plays.
type Turn interface {
	// Waited is how long the check waited in its line for this turn.
	Waited() time.Duration
	// Release gives the turn back. Only its first call counts.
	Release()
}

// Request is a check whose turn has come, for Start.
type Request struct {
	// Turn is the check's turn in its line; nil for a check that waited
	// in no line (the CLI's, whose machine is its own).
	Turn Turn
	// Lease is every case's lease, by Lease's rule (0: DefaultLease).
	Lease time.Duration
	// Cases are the cases to play, in order; default
	// experiments.CheckCases().
	Cases []experiments.CheckCase
	// Validate is the statements' trial, on schemas of the caller's: it
	// returns what their probes showed, or refuses them (a
	// *sandbox.Error). Validate, or ValidateReceiver for a worker
	// program's check, or the program's own probes.
	Validate func(ctx context.Context) (experiments.Probes, error)
}

// A Checking is one check started: its lease holds, its statements
// passed their trial, and its turn has come. Play plays and judges its
// cases; the check's turn goes back when Play ends, or on Release.
//
// Every check is one: `fencelab check` (Run, and a worker program's
// check), a page's check (the session's batch plays its cases) and a
// class student's (the same, in the class's line).
type Checking struct {
	lease  time.Duration
	cases  []experiments.CheckCase
	probes experiments.Probes
	waited time.Duration
	turn   Turn
	once   sync.Once
}

// Start starts a check whose turn has come: the lease by Lease's rule,
// then the statements' trial. When either refuses, the turn goes back and
// nothing plays.
func Start(ctx context.Context, req Request) (*Checking, error) {
	c := &Checking{turn: req.Turn, cases: slices.Clone(req.Cases)}
	if c.turn != nil {
		c.waited = c.turn.Waited()
	}
	if len(c.cases) == 0 {
		c.cases = experiments.CheckCases()
	}
	var err error
	if c.lease, err = Lease("lease", req.Lease); err != nil {
		c.Release()
		return nil, err
	}
	if req.Validate == nil {
		c.Release()
		return nil, errors.New("check: the request has no Validate")
	}
	if c.probes, err = req.Validate(ctx); err != nil {
		c.Release()
		return nil, err
	}
	return c, nil
}

// Lease is every case's lease.
func (c *Checking) Lease() time.Duration { return c.lease }

// Cases are the check's cases, in the order Play plays them.
func (c *Checking) Cases() []experiments.CheckCase { return slices.Clone(c.cases) }

// Waited is how long the check waited in its line for its turn.
func (c *Checking) Waited() time.Duration { return c.waited }

// Play plays the check's cases with player, parallel at a time (Play's
// pipeline), judges them with the trial's probes, and gives the turn
// back. onCase, if set, is told each case as it ends.
func (c *Checking) Play(ctx context.Context, player Player, parallel int, onCase func(judge.CheckInput)) (protocol.CheckReport, error) {
	defer c.Release()
	return Play(ctx, Plan{Cases: c.cases, Player: player, Probes: c.probes, Parallel: parallel, OnCase: onCase})
}

// Release gives the check's turn back without playing: its cases could
// not start. Only the first call counts, Play's included.
func (c *Checking) Release() {
	c.once.Do(func() {
		if c.turn != nil {
			c.turn.Release()
		}
	})
}
