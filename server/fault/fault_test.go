package fault_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/fault"
)

// The codes are written into every error answer's JSON ("code") and read
// by the page and by programs: their spelling is part of the API.
func TestCode_SpellingsAreStableAndDistinct(t *testing.T) {
	t.Parallel()
	want := map[fault.Code]string{
		fault.Invalid:     "invalid",
		fault.NotFound:    "not_found",
		fault.Conflict:    "conflict",
		fault.Forbidden:   "forbidden",
		fault.Busy:        "busy",
		fault.Limit:       "limit",
		fault.Unavailable: "unavailable",
		fault.Gone:        "gone",
		fault.TooLarge:    "too_large",
		fault.Unsupported: "unsupported",
		fault.Upgrade:     "upgrade",
		fault.TooMany:     "too_many",
		fault.Internal:    "internal",
	}
	if len(want) != 13 {
		t.Fatalf("two codes share a spelling: %d distinct of 13", len(want))
	}
	for c, s := range want {
		if string(c) != s {
			t.Errorf("code %q is spelled %q", s, string(c))
		}
	}
}

func TestError_MessageIsTheSentenceAlone(t *testing.T) {
	t.Parallel()
	e := &fault.Error{Code: fault.NotFound, Message: "no live run has this receiver"}
	if got := e.Error(); got != "no live run has this receiver" {
		t.Errorf("Error() = %q, want the message alone", got)
	}
	var err error = e
	if got := err.Error(); strings.Contains(got, string(fault.NotFound)) {
		t.Errorf("Error() = %q names its code; the code is not for people", got)
	}
}

func TestErrorf_FormatsTheMessageAndKeepsTheCode(t *testing.T) {
	t.Parallel()
	e := fault.Errorf(fault.TooLarge, "the body is larger than %d bytes", 1024)
	if e.Code != fault.TooLarge {
		t.Errorf("Code = %q, want %q", e.Code, fault.TooLarge)
	}
	if e.Message != "the body is larger than 1024 bytes" {
		t.Errorf("Message = %q", e.Message)
	}
	if e := fault.Errorf(fault.Invalid, "plain"); e.Message != "plain" || e.Code != fault.Invalid {
		t.Errorf("Errorf without arguments = %+v", e)
	}
}

func TestError_WrappedIsFoundByErrorsAsAndIs(t *testing.T) {
	t.Parallel()
	inner := fault.Errorf(fault.Conflict, "the run ended")
	wrapped := fmt.Errorf("step: %w", fmt.Errorf("command: %w", inner))

	var fe *fault.Error
	if !errors.As(wrapped, &fe) {
		t.Fatalf("errors.As found no *fault.Error in %q", wrapped)
	}
	if fe != inner {
		t.Errorf("errors.As found %p, want the wrapped error %p", fe, inner)
	}
	if !errors.Is(wrapped, inner) {
		t.Errorf("errors.Is(wrapped, inner) = false")
	}
	// Two errors with the same code and message are still two errors:
	// Is compares identity, as for any pointer error.
	if errors.Is(wrapped, fault.Errorf(fault.Conflict, "the run ended")) {
		t.Errorf("errors.Is matched a different *fault.Error with the same text")
	}
	if got := fault.CodeOf(wrapped); got != fault.Conflict {
		t.Errorf("CodeOf(wrapped) = %q, want %q", got, fault.Conflict)
	}
	if got := fault.MessageOf(wrapped); got != "step: command: the run ended" {
		t.Errorf("MessageOf(wrapped) = %q: the wrapping is part of the sentence", got)
	}
}

func TestCodeOf_NilIsNoCode(t *testing.T) {
	t.Parallel()
	if got := fault.CodeOf(nil); got != "" {
		t.Errorf("CodeOf(nil) = %q, want \"\"", got)
	}
	if got := fault.MessageOf(nil); got != "" {
		t.Errorf("MessageOf(nil) = %q, want \"\"", got)
	}
}

