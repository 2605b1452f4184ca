package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"

	"github.com/fencelab/fencelab/cmd/internal/bench"
	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/judge"
)

const benchSummary = `Benchmarks the fenced claim→complete cycle: N workers claim and complete
jobs until the queue is empty. In the same run, pgbench (which ships with
PostgreSQL) runs the very same two statements, as the database's own
ceiling; the ratio between the two is the figure to compare across machines.

With --fast it measures the production path instead: engine.WorkerPool,
--workers handlers at once (default 2000), claims, renewals and completions
a batch of --batch at a time, every completion fenced, on a queue without
the lab's history trigger; beside it, in the same run on the same schema,
the one-job cycle, pgbench with its statements and pgbench with the
simplest one-job fenced cycle (8 workers each), and pgbench with the
simplest batched fenced cycle (4 clients, batches of 50 and 500).`

func benchCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", benchSummary, stderr)
	workers := fs.Int("workers", 8, "concurrent workers and pgbench clients; with --fast, the pool's handlers at once (default there 2000)")
	fast := fs.Bool("fast", false, "measure the production path: engine.WorkerPool, batched and fenced")
	batch := fs.Int("batch", 500, "with --fast: the pool's batch size")
	jobs := fs.Int("jobs", 20000, "jobs per round (rounded to a multiple of --workers)")
	rounds := fs.Int("rounds", 3, "rounds of each, alternating; the median is reported")
	schema := fs.String("schema", "fencing_bench", "the jobs schema (dropped and recreated)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *rounds < 1 || *rounds > 20 {
		return usagef("fencelab bench: --rounds %d must be between 1 and 20", *rounds)
	}
	if *fast {
		if !set["workers"] {
			*workers = 2000
		}
		switch {
		case *workers < 1 || *workers > 100_000:
			return usagef("fencelab bench: --workers %d must be between 1 and 100000 with --fast", *workers)
		case *batch < 1 || *batch > engine.MaxBatch:
			return usagef("fencelab bench: --batch %d must be between 1 and %d", *batch, engine.MaxBatch)
		case *jobs < 1 || *jobs > 10_000_000:
			return usagef("fencelab bench: --jobs %d must be between 1 and 10,000,000", *jobs)
		}
		return benchFast(ctx, getenv, stdout, stderr, *schema, *workers, *batch, *jobs, *rounds, *asJSON)
	}
	switch {
	case set["batch"]:
		return usagef("fencelab bench: --batch is the worker pool's: it needs --fast")
	case *workers < 1 || *workers > 128:
		return usagef("fencelab bench: --workers %d must be between 1 and 128", *workers)
	case *jobs < *workers || *jobs > 10_000_000:
		return usagef("fencelab bench: --jobs %d must be between --workers and 10,000,000", *jobs)
	}
	schemas := judge.Schemas{Jobs: *schema, Receiver: *schema + "_receiver"}
	if err := schemas.Validate(); err != nil {
		return usagef("fencelab bench: --schema: %v", err)
	}
	pgbench, err := bench.FindPGBench()
	if err != nil {
		return err
	}
	perClient := *jobs / *workers
	total := perClient * *workers

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dsn, pool, closeDB, err := openDB(ctx, getenv, log)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := judge.Reset(ctx, pool, schemas); err != nil {
		return err
	}
	defer func() { _ = judge.Drop(context.WithoutCancel(ctx), pool, schemas) }()

	var ours, theirs []bench.Result
	for range *rounds {
		if err := bench.Fill(ctx, pool, *schema, total); err != nil {
			return err
		}
		r, err := bench.Cycle(ctx, pool, *schema, *workers, total)
		if err != nil {
			return err
		}
		ours = append(ours, r)
		if err := bench.Fill(ctx, pool, *schema, total); err != nil {
			return err
		}
		p, err := bench.PGBench(ctx, pool, pgbench, dsn, *schema, *workers, perClient)
		if err != nil {
			return err
		}
		theirs = append(theirs, p)
	}
	o, t := median(ours), median(theirs)
	ratio := o.PerSecond() / t.PerSecond()
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{
			"workers": *workers, "jobs": total, "rounds": *rounds,
			"engine_jobs_per_s": o.PerSecond(), "pgbench_jobs_per_s": t.PerSecond(), "ratio": ratio,
		})
	}
	fmt.Fprintln(stdout, o)
	fmt.Fprintln(stdout, t)
	fmt.Fprintf(stdout, "ratio: the engine runs at %.2f× the database's own ceiling for the same statements (median of %d rounds)\n", ratio, *rounds)
	return nil
}

