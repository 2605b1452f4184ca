package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/jackc/pgx/v5"
)

// This file is a worker that runs a reader's own claim, complete and fail
// (Config.SQL) in place of the engine's: as the run's role, on the
// connection it logged in with, each statement checked by the server
// before the worker started and rebuilt here (sandbox.Load). What the
// statements did is reported as the engine's are, so the timeline shows
// the reader's statements as they ran; what the run came to is read from
// the database afterwards, as for every run.

// runReader runs one of the reader's statements for a call and reports it
// as an event.
func (w *Worker) runReader(ctx context.Context, c *call, st *sandbox.Vetted, args map[string]any, read func(*sandbox.Result) error) error {
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		c.err = fmt.Errorf("connect to Postgres: %w", engine.ErrUnavailable)
		return c.err
	}
	defer conn.Release()
	start := time.Now()
	res, err := sandbox.Exec(ctx, conn.Conn(), st, args)
	t := playground.Trace{Statement: playground.Statement{Name: "Reader" + upper(st.Kind.String()), SQL: st.SQL, Args: st.Args(args)}, Err: err, Elapsed: time.Since(start)}
	if err == nil {
		t.Rows = res.RowsAffected
		c.err = read(res)
	} else {
		c.err = err
	}
	// The statement's own result holds no database time; the next read of
	// the clock on the same connection is as close as one gets.
	if at, cerr := dbNow(ctx, conn.Conn()); cerr == nil {
		t.DBTime = at
	}
	if t.Err == nil && errors.Is(c.err, engine.ErrFenced) {
		w.fenceOf(ctx, conn.Conn(), c)
	}
	if !(c.quietNoJob && errors.Is(c.err, engine.ErrNoJob)) {
		w.emit(protocol.Event{Kind: protocol.KindSQL, At: t.DBTime, SQL: w.statement(c, t)})
	}
	return c.err
}

func upper(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

func dbNow(ctx context.Context, conn *pgx.Conn) (time.Time, error) {
	var at time.Time
	err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&at)
	return at, err
}

// fenceOf reads, as the role, what the row holds after a write of the
// reader's matched nothing, for the event's "fenced" part: the reasons
// are the differences from what the worker held, since the reader's
// statement does not say which of its conditions failed.
func (w *Worker) fenceOf(ctx context.Context, conn *pgx.Conn, c *call) {
	var fe *engine.FencedError
	if !errors.As(c.err, &fe) {
		return
	}
	var status string
	var owner *string
	q := "SELECT status, owner, epoch FROM " + pgx.Identifier{w.cfg.Schema, "jobs"}.Sanitize() + " WHERE id = $1"
	if err := conn.QueryRow(ctx, q, fe.JobID).Scan(&status, &owner, &fe.RowEpoch); err != nil {
		return
	}
	fe.RowStatus = engine.Status(status)
	if owner != nil {
		fe.RowOwner = *owner
	}
	if fe.RowStatus != engine.StatusRunning {
		fe.Reasons = append(fe.Reasons, engine.ReasonNotRunning)
	}
	if fe.RowOwner != fe.HeldOwner {
		fe.Reasons = append(fe.Reasons, engine.ReasonOwnerChanged)
	}
	if fe.RowEpoch != fe.HeldEpoch {
		fe.Reasons = append(fe.Reasons, engine.ReasonEpochChanged)
	}
}

// readerClaim runs the reader's claim: one row is the job taken, none
// means there was none to take.
func (w *Worker) readerClaim(ctx context.Context, c *call, held *engine.Claim) error {
	args := map[string]any{"owner": w.cfg.Name, "lease": w.cfg.Lease, "now": w.now()}
	return w.runReader(ctx, c, w.cfg.SQL.Claim, args, func(res *sandbox.Result) error {
		switch len(res.Rows) {
		case 0:
			return engine.ErrNoJob
		case 1:
		default:
			return fmt.Errorf("your claim returned %d rows: a claim takes one job: %w", len(res.Rows), engine.ErrInvalidInput)
		}
		got := map[string]any{}
		for i, name := range res.Columns {
			if _, dup := got[name]; !dup {
				got[name] = res.Rows[0][i]
			}
		}
		id, ok1 := asInt(got["id"])
		epoch, ok2 := asInt(got["epoch"])
		owner, ok3 := got["owner"].(string)
		lease, ok4 := got["lease_until"].(time.Time)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return fmt.Errorf("your claim returned a row without id, owner, epoch and lease_until: %w", engine.ErrInvalidInput)
		}
		*held = engine.Claim{JobID: id, Owner: owner, Epoch: epoch, LeaseUntil: lease}
		return nil
	})
}

func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	}
	return 0, false
}

// readerWrite runs the reader's complete or fail: a row changed means it
// landed, none means it was fenced.
func (w *Worker) readerWrite(ctx context.Context, c *call, held engine.Claim, st *sandbox.Vetted, extra map[string]any) error {
	args := map[string]any{"id": held.JobID, "owner": held.Owner, "epoch": held.Epoch}
	for k, v := range extra {
		args[k] = v
	}
	return w.runReader(ctx, c, st, args, func(res *sandbox.Result) error {
		if !res.Landed() {
			return &engine.FencedError{Op: st.Kind.String(), JobID: held.JobID, HeldOwner: held.Owner, HeldEpoch: held.Epoch}
		}
		for i, name := range res.Columns {
			if name == "status" && len(res.Rows) > 0 {
				if s, ok := res.Rows[0][i].(string); ok {
					c.status = engine.Status(s)
				}
			}
		}
		return nil
	})
}
