package bench_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/cmd/internal/bench"
	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func setup(tb testing.TB) (*pgxpool.Pool, judge.Schemas) {
	tb.Helper()
	pool := pgtest.Pool(tb)
	s := judge.Schemas{Jobs: pgtest.Schema(tb), Receiver: pgtest.Schema(tb)}
	if err := judge.Setup(context.Background(), pool, s); err != nil {
		tb.Fatal(err)
	}
	return pool, s
}

func countDone(tb testing.TB, pool *pgxpool.Pool, schema string) (done, total int) {
	tb.Helper()
	err := pool.QueryRow(context.Background(), fmt.Sprintf("SELECT count(*) FILTER (WHERE status = 'done'), count(*) FROM %s.jobs",
		pgx.Identifier{schema}.Sanitize())).Scan(&done, &total)
	if err != nil {
		tb.Fatal(err)
	}
	return done, total
}

// TestPGBench_RunsTheEnginesOwnStatements proves the pgbench side of the
// benchmark does the same work: every job ends done, at epoch 1.
func TestPGBench_RunsTheEnginesOwnStatements(t *testing.T) {
	pgbench, err := bench.FindPGBench()
	if err != nil {
		t.Fatal(err)
	}
	pool, s := setup(t)
	ctx := context.Background()
	if err := bench.Fill(ctx, pool, s.Jobs, 40); err != nil {
		t.Fatal(err)
	}
	if _, err := bench.PGBench(ctx, pool, pgbench, pgtest.DSN(t), s.Jobs, 4, 10); err != nil {
		t.Fatal(err)
	}
	if done, total := countDone(t, pool, s.Jobs); done != 40 || total != 40 {
		t.Fatalf("pgbench left %d of %d jobs done, want all 40", done, total)
	}
	script, err := bench.Script(ctx, pool, s.Jobs)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FOR UPDATE SKIP LOCKED", "epoch = epoch + 1", "AND owner = 'pgbench-' || :client_id", "AND epoch = :epoch", `\gset`} {
		if !strings.Contains(script, want) {
			t.Errorf("the pgbench script lacks %q:\n%s", want, script)
		}
	}
}

func TestCycle_CompletesEveryJob(t *testing.T) {
	pool, s := setup(t)
	ctx := context.Background()
	if err := bench.Fill(ctx, pool, s.Jobs, 100); err != nil {
		t.Fatal(err)
	}
	r, err := bench.Cycle(ctx, pool, s.Jobs, 4, 100)
	if err != nil {
		t.Fatal(err)
	}
	if done, _ := countDone(t, pool, s.Jobs); done != 100 || r.Jobs != 100 {
		t.Fatalf("%d jobs done (%+v), want 100", done, r)
	}
}

// BenchmarkCycle measures the fenced claim→complete cycle with 8 workers,
// and the same statements through pgbench, in the same run: compare the
// two jobs/s figures (benchstat, or `fencelab bench` for the ratio).
func BenchmarkCycle(b *testing.B) {
	pool, s := setup(b)
	ctx := context.Background()
	const workers = 8
	b.Run("engine", func(b *testing.B) {
		n := max(b.N, workers)
		if err := bench.Fill(ctx, pool, s.Jobs, n); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		r, err := bench.Cycle(ctx, pool, s.Jobs, workers, n)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r.PerSecond(), "jobs/s")
	})
	b.Run("pgbench", func(b *testing.B) {
		pgbench, err := bench.FindPGBench()
		if err != nil {
			b.Fatal(err)
		}
		per := max(b.N/workers, 1)
		if err := bench.Fill(ctx, pool, s.Jobs, per*workers); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		r, err := bench.PGBench(ctx, pool, pgbench, pgtest.DSN(b), s.Jobs, workers, per)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r.PerSecond(), "jobs/s")
	})
}