func TestCodeOf_TheFirstFaultInTheChainWins(t *testing.T) {
	t.Parallel()
	// A *fault.Error beats an engine sentinel in the same chain, and the
	// first *fault.Error beats a later one.
	cases := []struct {
		name string
		err  error
		want fault.Code
	}{
		{"fault before a sentinel", fmt.Errorf("%w: %w", fault.Errorf(fault.Gone, "gone"), engine.ErrStale), fault.Gone},
		{"sentinel before a fault", fmt.Errorf("%w: %w", engine.ErrStale, fault.Errorf(fault.Gone, "gone")), fault.Gone},
		{"two faults", errors.Join(fault.Errorf(fault.Busy, "busy"), fault.Errorf(fault.Limit, "limit")), fault.Busy},
		{"an internal fault over an input error", fmt.Errorf("%w: %w", fault.Errorf(fault.Internal, "x"), engine.ErrInvalidInput), fault.Internal},
	}
	for _, c := range cases {
		if got := fault.CodeOf(c.err); got != c.want {
			t.Errorf("%s: CodeOf = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestCodeOf_EngineSentinelsNeedNoWrapping(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		want fault.Code
	}{
		{"ErrInvalidInput", engine.ErrInvalidInput, fault.Invalid},
		{"*InputError", &engine.InputError{Msg: "owner is empty"}, fault.Invalid},
		{"ErrJobNotFound, wrapped", fmt.Errorf("receiver holds nothing for job 7: %w", engine.ErrJobNotFound), fault.NotFound},
		{"ErrStale", engine.ErrStale, fault.Conflict},
		{"*StaleError", &engine.StaleError{JobID: 1, Epoch: 1, HeldEpoch: 2}, fault.Conflict},
		{"ErrFenced", engine.ErrFenced, fault.Conflict},
		{"*FencedError, wrapped", fmt.Errorf("complete: %w", &engine.FencedError{Op: "complete", JobID: 1}), fault.Conflict},
		{"ErrUnavailable", engine.ErrUnavailable, fault.Unavailable},
		{"context.DeadlineExceeded", fmt.Errorf("query: %w", context.DeadlineExceeded), fault.Unavailable},
		// Anything else is ours to explain: internal.
		{"a plain error", errors.New("boom"), fault.Internal},
		{"context.Canceled", context.Canceled, fault.Internal},
		{"ErrNoJob (not a failure the API answers)", engine.ErrNoJob, fault.Internal},
		{"ErrFinished", engine.ErrFinished, fault.Internal},
		{"a Postgres error", &pgconn.PgError{Code: "42P01", Message: "relation does not exist"}, fault.Internal},
	}
	for _, c := range cases {
		if got := fault.CodeOf(c.err); got != c.want {
			t.Errorf("%s: CodeOf = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestMessageOf_AnInternalErrorKeepsItsDetailForTheLog(t *testing.T) {
	t.Parallel()
	const generic = "internal error; the server log has the details"
	secret := "password=hunter2 host=db.internal"
	for name, err := range map[string]error{
		"a plain error":      errors.New("connect: " + secret),
		"an internal fault":  fault.Errorf(fault.Internal, "dsn %s", secret),
		"a wrapped pg error": fmt.Errorf("setup: %w", &pgconn.PgError{Code: "42501", Message: secret}),
		"context.Canceled":   fmt.Errorf("%s: %w", secret, context.Canceled),
		"a wrapped internal": fmt.Errorf("%s: %w", secret, fault.Errorf(fault.Internal, "x")),
	} {
		got := fault.MessageOf(err)
		if got != generic {
			t.Errorf("%s: MessageOf = %q, want %q", name, got, generic)
		}
		if strings.Contains(got, "hunter2") {
			t.Errorf("%s: MessageOf leaks the detail: %q", name, got)
		}
	}
	// Every other code is told as it is.
	for _, c := range []fault.Code{fault.Invalid, fault.NotFound, fault.Conflict, fault.Forbidden, fault.Busy, fault.Limit,
		fault.Unavailable, fault.Gone, fault.TooLarge, fault.Unsupported, fault.Upgrade, fault.TooMany} {
		if got := fault.MessageOf(fault.Errorf(c, "said for %s", c)); got != "said for "+string(c) {
			t.Errorf("MessageOf(%s) = %q", c, got)
		}
	}
	if got := fault.MessageOf(&engine.StaleError{JobID: 3, Epoch: 1, HeldEpoch: 2}); got != "deliver job 3: stale epoch 1: the receiver holds epoch 2" {
		t.Errorf("MessageOf(*StaleError) = %q: an engine sentence is told as it is", got)
	}
}

func TestSQLState_ReadsAPostgresErrorThroughWrapping(t *testing.T) {
	t.Parallel()
	pe := &pgconn.PgError{Code: "22P05", Message: "unsupported Unicode escape sequence"}
	for name, err := range map[string]error{
		"bare":          pe,
		"wrapped twice": fmt.Errorf("deliver: %w", fmt.Errorf("insert: %w", pe)),
		"joined":        errors.Join(errors.New("other"), pe),
	} {
		code, ok := fault.SQLState(err)
		if !ok || code != "22P05" {
			t.Errorf("%s: SQLState = %q, %v; want 22P05, true", name, code, ok)
		}
	}
	for name, err := range map[string]error{
		"nil":            nil,
		"a plain error":  errors.New("22P05"),
		"a fault":        fault.Errorf(fault.Invalid, "SQLSTATE 22P05"),
		"engine's input": &engine.InputError{Msg: "a NUL"},
	} {
		if code, ok := fault.SQLState(err); ok || code != "" {
			t.Errorf("%s: SQLState = %q, %v; want \"\", false", name, code, ok)
		}
	}
}
