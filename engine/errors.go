package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

var (
	// ErrNoJob means no job is claimable right now: none is pending and no
	// running job's lease has expired. It is not a failure; poll again later.
	ErrNoJob = errors.New("no claimable job")

	// ErrFenced means a compare-and-set on a job matched no row: the caller no
	// longer owns the job at the epoch it holds, and its write was dropped.
	// Use errors.As with *FencedError for the details.
	ErrFenced = errors.New("fenced")

	// ErrFinished means a write by a job's holder matched no row because the
	// job is no longer running, and no other claim took it: the holder
	// itself finished it already — an earlier completion whose answer was
	// lost landed, or a renewal came after the commit. It is not a fence.
	// Use errors.As with *FinishedError for the details.
	ErrFinished = errors.New("the job is already finished")

	// ErrJobNotFound means the job id names no job at all.
	ErrJobNotFound = errors.New("no such job")

	// ErrStale means the receiver refused a delivery whose epoch is older
	// than the newest it holds for that job. Use errors.As with *StaleError.
	ErrStale = errors.New("stale epoch")

	// ErrInvalidInput marks every error caused by bad input (a bad schema
	// name, an empty payload, an absurd lease, a character Postgres cannot
	// store). Nothing was changed. Use errors.As with *InputError for the
	// sentence alone.
	ErrInvalidInput = errors.New("invalid input")

	// ErrUnavailable means the database could not do the work right now: it
	// is down, restarting, out of connections, or the call timed out.
	// Nothing the caller sent was wrong; it may try again later.
	ErrUnavailable = errors.New("the database is unavailable")
)

// InputError is bad input in one plain sentence, such as "lease 5ms is out
// of range: it must be between 10ms and 24h0m0s". errors.Is(err,
// ErrInvalidInput) is true for it. Its message carries no prefix, so a front
// end can show it as it is.
type InputError struct{ Msg string }

// Error returns the sentence.
func (e *InputError) Error() string { return e.Msg }

// Is makes errors.Is(err, ErrInvalidInput) true for an *InputError.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

// invalidf returns an *InputError.
func invalidf(format string, args ...any) error {
	return &InputError{Msg: fmt.Sprintf(format, args...)}
}

// FenceReason says which kept guard a fenced write failed.
type FenceReason string

// The reasons a compare-and-set can match no row. A *FencedError lists each
// kept guard the row failed, read by the same statement as the write.
const (
	// ReasonNotRunning: the status check is on and the job is no longer running.
	ReasonNotRunning FenceReason = "not-running"
	// ReasonOwnerChanged: the owner check is on and another owner holds the job.
	ReasonOwnerChanged FenceReason = "owner-changed"
	// ReasonEpochChanged: the epoch check is on and the row's epoch moved on.
	ReasonEpochChanged FenceReason = "epoch-changed"
)

// FencedError says why a write by a worker that lost its job was dropped.
// It carries what the worker held and what the row held at the moment of
// the write: the compare-and-set statement reads the row under the same
// lock it writes with, so the reasons describe that very moment.
type FencedError struct {
	Op        string // "complete", "fail" or "renew"
	JobID     int64
	HeldOwner string
	HeldEpoch int64
	RowOwner  string
	RowEpoch  int64
	RowStatus Status
	// Reasons lists each kept guard the row failed, in guard order.
	Reasons []FenceReason
}

// Error says which write was fenced and what the row held, in one line.
func (e *FencedError) Error() string {
	return fmt.Sprintf("%s job %d: fenced: %s held epoch %d, but the row is %s at epoch %d owned by %q",
		e.Op, e.JobID, e.HeldOwner, e.HeldEpoch, e.RowStatus, e.RowEpoch, e.RowOwner)
}

// Is makes errors.Is(err, ErrFenced) true for a *FencedError.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// FinishedError says a holder's write found its job already finished, at
// the very owner and epoch it holds: by the holder itself.
type FinishedError struct {
	Op     string // "complete", "fail" or "renew"
	JobID  int64
	Epoch  int64
	Status Status // done, failed, or pending (a failure waiting for its retry)
}

// Error says which write found what.
func (e *FinishedError) Error() string {
	return fmt.Sprintf("%s job %d: the job is already %s at epoch %d, by its holder", e.Op, e.JobID, e.Status, e.Epoch)
}

// Is makes errors.Is(err, ErrFinished) true for a *FinishedError.
func (e *FinishedError) Is(target error) bool { return target == ErrFinished }