// benchFast measures the worker pool, and beside it in the same run the
// one-job cycle, pgbench with its statements and pgbench with the simplest
// one-job fenced cycle (8 workers each), and pgbench with the simplest
// batched fenced cycle (4 clients, batches of 50 and 500), all on one
// queue schema with no history trigger.
func benchFast(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer, schema string, workers, batch, jobs, rounds int, asJSON bool) error {
	if err := engine.ValidateSchemaName(schema); err != nil {
		return usagef("fencelab bench: --schema: %v", err)
	}
	pgbench, err := bench.FindPGBench()
	if err != nil {
		return err
	}
	const oneJobWorkers = 8
	// The simplest batched fenced cycle: 4 pgbench clients, at a batch of
	// 50 and of 500, the better one counted.
	const batchedClients = 4
	batchedSizes := []int{50, 500}
	oneJobs := max(oneJobWorkers, jobs/oneJobWorkers*oneJobWorkers)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dsn, pool, closeDB, err := openDBSized(ctx, getenv, log, 0, 20)
	if err != nil {
		return err
	}
	defer closeDB()
	_ = engine.DropQueue(ctx, pool, schema)
	if err := engine.SetupQueue(ctx, pool, schema); err != nil {
		return err
	}
	defer func() { _ = engine.DropQueue(context.WithoutCancel(ctx), pool, schema) }()
	var fastRs, oneRs, pgRs, simplestRs []bench.Result
	batchedRs := map[int][]bench.Result{}
	for range rounds {
		if err := bench.Fill(ctx, pool, schema, jobs); err != nil {
			return err
		}
		f, err := bench.Fast(ctx, pool, schema, workers, batch, jobs)
		if err != nil {
			return err
		}
		if err := bench.Fill(ctx, pool, schema, oneJobs); err != nil {
			return err
		}
		o, err := bench.Cycle(ctx, pool, schema, oneJobWorkers, oneJobs)
		if err != nil {
			return err
		}
		if err := bench.Fill(ctx, pool, schema, oneJobs); err != nil {
			return err
		}
		p, err := bench.PGBench(ctx, pool, pgbench, dsn, schema, oneJobWorkers, oneJobs/oneJobWorkers)
		if err != nil {
			return err
		}
		if err := bench.Fill(ctx, pool, schema, oneJobs); err != nil {
			return err
		}
		sp, err := bench.Simplest(ctx, pgbench, dsn, schema, oneJobWorkers, oneJobs/oneJobWorkers)
		if err != nil {
			return err
		}
		simplestRs = append(simplestRs, sp)
		for _, b := range batchedSizes {
			per := max(1, jobs/(batchedClients*b))
			if err := bench.Fill(ctx, pool, schema, batchedClients*b*per); err != nil {
				return err
			}
			r, err := bench.Batched(ctx, pgbench, dsn, schema, batchedClients, b, per)
			if err != nil {
				return err
			}
			batchedRs[b] = append(batchedRs[b], r)
		}
		fastRs, oneRs, pgRs = append(fastRs, f), append(oneRs, o), append(pgRs, p)
	}
	f, o, p, sp := median(fastRs), median(oneRs), median(pgRs), median(simplestRs)
	// The simplest batched fenced cycle at its better batch size.
	var bb bench.Result
	bestBatch := 0
	for _, b := range batchedSizes {
		if m := median(batchedRs[b]); m.PerSecond() > bb.PerSecond() {
			bb, bestBatch = m, b
		}
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{
			"workers": workers, "batch": batch, "jobs": jobs, "rounds": rounds,
			"fast_jobs_per_s": f.PerSecond(), "one_job_jobs_per_s": o.PerSecond(), "pgbench_jobs_per_s": p.PerSecond(),
			"fast_over_one_job": f.PerSecond() / o.PerSecond(), "fast_over_pgbench": f.PerSecond() / p.PerSecond(),
			"batched_jobs_per_s": bb.PerSecond(), "batched_batch": bestBatch,
			"fast_over_batched":   f.PerSecond() / bb.PerSecond(),
			"simplest_jobs_per_s": sp.PerSecond(), "one_job_over_simplest": o.PerSecond() / sp.PerSecond(),
		})
	}
	fmt.Fprintln(stdout, f)
	fmt.Fprintln(stdout, o)
	fmt.Fprintln(stdout, p)
	fmt.Fprintln(stdout, sp)
	for _, b := range batchedSizes {
		fmt.Fprintln(stdout, median(batchedRs[b]))
	}
	fmt.Fprintf(stdout, "ratio: the worker pool runs at %.1f× the one-job cycle and %.1f× pgbench's one job per transaction (median of %d rounds; no history trigger)\n",
		f.PerSecond()/o.PerSecond(), f.PerSecond()/p.PerSecond(), rounds)
	fmt.Fprintf(stdout, "ratio: the one-job cycle runs at %.2f× pgbench with its own statements, and at %.2f× pgbench's simplest one-job fenced cycle\n",
		o.PerSecond()/p.PerSecond(), o.PerSecond()/sp.PerSecond())
	fmt.Fprintf(stdout, "ratio: the worker pool runs at %.2f× pgbench's simplest batched fenced cycle at its better batch (%d, %d clients)\n",
		f.PerSecond()/bb.PerSecond(), bestBatch, bb.Workers)
	fmt.Fprintln(stdout, "River at its own tuning, in the same kind of run: cd cmd/internal/bench/river && go run .")
	return nil
}

func median(rs []bench.Result) bench.Result {
	s := append([]bench.Result(nil), rs...)
	sort.Slice(s, func(i, j int) bool { return s[i].PerSecond() < s[j].PerSecond() })
	return s[len(s)/2]
}
