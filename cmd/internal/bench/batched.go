package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencelab/fencelab/engine"
	"github.com/jackc/pgx/v5"
)

// The simplest batched fenced cycle, written by hand rather than taken
// from the engine: in one transaction, claim up to a batch of pending jobs
// with FOR UPDATE SKIP LOCKED (each claim bumps the job's epoch and starts
// a lease on the database clock), then complete each of them by a
// compare-and-set on its own owner and epoch, all in one UPDATE. It does
// not reclaim jobs whose lease ran out, nor end spent ones: nothing in a
// benchmark run stalls, so it does no less work than the engine for that,
// and it is the floor a correct batched queue is measured against.
//
// :client_id is pgbench's, :ids and :epochs come from the claim's \gset;
// {{jobs}} and {{batch}} are filled in by fillIn.
const (
	batchedClaim = `WITH claimed AS (
  UPDATE {{jobs}}
     SET status = 'running', owner = 'pgbench-' || :client_id, epoch = epoch + 1,
         attempts = attempts + 1, lease_until = now() + interval '1 minute', updated_at = now()
   WHERE id = ANY (ARRAY(SELECT id FROM {{jobs}} WHERE status = 'pending' AND run_at <= now()
                          ORDER BY run_at, id LIMIT {{batch}} FOR UPDATE SKIP LOCKED))
  RETURNING id, epoch)
SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(epoch), '{}') AS epochs FROM claimed`
	batchedComplete = `UPDATE {{jobs}} AS j
   SET status = 'done', result = '{}', lease_until = NULL, updated_at = now()
  FROM unnest(:ids::bigint[], :epochs::bigint[]) AS held(id, epoch)
 WHERE j.id = held.id AND j.status = 'running'
   AND j.owner = 'pgbench-' || :client_id AND j.epoch = held.epoch`
)

// The simplest one-job fenced cycle, the same by one job in two
// statements, each its own transaction, as the engine's one-job cycle runs:
// a claim of the first pending job with FOR UPDATE SKIP LOCKED, and its
// completion by compare-and-set on owner and epoch. :id and :epoch come
// from the claim's \gset.
const (
	oneClaim = `UPDATE {{jobs}}
   SET status = 'running', owner = 'pgbench-' || :client_id, epoch = epoch + 1,
       attempts = attempts + 1, lease_until = now() + interval '1 minute', updated_at = now()
 WHERE id = (SELECT id FROM {{jobs}} WHERE status = 'pending' AND run_at <= now()
              ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, epoch`
	oneComplete = `UPDATE {{jobs}}
   SET status = 'done', result = '{}', lease_until = NULL, updated_at = now()
 WHERE id = :id AND status = 'running' AND owner = 'pgbench-' || :client_id AND epoch = :epoch`
)

// SimplestScript returns a pgbench script of the simplest one-job fenced
// cycle on schema's jobs.
func SimplestScript(schema string) (string, error) {
	claim, complete, err := fillIn(schema, 1, oneClaim, oneComplete)
	if err != nil {
		return "", err
	}
	return claim + " \\gset\n" + complete + ";\n", nil
}

// Simplest runs the simplest one-job fenced cycle through pgbench: clients
// connections, perClient jobs each. The jobs must be in place (Fill) and
// number clients × perClient.
func Simplest(ctx context.Context, pgbench, dsn, schema string, clients, perClient int) (Result, error) {
	text, err := SimplestScript(schema)
	if err != nil {
		return Result{}, err
	}
	return runResult(ctx, "pgbench, simplest one-job", pgbench, dsn, text, clients, perClient, clients*perClient)
}

// fillIn fills a hand-written claim and completion in for schema's jobs
// and a batch size, each on one line, as pgbench wants them.
func fillIn(schema string, batch int, claimText, completeText string) (claim, complete string, err error) {
	if err := engine.ValidateSchemaName(schema); err != nil {
		return "", "", err
	}
	if batch < 1 {
		return "", "", fmt.Errorf("batch %d: want at least 1", batch)
	}
	r := strings.NewReplacer("{{jobs}}", pgx.Identifier{schema, "jobs"}.Sanitize(), "{{batch}}", fmt.Sprint(batch), "\n", " ")
	return r.Replace(claimText), r.Replace(completeText), nil
}

// BatchedScript returns a pgbench script of the simplest batched fenced
// cycle: one transaction of a claim of up to batch jobs and their fenced
// completion.
func BatchedScript(schema string, batch int) (string, error) {
	claim, complete, err := fillIn(schema, batch, batchedClaim, batchedComplete)
	if err != nil {
		return "", err
	}
	return "BEGIN;\n" + claim + " \\gset\n" + complete + ";\nCOMMIT;\n", nil
}

// Batched runs the simplest batched fenced cycle through pgbench: clients
// connections, perClient transactions each of up to batch jobs. The jobs
// must be in place (Fill) and number clients × perClient × batch.
func Batched(ctx context.Context, pgbench, dsn, schema string, clients, batch, perClient int) (Result, error) {
	text, err := BatchedScript(schema, batch)
	if err != nil {
		return Result{}, err
	}
	return runResult(ctx, fmt.Sprintf("pgbench, batched (batch %d)", batch), pgbench, dsn, text, clients, perClient, clients*perClient*batch)
}
