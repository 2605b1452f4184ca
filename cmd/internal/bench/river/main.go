// Command river measures fencelab's production path against River in one
// run, on one Postgres: the same number of no-op jobs, worked to the end,
// by River at its own benchmark's tuning (FetchCooldown 2 ms,
// FetchPollInterval 20 ms, MaxWorkers 2,000; the settings of River's
// cmd/river bench) and by engine.WorkerPool with every completion fenced,
// rounds alternating, medians compared. It is a module of its own so that
// River is a dependency of this benchmark only, never of the product.
//
//	cd cmd/internal/bench/river && go run . [--jobs 20000] [--workers 2000] [--rounds 3]
//
// Its nemesis mode (nemesis.go) runs both in worker processes that are
// frozen at random, and counts the zombie completions each lets through:
//
//	cd cmd/internal/bench/river && go run . nemesis [--jobs 5000] [--workers 4] [--lease 300ms] [--rounds 2] [--seed S]
//
// With no DATABASE_URL it starts a throwaway cluster (fsync off, a Unix
// socket), as every fencelab benchmark does.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/postgres/pgcluster"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "nemesis" {
		if err := nemesisMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "river bench nemesis:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "river bench:", err)
		os.Exit(1)
	}
}

func run() error {
	jobs := flag.Int("jobs", 20_000, "jobs per round")
	workers := flag.Int("workers", 2000, "River's MaxWorkers, and the pool's concurrency")
	rounds := flag.Int("rounds", 3, "rounds of each, alternating")
	batch := flag.Int("batch", 500, "the pool's batch size")
	flag.Parse()
	if *jobs < 1 || *jobs > 10_000_000 || *workers < 1 || *workers > 10_000 || *rounds < 1 || *rounds > 20 {
		return errors.New("--jobs 1..10000000, --workers 1..10000, --rounds 1..20")
	}
	ctx := context.Background()
	dsn, stop, err := pgcluster.Open(ctx, os.Getenv, pgcluster.Options{})
	if err != nil {
		return err
	}
	defer stop()                       //nolint:errcheck
	pool, err := pgxpool.New(ctx, dsn) // the same pool settings for both
	if err != nil {
		return err
	}
	defer pool.Close()

	driver := riverpgxv5.New(pool)
	mig, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river's migrations: %w", err)
	}
	const schema = "fencelab_bench_fast"
	if err := engine.DropQueue(ctx, pool, schema); err != nil {
		return err
	}
	if err := engine.SetupQueue(ctx, pool, schema); err != nil {
		return err
	}
	defer engine.DropQueue(ctx, pool, schema) //nolint:errcheck

	var riverRates, fastRates []float64
	for r := range *rounds {
		rr, err := riverRound(ctx, pool, *jobs, *workers)
		if err != nil {
			return err
		}
		fr, err := fastRound(ctx, pool, schema, *jobs, *workers, *batch)
		if err != nil {
			return err
		}
		fmt.Printf("round %d: River %8.0f jobs/s   fencelab (every completion fenced) %8.0f jobs/s\n", r+1, rr, fr)
		riverRates, fastRates = append(riverRates, rr), append(fastRates, fr)
	}
	rm, fm := median(riverRates), median(fastRates)
	fmt.Printf("River %s, tuned (FetchCooldown 2ms, FetchPollInterval 20ms, MaxWorkers %d)  %8.0f jobs/s\n", riverVersion, *workers, rm)
	fmt.Printf("fencelab engine.WorkerPool, concurrency %d, batch %d, every completion fenced  %8.0f jobs/s\n", *workers, *batch, fm)
	fmt.Printf("ratio: fencelab runs at %.2f× River tuned (median of %d rounds, %d jobs each)\n", fm/rm, *rounds, *jobs)
	return nil
}

// riverVersion is the River this module requires.
const riverVersion = "v0.51.2"

type noopArgs struct {
	Num int `json:"num"`
}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverRound inserts n jobs, starts a tuned River client and times it from
// its start to its last completion.
func riverRound(ctx context.Context, pool *pgxpool.Pool, n, workers int) (float64, error) {
	if _, err := pool.Exec(ctx, "TRUNCATE river_job"); err != nil {
		return 0, err
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, noopWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return 0, err
	}
	params := make([]river.InsertManyParams, 0, 5000)
	for i := 0; i < n; i += 5000 {
		params = params[:0]
		for j := i; j < min(n, i+5000); j++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{Num: j}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return 0, err
		}
	}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancel()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	var last time.Time
	deadline := time.After(5 * time.Minute)
	for got := 0; got < n; {
		select {
		case e := <-events:
			if e == nil {
				return 0, errors.New("river's subscription closed")
			}
			got++
			last = time.Now()
		case <-deadline:
			return 0, fmt.Errorf("river worked fewer than %d jobs in 5 minutes", n)
		}
	}
	if err := client.Stop(ctx); err != nil {
		return 0, err
	}
	return float64(n) / last.Sub(start).Seconds(), nil
}

// fastRound fills the queue with n jobs and times engine.WorkerPool from
// its start to the statement that recorded its last completion.
func fastRound(ctx context.Context, pool *pgxpool.Pool, schema string, n, workers, batch int) (float64, error) {
	for _, st := range judge.JobsFill(schema, n) {
		if _, err := pool.Exec(ctx, st.SQL, st.Args...); err != nil {
			return 0, err
		}
	}
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: schema})
	if err != nil {
		return 0, err
	}
	var landed, fenced atomic.Int64
	all := make(chan struct{})
	var last atomic.Int64
	p, err := engine.NewWorkerPool(engine.WorkerPoolConfig{Queue: q, Owner: "bench-pool", Concurrency: workers, BatchSize: batch,
		Lease: time.Minute, PollInterval: 20 * time.Millisecond,
		Handler: func(context.Context, engine.Claim) ([]byte, error) { return nil, nil },
		OnRecorded: func(l, f int) {
			fenced.Add(int64(f))
			if landed.Add(int64(l)) == int64(n) {
				last.Store(time.Now().UnixNano())
				close(all)
			}
		}})
	if err != nil {
		return 0, err
	}
	rctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- p.Run(rctx) }()
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		stop()
		return 0, fmt.Errorf("the pool worked %d of %d jobs in 5 minutes", landed.Load(), n)
	}
	stop()
	if err := <-errc; err != nil {
		return 0, err
	}
	if fenced.Load() != 0 {
		return 0, fmt.Errorf("%d completions were fenced in a benchmark with one owner", fenced.Load())
	}
	return float64(n) / time.Unix(0, last.Load()).Sub(start).Seconds(), nil
}
