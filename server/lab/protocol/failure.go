package protocol

import (
	"github.com/fencelab/fencelab/server/fault"
)

// Failure is an error, for people, with a code for programs from one
// closed set (ErrorCode); when Postgres refused a statement its code is
// ErrSQL and SQLState says how.
type Failure struct {
	Code     ErrorCode `json:"code"`
	SQLState string    `json:"sqlstate,omitempty"`
	Message  string    `json:"message"`
}

// ErrorCode says what went wrong: every code an event's error or failure
// may carry, and nothing else (the schema holds them to this list).
type ErrorCode string

// A run's and a check's own codes.
const (
	ErrStepFailed  ErrorCode = "step-failed"  // a step could not be played: the run stopped
	ErrStartFailed ErrorCode = "start-failed" // a run could not start
	ErrBadCommand  ErrorCode = "bad-command"  // a worker refused a command line; nothing changed
	ErrEvaluate    ErrorCode = "evaluate"     // the outcome could not be read
	ErrWorkerLost  ErrorCode = "worker-lost"  // a worker of a script died of something outside the run: it cannot go on
	ErrNoOutcome   ErrorCode = "no-outcome"   // a case's run ended without a verdict
	ErrUnreachable ErrorCode = "unreachable"  // the receiver could not be reached
	ErrSQL         ErrorCode = "sql"          // Postgres refused a statement: Failure.SQLState says how
)

// The server's codes: server/fault's, in its words (a test holds the two
// lists together).
const (
	ErrInvalid     ErrorCode = "invalid"
	ErrNotFound    ErrorCode = "not_found"
	ErrConflict    ErrorCode = "conflict"
	ErrForbidden   ErrorCode = "forbidden"
	ErrBusy        ErrorCode = "busy"
	ErrLimit       ErrorCode = "limit"
	ErrUnavailable ErrorCode = "unavailable"
	ErrGone        ErrorCode = "gone"
	ErrTooLarge    ErrorCode = "too_large"
	ErrUnsupported ErrorCode = "unsupported"
	ErrUpgrade     ErrorCode = "upgrade"
	ErrTooMany     ErrorCode = "too_many"
	ErrInternal    ErrorCode = "internal"
)

// The codes of a reader's worker program that did not do its part
// (fencelab check --worker, cmd/internal/harness).
const (
	ErrWorkerStart      ErrorCode = "worker-start"       // the command could not be started
	ErrWorkerNoClaim    ErrorCode = "worker-no-claim"    // it never claimed the job
	ErrClaimExpired     ErrorCode = "claim-expired"      // its claims kept missing a job whose lease ran out: experiments.ReqTakesExpired, so the report names that requirement
	ErrWorkerNoDelivery ErrorCode = "worker-no-delivery" // it claimed, but never called the receiver
	ErrWorkerExit       ErrorCode = "worker-exit"        // it exited before it called the receiver
	ErrWorkerNoExit     ErrorCode = "worker-no-exit"     // it did not exit after the receiver's answer
	ErrWorkerContract   ErrorCode = "worker-contract"    // its call to the receiver broke the contract
	ErrLeaseClock       ErrorCode = "lease"              // the lease did not run out on the database clock in time
	ErrReceiverRule     ErrorCode = "receiver"           // the receiver's rule failed on a delivery
)

// The SQLSTATEs of a statement that ran out of time: one Postgres
// cancelled at the sandbox's statement_timeout (query_canceled), and one
// whose backend was ended for running on past it (admin_shutdown: the
// sandbox's WatchOverruns; a restart of Postgres says the same).
const (
	SQLStateTimeout = "57014"
	SQLStateEnded   = "57P01"
)

// TimedOut says whether time ended what failed: a statement refused with
// SQLStateTimeout or SQLStateEnded, or a run one such statement ended. On
// a busy machine that is as likely the machine's doing as the
// statement's, so a check plays such a case again alone.
func (f *Failure) TimedOut() bool {
	return f != nil && (f.SQLState == SQLStateTimeout || f.SQLState == SQLStateEnded)
}

// FailureOf is err as an event says it: a refusal of Postgres's as ErrSQL
// with its SQLSTATE and its message; anything else by its fault code, with
// the message fault lets a person read (an internal error's detail is for
// the log). Nil for nil.
func FailureOf(err error) *Failure {
	if err == nil {
		return nil
	}
	if state, ok := fault.SQLState(err); ok {
		return &Failure{Code: ErrSQL, SQLState: state, Message: err.Error()}
	}
	return &Failure{Code: ErrorCode(fault.CodeOf(err)), Message: fault.MessageOf(err)}
}
