package judge

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// History reads a job's recorded changes in a lab queue's schema (made by
// Setup, which adds the history), oldest first.
func History(ctx context.Context, db engine.DB, schema string, jobID int64) ([]protocol.HistoryRecord, error) {
	if err := engine.ValidateSchemaName(schema); err != nil {
		return nil, fmt.Errorf("job history: %w", err)
	}
	if jobID <= 0 {
		return nil, fmt.Errorf("job history: %w", fault.Invalidf("job id %d is not positive", jobID))
	}
	return history(ctx, db, fmt.Sprintf("history of job %d", jobID), jobHistoryList(schema, jobID))
}

// HistoryAfter reads every job's recorded changes numbered after seq,
// oldest first, at most limit (1 to 10,000) of them.
func HistoryAfter(ctx context.Context, db engine.DB, schema string, seq int64, limit int) ([]protocol.HistoryRecord, error) {
	if err := engine.ValidateSchemaName(schema); err != nil {
		return nil, fmt.Errorf("history after %d: %w", seq, err)
	}
	if seq < 0 || limit < 1 || limit > 10_000 {
		return nil, fault.Invalidf("history after %d, at most %d: the seq must be at least 0 and the limit 1 to 10000", seq, limit)
	}
	return history(ctx, db, fmt.Sprintf("history after %d", seq), jobHistoryAfter(schema, seq, limit))
}

func history(ctx context.Context, db engine.DB, op string, st playground.Statement) ([]protocol.HistoryRecord, error) {
	rows, err := db.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		return nil, dbErr(op, err)
	}
	defer rows.Close()
	var out []protocol.HistoryRecord
	for rows.Next() {
		var h protocol.HistoryRecord
		var result []byte
		if err := rows.Scan(&h.Seq, &h.JobID, &h.Op, &h.At, &h.OldStatus, &h.NewStatus, &h.OldOwner, &h.NewOwner,
			&h.OldEpoch, &h.NewEpoch, &h.OldLeaseUntil, &h.NewLeaseUntil, &h.Attempts, &result, &h.App); err != nil {
			return nil, dbErr(op, err)
		}
		h.Result = result
		out = append(out, h)
	}
	return out, dbErr(op, rows.Err())
}

// Write is one UPDATE statement on a lab queue's jobs, as Postgres
// recorded it (the job_writes trigger of sql/history.sql): whatever it
// matched, 0 rows included, with the writer's application_name. A
// statement whose transaction was rolled back is not among them (see
// WritesSent).
type Write struct {
	Seq     int64     `json:"seq"`
	At      time.Time `json:"at"`
	App     string    `json:"app"`
	Matched int       `json:"matched"`
	JobIDs  []int64   `json:"job_ids"`
}

// Writes reads every UPDATE statement on the lab queue's jobs that
// committed, oldest first.
func Writes(ctx context.Context, db engine.DB, schema string) ([]Write, error) {
	if err := engine.ValidateSchemaName(schema); err != nil {
		return nil, fmt.Errorf("job writes: %w", err)
	}
	st := jobWritesList(schema)
	rows, err := db.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		return nil, dbErr("job writes", err)
	}
	defer rows.Close()
	var out []Write
	for rows.Next() {
		var w Write
		if err := rows.Scan(&w.Seq, &w.At, &w.App, &w.Matched, &w.JobIDs); err != nil {
			return nil, dbErr("job writes", err)
		}
		out = append(out, w)
	}
	return out, dbErr("job writes", rows.Err())
}

// Sent is how many UPDATE statements on jobs each of a run's two workers
// has sent: committed, rolled back or matching nothing, each counts. It is
// how the database itself tells a worker that tried its commit, was fenced
// and raised (rolling its transaction back, as the article says to) from
// one that never sent it.
type Sent struct{ A, B int64 }

// Of returns the count of worker label (experiments.Zombie or experiments.NewOwner).
func (s Sent) Of(label string) int64 {
	if label == experiments.Zombie {
		return s.A
	}
	return s.B
}

// WritesSent reads how many UPDATE statements on jobs worker A and worker
// B have sent in a lab queue's schema.
func WritesSent(ctx context.Context, db engine.DB, schema string) (Sent, error) {
	if err := engine.ValidateSchemaName(schema); err != nil {
		return Sent{}, fmt.Errorf("writes sent: %w", err)
	}
	st := jobWritesSent(schema)
	var s Sent
	if err := db.QueryRow(ctx, st.SQL, st.Args...).Scan(&s.A, &s.B); err != nil {
		return Sent{}, dbErr("writes sent", err)
	}
	return s, nil
}
