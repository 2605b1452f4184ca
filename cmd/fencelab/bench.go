package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/bench"
)

const benchSummary = `Benchmarks the fenced claim→complete cycle: N workers claim and complete
jobs until the queue is empty. In the same run, pgbench (which ships with
PostgreSQL) runs the very same two statements, as the database's own
ceiling; the ratio between the two is the figure to compare across machines.`

func benchCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", benchSummary, stderr)
	workers := fs.Int("workers", 8, "concurrent workers (and pgbench clients)")
	jobs := fs.Int("jobs", 20000, "jobs per round (rounded to a multiple of --workers)")
	rounds := fs.Int("rounds", 3, "rounds of each, alternating; the median is reported")
	schema := fs.String("schema", "fencing_bench", "the jobs schema (dropped and recreated)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *workers < 1 || *workers > 128:
		return usagef("fencelab bench: --workers %d must be between 1 and 128", *workers)
	case *jobs < *workers || *jobs > 10_000_000:
		return usagef("fencelab bench: --jobs %d must be between --workers and 10,000,000", *jobs)
	case *rounds < 1 || *rounds > 20:
		return usagef("fencelab bench: --rounds %d must be between 1 and 20", *rounds)
	}
	schemas := engine.Schemas{Jobs: *schema, Receiver: *schema + "_receiver"}
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
	if err := engine.Reset(ctx, pool, schemas); err != nil {
		return err
	}
	defer func() { _ = engine.Drop(context.WithoutCancel(ctx), pool, schemas) }()

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
		p, err := bench.PGBench(ctx, pgbench, dsn, *schema, *workers, perClient)
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

func median(rs []bench.Result) bench.Result {
	s := append([]bench.Result(nil), rs...)
	sort.Slice(s, func(i, j int) bool { return s[i].PerSecond() < s[j].PerSecond() })
	return s[len(s)/2]
}
