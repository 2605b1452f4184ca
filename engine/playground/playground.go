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

// The hooks as the engine keeps them, for its Queue and its Receiver.
type (
	queueHooks    = hook.Queue[engine.Job]
	receiverHooks = hook.Receiver[engine.Delivery]
)

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
	k := hook.Of[queueHooks](q)
	k.Broken, k.Now, k.Trace = h.Broken, h.Now, h.Trace
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
	*hook.Of[receiverHooks](r) = receiverHooks{Broken: h.Broken, Keyed: h.Keyed, Rule: h.Rule, Trace: h.Trace}
	return r, nil
}

// Broken returns the guards q runs with broken.
func Broken(q *engine.Queue) Guards { return hook.Of[queueHooks](q).Broken }

// ReceiverBroken returns the guards r runs with broken.
func ReceiverBroken(r *engine.Receiver) Guards { return hook.Of[receiverHooks](r).Broken }

// WithTrace returns a copy of r that reports each statement to fn instead.
func WithTrace(r *engine.Receiver, fn func(Trace)) *engine.Receiver {
	c := *r
	hook.Of[receiverHooks](&c).Trace = fn
	return &c
}

// Expired lists q's running jobs whose lease has run out on the database
// clock, with the database time in each Job's DBTime.
func Expired(ctx context.Context, q *engine.Queue) ([]engine.Job, error) {
	return hook.Of[queueHooks](q).Expired(ctx)
}

// Claimable counts the jobs a claim on q would see as claimable now, locked
// or not. A claim that got ErrNoJob while this is above zero skipped a
// locked row (or waited its turn, with skip-locked broken).
func Claimable(ctx context.Context, q *engine.Queue) (int, error) {
	return hook.Of[queueHooks](q).Claimable(ctx)
}
