package engine

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Kind says what sort of thing an Event records.
type Kind string

// The kinds of event. Every front end — the page, the CLI's --json, the
// export and the tests — reads the same events.
const (
	KindSQL        Kind = "sql"        // a statement a worker or the receiver ran, with rows affected
	KindCheckpoint Kind = "checkpoint" // a worker waits at a named checkpoint, or proceeds past it
	KindProcess    Kind = "process"    // a worker process was spawned, stopped, continued, killed or exited
	KindCall       Kind = "call"       // a worker called the receiver over HTTP, and its answer
	KindRow        Kind = "row"        // Postgres reported a change to a job row (trigger + NOTIFY)
	KindReceiver   Kind = "receiver"   // the receiver decided on a delivery
	KindLease      Kind = "lease"      // a lease ran out on the database clock
	KindStep       Kind = "step"       // the runner began a step of the scenario
	KindVerdict    Kind = "verdict"    // the outcome of a run, read from the database and the receiver
	KindRun        Kind = "run"        // a run started, paused, changed pace or ended (its summary in Data)
	KindNote       Kind = "note"       // anything else worth saying in words
	KindError      Kind = "error"      // something went wrong that was not a fenced write
)

// Event is one thing that happened in a run. Seq is given by the log that
// keeps it; a worker leaves it zero. At is the database clock: from the
// statement's own now() where there is one, else read by the runner.
type Event struct {
	Seq        int64           `json:"seq,omitempty"`
	Run        string          `json:"run,omitempty"`
	At         time.Time       `json:"at"`
	Actor      string          `json:"actor"`
	Kind       Kind            `json:"kind"`
	Text       string          `json:"text"`
	Op         string          `json:"op,omitempty"`   // claim, renew, deliver, complete, fail, read, ...
	Name       string          `json:"name,omitempty"` // the statement's Noun+Verb name, or a checkpoint's
	SQL        string          `json:"sql,omitempty"`
	Args       []string        `json:"args,omitempty"`
	Rows       *int64          `json:"rows,omitempty"`
	JobID      int64           `json:"job_id,omitempty"`
	Owner      string          `json:"owner,omitempty"`
	Epoch      *int64          `json:"epoch,omitempty"`
	LeaseUntil *time.Time      `json:"lease_until,omitempty"`
	Outcome    string          `json:"outcome,omitempty"`
	Error      string          `json:"error,omitempty"`
	Pid        int             `json:"pid,omitempty"`
	State      string          `json:"state,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
}

// Int64 returns a pointer to v, for the optional fields of Event.
func Int64(v int64) *int64 { return &v }

// Time returns a pointer to t, or nil for the zero time.
func Time(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// FormatArgs renders statement arguments for people: strings quoted,
// intervals as durations, times in RFC 3339 with milliseconds.
func FormatArgs(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = formatArg(a)
	}
	return out
}

func formatArg(a any) string {
	switch v := a.(type) {
	case nil:
		return "NULL"
	case string:
		if len(v) > 200 {
			v = v[:200] + "…"
		}
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case *int64:
		if v == nil {
			return "NULL"
		}
		return fmt.Sprint(*v)
	case time.Time:
		return v.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	case pgtype.Interval:
		return "'" + (time.Duration(v.Microseconds) * time.Microsecond).String() + "'"
	case fmt.Stringer:
		return v.String()
	default:
		return fmt.Sprint(v)
	}
}
