// Package playground opens the engine to fencelab's playground: it breaks a
// guard on purpose, gives a worker a clock of its own, traces every
// statement, and puts a rule of the caller's own in the receiver's place.
// A Go program that uses the queue never needs it: a Queue or Receiver made
// by package engine alone keeps every guard and runs on the database's
// clock.
//
// The hooks are set on a queue or receiver right after it is made, before
// it is used, by NewQueue and NewReceiver here.
package playground

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/internal/hook"
)

// Guard names one of the protections the engine keeps; see engine's
// package doc, "Guards".
type Guard = hook.Guard

// Guards is the set of guards a run has broken. The zero value breaks none.
type Guards = hook.Guards

// Statement is one SQL statement as the engine sends it to Postgres.
type Statement = hook.Statement

// Trace is one statement as it ran.
type Trace = hook.Trace

// The seven guards, in the order of AllGuards.
const (
	StatusCheck    = hook.StatusCheck
	OwnerCheck     = hook.OwnerCheck
	EpochCheck     = hook.EpochCheck
	EpochIncrement = hook.EpochIncrement
	ReceiverCheck  = hook.ReceiverCheck
	DBClock        = hook.DBClock
	SkipLocked     = hook.SkipLocked
)

// AllGuards lists every guard in a stable order.
func AllGuards() []Guard { return hook.AllGuards() }

// ParseGuard parses a guard name such as "owner-check"; an unknown name is
// an *engine.InputError.
func ParseGuard(s string) (Guard, error) {
	g, err := hook.ParseGuard(s)
	return g, input(err)
}

// ParseBroken turns a list of guard names into the set with those guards
// off; an unknown name is an *engine.InputError.
func ParseBroken(names []string) (Guards, error) {
	gs, err := hook.ParseBroken(names)
	return gs, input(err)
}

func input(err error) error {
	if err == nil {
		return nil
	}
	return &engine.InputError{Msg: err.Error()}
}

// QueueHooks are a queue's hooks. The zero value is the production queue.
type QueueHooks struct {
	Broken Guards // the guards broken on purpose
	// Now is the worker's own clock. A statement reads it only while the
	// db-clock guard is broken, which is the point of that guard: a skewed
	// worker clock then decides when a lease has run out. Default time.Now.
	Now func() time.Time
	// Trace, if set, is called after every statement, on the goroutine
	// that ran it.
	Trace func(Trace)
}

// NewQueue is engine.NewQueue with hooks.
func NewQueue(db engine.DB, cfg engine.QueueConfig, h QueueHooks) (*engine.Queue, error) {
	if !h.Broken.Valid() {
		return nil, &engine.InputError{Msg: "unknown guard bits"}
	}
	q, err := engine.NewQueue(db, cfg)
	if err != nil {
		return nil, err
	}
	*hook.QueueOf(q) = hook.Queue{Broken: h.Broken, Now: h.Now, Trace: h.Trace}
	return q, nil
}

// Rule is a receiver rule of the caller's own, in place of the engine's
// conditional upsert: it applies one delivery to the receiver's deliveries
// table, in a session of its own, and says whether it took it. The
// receiver reads what it held before and after the rule ran, names the
// decision from the two (a newer epoch, the same, an older one, a refusal)
// and logs it. The rule runs outside the receiver's transaction, so two
// deliveries for one job must not race. The playground runs a reader's own
// statement this way.
type Rule func(ctx context.Context, d engine.Delivery) (taken bool, st Statement, err error)

// ReceiverHooks are a receiver's hooks. The zero value is the engine's rule.
type ReceiverHooks struct {
	Broken Guards // only receiver-check matters to a receiver
	// Keyed makes the receiver a third party that knows no epochs: it
	// applies the first delivery for each job and answers every later one
	// as a duplicate. The receiver-check guard does not apply.
	Keyed bool
	// Rule, if set, decides each delivery (and Keyed and Broken do not
	// apply).
	Rule  Rule
	Trace func(Trace)
}

// NewReceiver is engine.NewReceiver with hooks.
func NewReceiver(db engine.TxDB, cfg engine.ReceiverConfig, h ReceiverHooks) (*engine.Receiver, error) {
	if !h.Broken.Valid() {
		return nil, &engine.InputError{Msg: "unknown guard bits"}
	}
	r, err := engine.NewReceiver(db, cfg)
	if err != nil {
		return nil, err
	}
	k := hook.Receiver{Broken: h.Broken, Keyed: h.Keyed, Trace: h.Trace}
	if rule := h.Rule; rule != nil {
		k.Rule = func(ctx context.Context, d any) (bool, Statement, error) { return rule(ctx, d.(engine.Delivery)) }
	}
	*hook.ReceiverOf(r) = k
	return r, nil
}

// Broken returns the guards q runs with broken.
func Broken(q *engine.Queue) Guards { return hook.QueueOf(q).Broken }

// ReceiverBroken returns the guards r runs with broken.
func ReceiverBroken(r *engine.Receiver) Guards { return hook.ReceiverOf(r).Broken }

// WithTrace returns a copy of r that reports each statement to fn instead.
func WithTrace(r *engine.Receiver, fn func(Trace)) *engine.Receiver {
	c := *r
	hook.ReceiverOf(&c).Trace = fn
	return &c
}

// Expired lists q's running jobs whose lease has run out on the database
// clock, with the database time in each Job's DBTime.
func Expired(ctx context.Context, q *engine.Queue) ([]engine.Job, error) {
	jobs, err := hook.Expired(ctx, q)
	js, _ := jobs.([]engine.Job)
	return js, err
}

// Claimable counts the jobs a claim on q would see as claimable now, locked
// or not. A claim that got ErrNoJob while this is above zero skipped a
// locked row (or waited its turn, with skip-locked broken).
func Claimable(ctx context.Context, q *engine.Queue) (int, error) { return hook.Claimable(ctx, q) }

// LockSchemas takes, until db's transaction ends, the advisory lock that
// engine.SetupQueue, MigrateQueue, DropQueue and SetupReceiver take on each
// named schema: code of the caller's own that creates or drops things in
// such a schema (a trigger, grants) waits its turn with them, and never
// meets them halfway. The keys are taken in one order, so two callers that
// share a schema cannot deadlock; other schemas are not held up. db must
// be in a transaction, or the lock is gone as soon as it is taken. A name
// is only hashed into a key, so it may also name a set-up of the caller's
// own that is no schema at all.
func LockSchemas(ctx context.Context, db engine.DB, schemas ...string) error {
	st := hook.SchemaLock(schemas...)
	_, err := db.Exec(ctx, st.SQL, st.Args...)
	return Translate("lock schemas", err)
}

// DropSchemas drops each named schema and everything in it, in one
// transaction under the locks LockSchemas takes, as engine.DropQueue drops
// a queue's: the one way this project drops a schema. A name that is not a
// valid schema name is refused (engine.ErrInvalidInput) and nothing is
// dropped.
func DropSchemas(ctx context.Context, db engine.TxDB, schemas ...string) error {
	return hook.DropSchemas(ctx, db, schemas...)
}

// Translate is the engine's translation of a Postgres or driver error, for
// statements run beside the engine's: engine.ErrInvalidInput for the
// caller's data, engine.ErrUnavailable for a database out of reach for now,
// and otherwise err wrapped with op. Its message never carries the
// connection string.
func Translate(op string, err error) error { return hook.Translate(op, err) }

// Invalidf returns an *engine.InputError with a plain message, for input
// checked before it reaches the engine.
func Invalidf(format string, args ...any) error {
	return &engine.InputError{Msg: fmt.Sprintf(format, args...)}
}
