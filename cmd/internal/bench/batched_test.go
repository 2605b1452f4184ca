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
)

// TestBatched_TheSimplestFencedCycleIsFencedAndComplete: the hand-written
// batched cycle pgbench runs is a real fenced queue, not a shortcut: two
// claims at once take disjoint jobs without waiting, a completion whose
// epoch was overtaken lands nothing, and pgbench's run ends every job done
// at epoch 1.
func TestBatched_TheSimplestFencedCycleIsFencedAndComplete(t *testing.T) {
	pgbench, err := bench.FindPGBench()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	if err := engine.SetupQueue(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
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
