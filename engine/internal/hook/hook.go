// Package hook is the engine's half of the playground's hooks: the guards a
// run breaks on purpose, a worker's own clock, and a trace of every
// statement. Package engine keeps them in each Queue and Receiver; package
// engine/playground sets them. A library user meets neither: the queue's
// own API has none of them, and this package is internal to the engine.
package hook

import (
	"context"
	"fmt"
	"time"
)

// Statement is one SQL statement as the engine sends it to Postgres.
type Statement struct {
	Name string // Noun+Verb, such as "JobClaim"
	SQL  string
	Args []any
}

// Trace is one statement as it ran: what was sent, how many rows it
// affected, and the database time it reported.
type Trace struct {
	Statement
	Rows    int64
	DBTime  time.Time // zero when the statement failed
	Err     error
	Elapsed time.Duration
}

// Queue holds a queue's hooks. The zero value is the production queue:
// every guard kept, the database's clock, no trace. J is engine.Job, which
// this package cannot name.
type Queue[J any] struct {
	Broken Guards
	// Now is the worker's own clock, read only while the db-clock guard is
	// broken; nil is time.Now.
	Now   func() time.Time
	Trace func(Trace)

	// What the playground reads of a queue beyond its API, set by
	// engine.NewQueue: the jobs a claim could take now, and the running
	// jobs whose lease has run out.
	Claimable func(context.Context) (int, error)
	Expired   func(context.Context) ([]J, error)
}

// Receiver holds a receiver's hooks. The zero value is the engine's rule.
// D is engine.Delivery.
type Receiver[D any] struct {
	Broken Guards // only receiver-check matters to a receiver
	// Keyed makes the receiver a third party that knows no epochs: it
	// applies the first delivery for each job and answers every later one
	// as a duplicate.
	Keyed bool
	// Rule, if set, decides each delivery in place of the engine's upsert.
	Rule  func(ctx context.Context, d D) (taken bool, st Statement, err error)
	Trace func(Trace)
}

// Slot is where an engine value keeps its hooks: engine.Queue embeds a
// Slot[Queue[Job]] and engine.Receiver a Slot[Receiver[Delivery]], each
// under an unexported name. The slot's one method is unexported too, and
// promoted into theirs, so that Of takes an engine value and nothing
// else, checked by the compiler, and a library user reaches no hook.
type Slot[H any] struct{ h H }

func (s *Slot[H]) slot() *Slot[H] { return s }

// In is the engine's own way to its hooks.
func In[H any](s *Slot[H]) *H { return &s.h }

// Of returns the hooks of v, an *engine.Queue (H is Queue[engine.Job]) or
// an *engine.Receiver (H is Receiver[engine.Delivery]).
func Of[H any](v interface{ slot() *Slot[H] }) *H { return &v.slot().h }

// ParseError is a guard name that names no guard.
type ParseError struct{ Msg string }

func (e *ParseError) Error() string { return e.Msg }

func parseErrorf(format string, args ...any) error {
	return &ParseError{Msg: fmt.Sprintf(format, args...)}
}
