package nemesis_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelab/fencelab/cmd/internal/bench/nemesis"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
)

// BenchmarkNemesis_FencedPool measures the fenced pool in 4 worker
// processes under the nemesis (jobs/s, and the zombie completions that
// landed: 0), and beside it, in the same run, the same pool with no
// nemesis, the pool with no nemesis and no effect rows (10× the jobs), and
// the ceiling of its own batch statements through pgbench (10× the jobs),
// whose x-calm and x-bare are those two pools' jobs/s ÷ the ceiling's.
//
//	go test ./cmd/internal/bench/nemesis/ -run '^$' -bench Nemesis -benchtime 1x -nemesis.jobs 5000
func BenchmarkNemesis_FencedPool(b *testing.B) {
	ctx := context.Background()
	round := func(b *testing.B, jobs int, noEffects bool, schedule func() *nemesis.Schedule) float64 {
		db := pgtest.Pool(b)
		run := poolRun(b, jobs, nil, 0)
		run.Worker.NoEffects = noEffects
		var done, zombies, reclaimed, stale int
		var elapsed time.Duration
		for b.Loop() {
			run.Nemesis = schedule()
			o, err := run.Run(ctx, db)
			if err != nil {
				b.Fatal(err)
			}
			if o.Unfinished != 0 || o.Done != run.Jobs {
				b.Fatalf("%d of %d jobs done, %d unfinished", o.Done, run.Jobs, o.Unfinished)
			}
			done, elapsed = done+o.Done, elapsed+o.Elapsed
			zombies, reclaimed, stale = zombies+o.ZombieCompletions, reclaimed+o.Reclaimed, stale+o.StaleEffects
		}
		rate := float64(done) / elapsed.Seconds()
		b.ReportMetric(rate, "jobs/s")
		b.ReportMetric(float64(zombies), "zombie-completions")
		b.ReportMetric(float64(reclaimed), "reclaimed")
		b.ReportMetric(float64(stale), "stale-effects")
		return rate
	}
	b.Run("nemesis", func(b *testing.B) {
		s := seed(b)
		round(b, *jobsFlag, false, func() *nemesis.Schedule { s++; return &nemesis.Schedule{Lease: lease, Seed: s - 1} })
	})
	none := func() *nemesis.Schedule { return nil }
	var calm, bare float64
	b.Run("calm", func(b *testing.B) { calm = round(b, *jobsFlag, false, none) })
	b.Run("bare", func(b *testing.B) { bare = round(b, 10**jobsFlag, true, none) })
	b.Run("ceiling", func(b *testing.B) {
		db := pgtest.Pool(b)
		schema := pgtest.Schema(b)
		per := max(10**jobsFlag/(workers*batch), 1)
		var jobs int
		var elapsed time.Duration
		for b.Loop() {
			r, err := nemesis.Ceiling(ctx, db, pgtest.DSN(b), schema, workers, batch, per)
			if err != nil {
				b.Fatal(err)
			}
			if r.Done != r.Jobs {
				b.Fatalf("the ceiling left %d of %d jobs done", r.Done, r.Jobs)
			}
			jobs, elapsed = jobs+r.Done, elapsed+r.Elapsed
		}
		rate := float64(jobs) / elapsed.Seconds()
		b.ReportMetric(rate, "jobs/s")
		if calm > 0 && bare > 0 {
			b.ReportMetric(calm/rate, "x-calm")
			b.ReportMetric(bare/rate, "x-bare")
		}
	})
}
