package nemesis

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/fencelab/fencelab/cmd/internal/bench"
	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/jackc/pgx/v5/pgtype"
)

// The physical limit of the pool's work: pgbench running the pool's own
// batched claim and completion statements, a batch at a time, one client
// per worker process, with nothing else — no handler, no effects, no
// renewals. The statements are the engine's own, taken from a real
// ClaimBatch and CompleteBatch through playground.QueueHooks.Trace, so the
// ceiling follows the engine whenever its SQL changes.

// Sentinel arguments: the traced statements are run with these, and each
// is then replaced by a pgbench variable.
const (
	sentinelOwner  = "pgbench-sentinel-owner"
	sentinelJob    = int64(987654321)
	sentinelEpoch  = int64(123456789)
	sentinelResult = `{"pgbench": "sentinel"}`
)

// CeilingScript returns a pgbench script of one batch's work, with
// --protocol=prepared: the engine's batch claim, which sets the batch's
// ids, owners and epochs with \gset, then the engine's batch completion of
// them, by compare-and-set on each job's owner and epoch. Each statement
// commits on its own, as the pool's do. It traces both statements once,
// on schema's queue (a claim that finds nothing, a completion of a job
// that is not there): nothing in the queue changes.
func CeilingScript(ctx context.Context, db engine.DB, schema string, batch int) (string, error) {
	var traced []playground.Trace
	q, err := playground.NewQueue(db, engine.QueueConfig{Schema: schema}, playground.QueueHooks{Trace: func(t playground.Trace) { traced = append(traced, t) }})
	if err != nil {
		return "", err
	}
	if n, err := Unfinished(ctx, db, schema); err != nil || n != 0 {
		return "", fmt.Errorf("ceiling script: trace on an empty queue (%d unfinished jobs, %v)", n, err)
	}
	if _, err := q.ClaimBatch(ctx, sentinelOwner, batch, time.Minute); !errors.Is(err, engine.ErrNoJob) {
		return "", fmt.Errorf("ceiling script: trace the claim: %v", err)
	}
	c := engine.Claim{JobID: sentinelJob, Owner: sentinelOwner, Epoch: sentinelEpoch}
	if _, err := q.CompleteBatch(ctx, []engine.Completion{{Claim: c, Result: []byte(sentinelResult)}}); err != nil {
		return "", fmt.Errorf("ceiling script: trace the completion: %w", err)
	}
	if len(traced) != 2 {
		return "", fmt.Errorf("ceiling script: %d statements traced, want the claim and the completion", len(traced))
	}
	claim, err := bench.Inline(traced[0].Statement, func(arg any) (string, bool) {
		switch v := arg.(type) {
		case string:
			return "'pgbench-' || :client_id", v == sentinelOwner
		case int:
			return strconv.Itoa(v), v == batch
		case pgtype.Interval:
			return fmt.Sprintf("'%d microseconds'", v.Microseconds), v.Valid && v.Days == 0 && v.Months == 0
		}
		return "", false
	})
	if err != nil {
		return "", fmt.Errorf("ceiling script: the claim: %w", err)
	}
	complete, err := bench.Inline(traced[1].Statement, func(arg any) (string, bool) {
		switch {
		case reflect.DeepEqual(arg, []int64{sentinelJob}):
			return ":ids", true
		case reflect.DeepEqual(arg, []string{sentinelOwner}):
			return ":owners", true
		case reflect.DeepEqual(arg, []int64{sentinelEpoch}):
			return ":epochs", true
		case reflect.DeepEqual(arg, []string{sentinelResult}):
			return ":results", true
		}
		return "", false
	})
	if err != nil {
		return "", fmt.Errorf("ceiling script: the completion: %w", err)
	}
	// The claim's RETURNING starts with id, owner, epoch; the arrays keep
	// its id order, which the completion keeps too.
	ctes, main, err := splitWith(claim)
	if err != nil {
		return "", fmt.Errorf("ceiling script: the claim: %w", err)
	}
	gather := "WITH " + ctes + "c AS (" + main + ") SELECT" +
		" coalesce(array_agg(id ORDER BY id), '{}') AS ids," +
		" coalesce(array_agg(owner ORDER BY id), '{}') AS owners," +
		" coalesce(array_agg(epoch ORDER BY id), '{}') AS epochs," +
		" coalesce(array_agg('{}'::text ORDER BY id), '{}') AS results FROM c"
	return gather + " \\gset\n" + complete + ";\n", nil
}

// splitWith splits a one-line statement that may start with a WITH list
// into that list (each CTE followed by ", ") and the statement after it, so
// that the claim can become one CTE more: Postgres allows a data-modifying
// CTE only at the top level, so the claim's own CTEs cannot be nested.
func splitWith(sql string) (ctes, main string, err error) {
	sql = strings.TrimSpace(sql)
	if !strings.HasPrefix(strings.ToUpper(sql), "WITH ") {
		return "", sql, nil
	}
	depth, quote := 0, byte(0)
	for i := len("WITH "); i < len(sql); i++ {
		c := sql[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				rest := strings.TrimSpace(sql[i+1:])
				if strings.HasPrefix(rest, ",") {
					continue
				}
				return strings.TrimSpace(sql[len("WITH "):i+1]) + ", ", rest, nil
			}
		}
	}
	return "", "", fmt.Errorf("no statement after its WITH list: %s", sql)
}

// CeilingResult is one ceiling run.
type CeilingResult struct {
	Clients, Batch, Jobs int
	Done                 int // jobs done after it, read from SQL
	Elapsed              time.Duration
}

// PerSecond is the ceiling's jobs per second.
func (r CeilingResult) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Done) / r.Elapsed.Seconds()
}

// Ceiling sets up schema's queue afresh, fills it with clients × batch ×
// perClient jobs, and runs CeilingScript through pgbench (found with
// bench.FindPGBench) with clients connections, perClient batches each.
// The caller drops schema.
func Ceiling(ctx context.Context, db engine.TxDB, dsn, schema string, clients, batch, perClient int) (CeilingResult, error) {
	pgbench, err := bench.FindPGBench()
	if err != nil {
		return CeilingResult{}, err
	}
	if err := engine.DropQueue(ctx, db, schema); err != nil {
		return CeilingResult{}, err
	}
	if err := engine.SetupQueue(ctx, db, schema); err != nil {
		return CeilingResult{}, err
	}
	script, err := CeilingScript(ctx, db, schema, batch)
	if err != nil {
		return CeilingResult{}, err
	}
	r := CeilingResult{Clients: clients, Batch: batch, Jobs: clients * batch * perClient}
	if err := Insert(ctx, db, schema, r.Jobs, 25); err != nil {
		return CeilingResult{}, err
	}
	if r.Elapsed, err = bench.RunScript(ctx, pgbench, dsn, script, clients, perClient, runChild); err != nil { // it dies with us
		return CeilingResult{}, err
	}
	if r.Done, err = countDone(ctx, db, schema); err != nil {
		return CeilingResult{}, err
	}
	return r, nil
}
