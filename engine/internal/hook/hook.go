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
// every guard kept, the database's clock, no trace.
type Queue struct {
	Broken Guards
	// Now is the worker's own clock, read only while the db-clock guard is
	// broken; nil is time.Now.
	Now   func() time.Time
	Trace func(Trace)
}

// Receiver holds a receiver's hooks. The zero value is the engine's rule.
type Receiver struct {
	Broken Guards // only receiver-check matters to a receiver
	// Keyed makes the receiver a third party that knows no epochs: it
	// applies the first delivery for each job and answers every later one
	// as a duplicate.
	Keyed bool
	// Rule, if set, decides each delivery in place of the engine's upsert;
	// its argument is the engine.Delivery, which this package cannot name.
	Rule  func(ctx context.Context, delivery any) (taken bool, st Statement, err error)
	Trace func(Trace)
}

// The bridges, set by package engine when it starts: they reach into a
// *engine.Queue or *engine.Receiver, which this package cannot name.
var (
	QueueOf    func(q any) *Queue
	ReceiverOf func(r any) *Receiver
	// Expired lists a queue's running jobs whose lease has run out
	// ([]engine.Job); Claimable counts the jobs a claim could take now.
	Expired   func(ctx context.Context, q any) (any, error)
	Claimable func(ctx context.Context, q any) (int, error)
	// SchemaLock is the statement that takes the engine's advisory lock on
	// each named schema.
	SchemaLock func(schemas ...string) Statement
	// Translate is the engine's reading of a Postgres or driver error.
	Translate func(op string, err error) error
	// DropSchemas drops schemas as engine.DropQueue does; db is an
	// engine.TxDB.
	DropSchemas func(ctx context.Context, db any, schemas ...string) error
)

// ParseError is a guard name that names no guard.
type ParseError struct{ Msg string }

func (e *ParseError) Error() string { return e.Msg }

func parseErrorf(format string, args ...any) error {
	return &ParseError{Msg: fmt.Sprintf(format, args...)}
}
