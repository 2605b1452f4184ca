package nemesis_test

import (
	"context"
	"testing"

	"github.com/fencelab/fencelab/cmd/internal/bench/nemesis"
	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
)

// TestJudge_CountsEveryKindOfZombie writes by hand the rows a run can
// leave — a clean job, a reclaimed one with a zombie's fenced and external
// effects, one holding a zombie's result, one stuck — and checks each
// count of the verdict, so that a verdict query that misses a zombie fails
// here, not only in a run that happens to make one.
func TestJudge_CountsEveryKindOfZombie(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	if err := engine.SetupQueue(ctx, db, schema); err != nil {
		t.Fatal(err)
	}
	if err := nemesis.SetupEffects(ctx, db, schema); err != nil {
		t.Fatal(err)
	}
	if err := nemesis.Insert(ctx, db, schema, 4, 25); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	jobs := schema + ".jobs"
	done := "UPDATE " + jobs + " SET status = 'done', epoch = $2, owner = $3, result = jsonb_build_object('epoch', $4::bigint, 'worker', $5::text) WHERE id = $1"
	exec(done, 1, 1, "w1", 1, "w1") // clean
	exec(done, 2, 2, "w2", 2, "w2") // reclaimed from w1, whose effects landed too
	exec(done, 3, 2, "w2", 1, "w1") // reclaimed, and holding w1's (the zombie's) result
	exec("UPDATE " + jobs + " SET status = 'running', epoch = 1, owner = 'w1' WHERE id = 4")
	effect := nemesis.EffectInsert(schema)
	for _, e := range []struct {
		job, epoch int64
		worker     string
		kind       string
	}{
		{1, 1, "w1", nemesis.EffectFenced}, {1, 1, "w1", nemesis.EffectExternal},
		{2, 1, "w1", nemesis.EffectFenced}, {2, 2, "w2", nemesis.EffectFenced}, // a zombie completion, and job 2 not once
		{2, 1, "w1", nemesis.EffectExternal}, {2, 2, "w2", nemesis.EffectExternal}, // a stale effect
		{3, 1, "w1", nemesis.EffectFenced}, {3, 2, "w2", nemesis.EffectExternal}, // a zombie completion
		{3, 2, "w1", nemesis.EffectFenced},   // the final epoch, but not the final owner's: a zombie too
		{4, 2, "w9", nemesis.EffectExternal}, // newer than its job: cannot happen
	} {
		exec(effect, e.job, e.epoch, e.worker, e.kind)
	}
	v, err := nemesis.Judge(ctx, db, schema)
	if err != nil {
		t.Fatal(err)
	}
	want := nemesis.Verdict{Jobs: 4, Done: 3, Unfinished: 1, Reclaimed: 2, MaxEpoch: 2, WrongResult: 1,
		FencedEffects: 5, ZombieCompletions: 3, NotOnce: 2, ExternalEffects: 5, StaleEffects: 1, FutureEffects: 1, Last: v.Last}
	if v != want {
		t.Errorf("the verdict is\n%+v\nwant\n%+v", v, want)
	}
}
