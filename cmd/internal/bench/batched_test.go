package bench_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/cmd/internal/bench"
	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// simplestSetup finds pgbench and makes a queue of the engine's schema, as
// bench --fast runs the hand-written cycles on.
func simplestSetup(t *testing.T) (pgbench string, pool *pgxpool.Pool, schema string) {
	t.Helper()
	pgbench, err := bench.FindPGBench()
	if err != nil {
		t.Fatal(err)
	}
	pool, schema = pgtest.Pool(t), pgtest.Schema(t)
	if err := engine.SetupQueue(context.Background(), pool, schema); err != nil {
		t.Fatal(err)
	}
	return pgbench, pool, schema
}

// TestBatched_TheSimplestFencedCycleIsFencedAndComplete: the hand-written
// batched cycle pgbench runs is a real fenced queue, not a shortcut: two
// claims at once take disjoint jobs without waiting, a completion whose
// epoch was overtaken lands nothing, and pgbench's run ends every job done
// at epoch 1.
func TestBatched_TheSimplestFencedCycleIsFencedAndComplete(t *testing.T) {
	ctx := context.Background()
	pgbench, pool, schema := simplestSetup(t)
	script, err := bench.BatchedScript(schema, 5)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(script), "\n")
	if len(lines) != 4 || lines[0] != "BEGIN;" || lines[3] != "COMMIT;" {
		t.Fatalf("the script is not one transaction of a claim and a completion:\n%s", script)
	}
	claimSQL := strings.NewReplacer(" \\gset", "", ":client_id", "'7'").Replace(lines[1])
	completeSQL := strings.NewReplacer(":ids", "$1", ":epochs", "$2", ":client_id", "'7'", ";", "").Replace(lines[2])

	if err := bench.Fill(ctx, pool, schema, 10); err != nil {
		t.Fatal(err)
	}
	claim := func(tx pgx.Tx) (ids, epochs []int64) {
		t.Helper()
		if err := tx.QueryRow(ctx, claimSQL).Scan(&ids, &epochs); err != nil {
			t.Fatal(err)
		}
		return ids, epochs
	}
	tx1, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(ctx)
	tx2, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(ctx)
	if _, err := tx2.Exec(ctx, "SET LOCAL lock_timeout = '2s'"); err != nil {
		t.Fatal(err)
	}
	ids1, epochs1 := claim(tx1)
	ids2, _ := claim(tx2)
	if len(ids1) != 5 || len(ids2) != 5 {
		t.Fatalf("two claims at once took %v and %v, want 5 each", ids1, ids2)
	}
	for _, a := range ids1 {
		for _, b := range ids2 {
			if a == b {
				t.Fatalf("two claims at once both took job %d", a)
			}
		}
	}
	// Another claim overtakes the first job's epoch, as a reclaim would.
	if _, err := tx1.Exec(ctx, fmt.Sprintf("UPDATE %s SET epoch = epoch + 1 WHERE id = $1", pgx.Identifier{schema, "jobs"}.Sanitize()), ids1[0]); err != nil {
		t.Fatal(err)
	}
	tag, err := tx1.Exec(ctx, completeSQL, ids1, epochs1)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 4 {
		t.Fatalf("the completion landed %d of 5, want 4: the job whose epoch was overtaken must be fenced", tag.RowsAffected())
	}
	_ = tx1.Rollback(ctx)
	_ = tx2.Rollback(ctx)

	if err := bench.Fill(ctx, pool, schema, 2*3*5); err != nil {
		t.Fatal(err)
	}
	r, err := bench.Batched(ctx, pgbench, pgtest.DSN(t), schema, 2, 5, 3)
	if err != nil {
		t.Fatal(err)
	}
	var done, atOne, total int
	if err := pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE epoch = 1 AND owner LIKE 'pgbench-%%'), count(*) FROM %s",
		pgx.Identifier{schema, "jobs"}.Sanitize())).Scan(&done, &atOne, &total); err != nil {
		t.Fatal(err)
	}
	if r.Jobs != 30 || done != 30 || atOne != 30 || total != 30 {
		t.Fatalf("pgbench's batched run: %d jobs; %d done and %d at epoch 1 of %d, want 30 of each", r.Jobs, done, atOne, total)
	}
	if _, err := bench.BatchedScript("Bad-Name", 5); err == nil {
		t.Fatal("a bad schema name was taken")
	}
	if _, err := bench.BatchedScript(schema, 0); err == nil {
		t.Fatal("batch 0 was taken")
	}
}

// TestSimplest_TheOneJobCycleIsFencedAndComplete: the hand-written one-job
// cycle pgbench runs claims with SKIP LOCKED, bumps the epoch, and its
// completion lands nothing once the epoch was overtaken; pgbench's run
// ends every job done at epoch 1.
func TestSimplest_TheOneJobCycleIsFencedAndComplete(t *testing.T) {
	ctx := context.Background()
	pgbench, pool, schema := simplestSetup(t)
	script, err := bench.SimplestScript(schema)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(script), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], `\gset`) {
		t.Fatalf("the script is not a claim and a completion:\n%s", script)
	}
	claimSQL := strings.NewReplacer(" \\gset", "", ":client_id", "'7'").Replace(lines[0])
	completeSQL := strings.NewReplacer(":id", "$1", ":epoch", "$2", ":client_id", "'7'", ";", "").Replace(lines[1])
	if err := bench.Fill(ctx, pool, schema, 3); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var id, epoch int64
	if err := tx.QueryRow(ctx, claimSQL).Scan(&id, &epoch); err != nil || epoch != 1 {
		t.Fatalf("claim: job %d at epoch %d, %v; want epoch 1", id, epoch, err)
	}
	// A second claim beside the first, which holds its row, takes another.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SET lock_timeout = '2s'"); err != nil {
		t.Fatal(err)
	}
	var other int64
	err = conn.QueryRow(ctx, claimSQL).Scan(&other, new(int64))
	_, _ = conn.Exec(ctx, "RESET lock_timeout")
	conn.Release()
	if err != nil || other == id {
		t.Fatalf("a second claim beside the held job %d: job %d, %v; want another job at once", id, other, err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET epoch = epoch + 1 WHERE id = $1", pgx.Identifier{schema, "jobs"}.Sanitize()), id); err != nil {
		t.Fatal(err)
	}
	if tag, err := tx.Exec(ctx, completeSQL, id, epoch); err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("a completion at an overtaken epoch: %v, %v rows; want none", err, tag.RowsAffected())
	}
	if tag, err := tx.Exec(ctx, completeSQL, id, epoch+1); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("a completion at the current epoch: %v, %v rows; want one", err, tag.RowsAffected())
	}
	_ = tx.Rollback(ctx)

	if err := bench.Fill(ctx, pool, schema, 4*5); err != nil {
		t.Fatal(err)
	}
	r, err := bench.Simplest(ctx, pgbench, pgtest.DSN(t), schema, 4, 5)
	if err != nil {
		t.Fatal(err)
	}
	var done, atOne int
	if err := pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE epoch = 1 AND owner LIKE 'pgbench-%%') FROM %s",
		pgx.Identifier{schema, "jobs"}.Sanitize())).Scan(&done, &atOne); err != nil {
		t.Fatal(err)
	}
	if r.Jobs != 20 || done != 20 || atOne != 20 {
		t.Fatalf("pgbench's one-job run: %d jobs; %d done and %d at epoch 1, want 20 of each", r.Jobs, done, atOne)
	}
}