// StaleError says the receiver refused a delivery with an older epoch.
type StaleError struct {
	JobID     int64
	Epoch     int64 // the epoch that was offered
	HeldEpoch int64 // the newest epoch the receiver holds
}

// Error says which delivery was refused and what the receiver holds.
func (e *StaleError) Error() string {
	return fmt.Sprintf("deliver job %d: stale epoch %d: the receiver holds epoch %d", e.JobID, e.Epoch, e.HeldEpoch)
}

// Is makes errors.Is(err, ErrStale) true for a *StaleError.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// dbError is a database error the engine has translated: a sentinel
// (ErrInvalidInput or ErrUnavailable) and a sentence for people, with the
// driver's error kept underneath for errors.As. Its message names the
// SQLSTATE but never the driver's text, which for a failed connection
// carries the host, user and database of the connection string.
type dbError struct {
	op       string
	sentinel error
	msg      string
	cause    error
}

func (e *dbError) Error() string   { return e.op + ": " + e.msg }
func (e *dbError) Unwrap() []error { return []error{e.sentinel, e.cause} }

// translate turns an error from Postgres or the driver into the engine's
// own, by SQLSTATE, never by message text. It is the one place the engine
// does so. Errors it does not know are wrapped with the operation's name.
//
//   - class 22 (data exception: a NUL in JSON, a lone surrogate, a number
//     out of range) and class 23 (a check constraint) are the caller's
//     input: ErrInvalidInput.
//   - a connection that could not be made, whatever the server said (an
//     unknown role, a wrong password), class 08 (connection), 53
//     (insufficient resources: too many connections), 57 (operator
//     intervention: shutdown, cancel), 55P03 (a lock timeout), a network
//     error and a deadline are ErrUnavailable.
//
// isConnClosed is pgx's error for a statement sent on a connection it had
// closed already (after the server ended it).
func isConnClosed(err error) bool { return err != nil && strings.Contains(err.Error(), "conn closed") }

// TranslateError reads an error of a statement the caller ran beside the
// engine's (in the same transaction, say) as the engine reads its own:
// ErrInvalidInput for values the database refused, ErrUnavailable for a
// database out of reach for now, and otherwise err wrapped with op. Its
// message never carries the connection string.
func TranslateError(op string, err error) error { return translate(op, err) }

func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		// A connection that could not be made: the server said why (a role
		// that does not exist, a wrong password, too many connections) or
		// nothing answered. Its text names the user, the database and the
		// host, so only the SQLSTATE is kept.
		msg := ErrUnavailable.Error() + ": cannot connect"
		if errors.As(err, &pe) {
			msg += fmt.Sprintf(" (SQLSTATE %s)", pe.Code)
		}
		return &dbError{op, ErrUnavailable, msg, err}
	}
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "22"):
			return &dbError{op, &InputError{Msg: dataMessage(pe)}, dataMessage(pe), err}
		case strings.HasPrefix(pe.Code, "23"):
			msg := fmt.Sprintf("the database refused the values (SQLSTATE %s)", pe.Code)
			return &dbError{op, &InputError{Msg: msg}, msg, err}
		case strings.HasPrefix(pe.Code, "08"), strings.HasPrefix(pe.Code, "53"), strings.HasPrefix(pe.Code, "57"), pe.Code == "55P03":
			return &dbError{op, ErrUnavailable, fmt.Sprintf("%v (SQLSTATE %s)", ErrUnavailable, pe.Code), err}
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne), pgconn.SafeToRetry(err), errors.Is(err, context.DeadlineExceeded),
		// A connection the server ended (a restart): its next read is an
		// unexpected EOF, and pgx has closed it.
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), isConnClosed(err):
		return &dbError{op, ErrUnavailable, ErrUnavailable.Error(), err}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// dataMessage says in words what a data exception was about.
func dataMessage(pe *pgconn.PgError) string {
	switch pe.Code {
	case "22P05": // untranslatable_character: \u0000 in jsonb or text
		return "the input has a character Postgres cannot store (a NUL, \\u0000) (SQLSTATE 22P05)"
	case "22P02": // invalid_text_representation: a lone surrogate in JSON
		return "the input is not text Postgres can store (a lone UTF-16 surrogate?) (SQLSTATE 22P02)"
	case "22003":
		return "a number is out of range (SQLSTATE 22003)"
	case "22021":
		return "the input has a NUL or bytes that are not UTF-8, which Postgres cannot store as text (SQLSTATE 22021)"
	}
	return fmt.Sprintf("the database refused the input (SQLSTATE %s)", pe.Code)
}
