package bench_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/bench"
	"github.com/fencelab/fencelab/engine/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func setup(tb testing.TB) (*pgxpool.Pool, engine.Schemas) {
	tb.Helper()
	pool := pgtest.Pool(tb)
	s := engine.Schemas{Jobs: pgtest.Schema(tb), Receiver: pgtest.Schema(tb)}
	if err := engine.Setup(context.Background(), pool, s); err != nil {
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
	if _, err := bench.PGBench(ctx, pgbench, pgtest.DSN(t), s.Jobs, 4, 10); err != nil {
		t.Fatal(err)
	}
	if done, total := countDone(t, pool, s.Jobs); done != 40 || total != 40 {
		t.Fatalf("pgbench left %d of %d jobs done, want all 40", done, total)
	}
	script := bench.Script(s.Jobs)
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
		r, err := bench.PGBench(ctx, pgbench, pgtest.DSN(b), s.Jobs, workers, per)
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
