// Package fault is the one error type of the playground's running side: an
// Error with a Code that says what kind of failure it is, and a Message for
// people. Packages below the HTTP layer say what went wrong with a code and
// never with a status; server/wire chooses the HTTP status of each code,
// once, and cmd/fencelab the exit status. The engine's own sentinel errors
// (engine.ErrInvalidInput, ErrJobNotFound, ErrUnavailable, ErrStale,
// ErrFenced) map onto codes here too, so an engine error needs no wrapping
// to be answered right.
//
// The model is benbjohnson/wtf's Error{Code, Message}.
package fault

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/jackc/pgx/v5/pgconn"
)

// Code says what kind of failure an error is.
type Code string

// The codes.
const (
	Invalid     Code = "invalid"     // bad input: the request can never work as sent
	NotFound    Code = "not_found"   // no such session, run, job, receiver or recording
	Conflict    Code = "conflict"    // not possible in the current state (a run that ended, a worker that exited)
	Forbidden   Code = "forbidden"   // needs a secret the caller lacks: the session's control token, a run's receiver credential
	Busy        Code = "busy"        // a capacity of the server is used up; try again later
	Limit       Code = "limit"       // a bound of a run is reached (its workers, its jobs)
	Unavailable Code = "unavailable" // the database (or a worker, or the receiver) cannot do it now
	Gone        Code = "gone"        // it existed but is no longer kept
	TooLarge    Code = "too_large"   // the body or message is larger than allowed
	Unsupported Code = "unsupported" // the wrong content type
	Upgrade     Code = "upgrade"     // a WebSocket endpoint asked without a WebSocket
	TooMany     Code = "too_many"    // too many tries from one address (wrong class codes): wait Error.RetryAfter
	Internal    Code = "internal"    // a bug or a fault of ours: the log has the details
)

// Error is a failure with a code and one sentence for people.
type Error struct {
	Code    Code
	Message string
	// RetryAfter, if set, is how long the caller should wait before it
	// tries again (TooMany): an answer's Retry-After.
	RetryAfter time.Duration
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with a formatted message.
func Errorf(code Code, format string, a ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, a...)}
}

// RetryAfter returns how long err says to wait before trying again: the
// RetryAfter of the first *Error in its chain, or 0.
func RetryAfter(err error) time.Duration {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.RetryAfter
	}
	return 0
}

// CodeOf returns the code of err: that of the first *Error in its chain,
// else the code of an engine sentinel it wraps, else Internal (nil: "").
func CodeOf(err error) Code {
	var fe *Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &fe):
		return fe.Code
	case errors.Is(err, engine.ErrInvalidInput):
		return Invalid
	case errors.Is(err, engine.ErrJobNotFound):
		return NotFound
	case errors.Is(err, engine.ErrStale), errors.Is(err, engine.ErrFenced):
		return Conflict
	case errors.Is(err, engine.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return Unavailable
	}
	return Internal
}

// MessageOf returns what a person is told about err: its own sentence,
// wrapping included, except for an internal error, whose detail is for the
// log only.
func MessageOf(err error) string {
	if err == nil {
		return ""
	}
	if CodeOf(err) == Internal {
		return "internal error; the server log has the details"
	}
	return err.Error()
}

// SQLState is the SQLSTATE Postgres refused err with, when it did. It is
// how the server reads a Postgres error, outside the two places that
// translate one for their own callers: the engine's (for a library user)
// and the sandbox's (for a reader's statement).
func SQLState(err error) (string, bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, true
	}
	return "", false
}

// Invalidf is bad input found before it reaches the engine, in the
// engine's own terms (an *engine.InputError: errors.Is engine.ErrInvalidInput,
// code Invalid), so that it reads as the engine's input errors do wherever
// it goes.
func Invalidf(format string, a ...any) error {
	return &engine.InputError{Msg: fmt.Sprintf(format, a...)}
}
