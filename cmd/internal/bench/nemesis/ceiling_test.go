package nemesis_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/cmd/internal/bench/nemesis"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
)

// TestCeiling_RunsThePoolsOwnBatchStatements proves the ceiling does the
// pool's work: pgbench, with the engine's own batch claim and fenced batch
// completion, leaves every job done at epoch 1 with the result it wrote.
func TestCeiling_RunsThePoolsOwnBatchStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	r, err := nemesis.Ceiling(ctx, db, pgtest.DSN(t), schema, 2, 10, 5)
	if err != nil {
		t.Fatal(err)
	}
	if r.Jobs != 100 || r.Done != 100 {
		t.Fatalf("the ceiling left %d of %d jobs done, want all 100", r.Done, r.Jobs)
	}
	var bad int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+schema+".jobs WHERE epoch <> 1 OR result <> '{}' OR owner NOT LIKE 'pgbench-%'").Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Errorf("%d jobs are not done once, by pgbench, at epoch 1", bad)
	}
	script, err := nemesis.CeilingScript(ctx, db, schema, 500)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FOR UPDATE SKIP LOCKED", "LIMIT 500", "epoch + 1,", `\gset`,
		":ids::bigint[]", ":owners::text[]", ":epochs::bigint[]", "seen.row_epoch = seen.held_epoch", "seen.row_owner = seen.held_owner"} {
		if !strings.Contains(script, want) {
			t.Errorf("the ceiling's script lacks %q:\n%s", want, script)
		}
	}
}
