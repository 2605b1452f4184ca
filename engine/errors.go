package engine

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrNoJob means no job is claimable right now: none is pending and no
	// running job's lease has expired. It is not a failure; poll again later.
	ErrNoJob = errors.New("no claimable job")

	// ErrFenced means a compare-and-set on a job matched no row: the caller no
	// longer owns the job at the epoch it holds, and its write was dropped.
	// Use errors.As with *FencedError for the details.
	ErrFenced = errors.New("fenced")

	// ErrJobNotFound means the job id names no job at all.
	ErrJobNotFound = errors.New("no such job")

	// ErrStale means the receiver refused a delivery whose epoch is older
	// than the newest it holds for that job. Use errors.As with *StaleError.
	ErrStale = errors.New("stale epoch")

	// ErrInvalidInput marks every error caused by bad input (a bad schema
	// name, an empty payload, an absurd lease). Nothing was changed.
	// Front ends map it to a 4xx status or exit code 2.
	ErrInvalidInput = errors.New("invalid input")
)

// FencedError says why a write by a worker that lost its job was dropped.
// It carries what the worker held and what the row holds now.
type FencedError struct {
	Op        string // "complete", "fail" or "renew"
	JobID     int64
	HeldOwner string
	HeldEpoch int64
	RowOwner  string
	RowEpoch  int64
	RowStatus Status
	// Reasons lists, in words, each kept guard the row failed.
	Reasons []string
}

// Error says which write was fenced and why, in one line.
func (e *FencedError) Error() string {
	why := strings.Join(e.Reasons, "; ")
	if why == "" {
		why = "the row changed under it"
	}
	return fmt.Sprintf("%s job %d: fenced: %s held epoch %d, but %s", e.Op, e.JobID, e.HeldOwner, e.HeldEpoch, why)
}

// Is makes errors.Is(err, ErrFenced) true for a *FencedError.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

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

// invalidf returns an ErrInvalidInput error with a plain message.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidInput, fmt.Sprintf(format, args...))
}
