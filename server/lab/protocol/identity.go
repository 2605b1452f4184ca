package protocol

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/jackc/pgx/v5/pgtype"
)

// Result is what a lab worker writes as a job's result and sends the
// receiver as its payload. Worker names the process that did the work, so
// the final state says whose work it holds even when two workers share an
// identity.
type Result struct {
	Worker string `json:"worker"`
	Owner  string `json:"owner"`
	Pid    int    `json:"pid"`
	JobID  int64  `json:"job_id"`
	Epoch  int64  `json:"epoch"`
	Output string `json:"output"`
}

// ResultFrom returns the worker label named in a result or payload, or "".
func ResultFrom(raw []byte) string {
	var r Result
	if len(raw) == 0 || json.Unmarshal(raw, &r) != nil {
		return ""
	}
	return r.Worker
}

// appPrefix starts the application_name of every lab worker's connection,
// so the history trigger records which process wrote each change.
const appPrefix = "fencelab worker "

// AppName returns the application_name a worker with this label connects as.
func AppName(label string) string { return appPrefix + label }

// LabelFromApp returns the worker label in an application_name, or "".
func LabelFromApp(app string) string {
	if l, ok := strings.CutPrefix(app, appPrefix); ok {
		return l
	}
	return ""
}

// WriterOf returns the label of the worker whose connection made a
// recorded change, or "".
func WriterOf(h HistoryRecord) string { return LabelFromApp(h.App) }

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

// StmtOf turns a statement the engine traced into the protocol's Stmt.
func StmtOf(t playground.Trace) Stmt {
	return Stmt{Name: t.Name, SQL: t.SQL, Args: FormatArgs(t.Args), Rows: t.Rows}
}

// Int64 returns a pointer to v, for the optional fields of events.
func Int64(v int64) *int64 { return &v }

// Time returns a pointer to t, or nil for the zero time.
func Time(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