// BenchmarkClaim_FinishedJobs measures one claim→complete with 10 and with
// 200,000 finished jobs in the table: the two must cost the same.
func BenchmarkClaim_FinishedJobs(b *testing.B) {
	for _, finished := range []int{10, 200_000} {
		b.Run(fmt.Sprint("finished=", finished), func(b *testing.B) {
			pool, s := setup(b)
			ctx := context.Background()
			t := pgx.Identifier{s.Jobs, "jobs"}.Sanitize()
			if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (payload, status, epoch, attempts, result)
				SELECT '{}', 'done', 1, 1, '{}' FROM generate_series(1, %d)`, t, finished)); err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (payload) SELECT '{}' FROM generate_series(1, %d)`, t, b.N)); err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, "ANALYZE "+t); err != nil {
				b.Fatal(err)
			}
			q, _ := engine.NewQueue(pool, engine.QueueConfig{Schema: s.Jobs})
			b.ResetTimer()
			for range b.N {
				c, err := q.Claim(ctx, "bench", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := q.Complete(ctx, c, []byte(`{}`)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The cost curves of the production path: engine.WorkerPool's jobs/s as
// one thing changes at a time — how many handlers run at once, how many
// jobs go to a statement, how many finished jobs the table already holds.
// Each point works poolJobs jobs a round on a queue schema of its own
// (engine.SetupQueue: no history trigger), and each curve first measures,
// in the same run, the one-job cycle at 8 workers: every point reports its
// jobs/s, its ratio to the curve's first point (x-first) and its ratio to
// that cycle (x-cycle8), since only ratios survive a shared machine. With
// -count, each sub-benchmark runs count times in a row: x-first is then
// against the first point's first round and x-cycle8 against the cycle's
// last, so BENCHMARKS.md takes its ratios from the medians instead.
//
//	go test ./cmd/internal/bench/ -run '^$' -bench 'Pool_' -benchtime 1x -count 3

const (
	poolJobs     = 20_000 // jobs per round at each point
	baselineJobs = 10_000 // jobs of the one-job cycle the curve is measured against
)

// curve holds one curve's baselines, measured by its first sub-benchmarks
// and read by the later ones; sub-benchmarks run one at a time.
type curve struct {
	cycle, first float64 // jobs/s; 0 until measured
}

// queue makes a queue schema of its own for one sub-benchmark and drops it
// when the sub-benchmark ends, unless it failed: then pgtest keeps it and
// logs where.
func queue(b *testing.B, pool *pgxpool.Pool) string {
	b.Helper()
	ctx := context.Background()
	schema := pgtest.Schema(b)
	if err := engine.SetupQueue(ctx, pool, schema); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if b.Failed() {
			return
		}
		if err := engine.DropQueue(context.Background(), pool, schema); err != nil {
			b.Error(err)
		}
	})
	return schema
}

// addPending puts n pending jobs in the table beside what it holds, with
// the fill's own statements less its TRUNCATE, and analyzes it.
func addPending(ctx context.Context, pool *pgxpool.Pool, schema string, n int) error {
	for _, st := range judge.JobsFill(schema, n) {
		if st.Name == "JobsTruncate" {
			continue
		}
		if _, err := pool.Exec(ctx, st.SQL, st.Args...); err != nil {
			return fmt.Errorf("add pending: %s: %w", st.Name, err)
		}
	}
	return nil
}

// baseline measures the one-job claim→complete cycle with 8 workers on a
// queue of its own, as the curve's yardstick.
func (c *curve) baseline(b *testing.B) {
	pool := pgtest.Pool(b)
	schema := queue(b, pool)
	ctx := context.Background()
	var jobs int
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		if err := bench.Fill(ctx, pool, schema, baselineJobs); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		r, err := bench.Cycle(ctx, pool, schema, 8, baselineJobs)
		if err != nil {
			b.Fatal(err)
		}
		jobs, elapsed = jobs+r.Jobs, elapsed+r.Elapsed
	}
	c.cycle = float64(jobs) / elapsed.Seconds()
	b.ReportMetric(c.cycle, "jobs/s")
}

// point measures the worker pool at one point of the curve: finished done
// jobs are put in the table once, then each round adds poolJobs pending
// ones (outside the timer) and works them. A later round therefore finds
// the earlier rounds' jobs finished too; -benchtime 1x gives each point
// exactly its finished count.
func (c *curve) point(b *testing.B, concurrency, batch, finished int) {
	pool := pgtest.Pool(b)
	schema := queue(b, pool)
	ctx := context.Background()
	start := time.Now()
	if err := bench.FillFinished(ctx, pool, schema, finished, 0); err != nil {
		b.Fatal(err)
	}
	if finished > 0 {
		b.Logf("%d finished jobs put in the table in %v", finished, time.Since(start).Round(time.Millisecond))
	}
	var jobs int
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		if err := addPending(ctx, pool, schema, poolJobs); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		r, err := bench.Fast(ctx, pool, schema, concurrency, batch, poolJobs)
		if err != nil {
			b.Fatal(err)
		}
		jobs, elapsed = jobs+r.Jobs, elapsed+r.Elapsed
	}
	perSecond := float64(jobs) / elapsed.Seconds()
	if c.first == 0 {
		c.first = perSecond
	}
	b.ReportMetric(perSecond, "jobs/s")
	b.ReportMetric(perSecond/c.first, "x-first")
	if c.cycle > 0 {
		b.ReportMetric(perSecond/c.cycle, "x-cycle8")
	}
}

// BenchmarkPool_Workers is the pool's jobs/s against its concurrency, at
// batch 500. Below 500 handlers the batch is the concurrency: the pool
// claims only as many jobs as it has free handlers for, and completes only
// as many as have finished.
func BenchmarkPool_Workers(b *testing.B) {
	var c curve
	b.Run("baseline=cycle-8", c.baseline)
	for _, n := range []int{8, 50, 200, 1000, 2000} {
		b.Run(fmt.Sprint("workers=", n), func(b *testing.B) { c.point(b, n, 500, 0) })
	}
}

// BenchmarkPool_Batch is the pool's jobs/s against its batch size — the
// jobs of one claim, renewal or completion statement — at 2000 handlers.
func BenchmarkPool_Batch(b *testing.B) {
	var c curve
	b.Run("baseline=cycle-8", c.baseline)
	for _, n := range []int{1, 10, 50, 200, 500, 1000} {
		b.Run(fmt.Sprint("batch=", n), func(b *testing.B) { c.point(b, 2000, n, 0) })
	}
}

// BenchmarkPool_Finished is the pool's jobs/s against the finished jobs
// already in the table, at 2000 handlers and batch 500: the claim reads
// the partial index jobs_claimable, which holds none of them.
func BenchmarkPool_Finished(b *testing.B) {
	var c curve
	b.Run("baseline=cycle-8", c.baseline)
	for _, n := range []int{0, 10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprint("finished=", n), func(b *testing.B) { c.point(b, 2000, 500, n) })
	}
}
