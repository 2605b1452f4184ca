package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/fencelab/fencelab/cmd/internal/bench/nemesis"
	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/postgres/pgcluster"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

// The nemesis mode: in one run, on one Postgres, fencelab's worker pool
// and River each work the same jobs in worker processes (this binary,
// re-executed) under the same nemesis schedule (same seed), rounds
// alternating, every verdict read from SQL once the workers have stopped.
// Beside them, in the same run: the pool without the nemesis, and the
// ceiling — pgbench running the pool's own batch statements.
//
//	cd cmd/internal/bench/river && go run . nemesis [--jobs 5000 --workers 4 --lease 300ms --rounds 2 --seed S]

// The schemas of the nemesis mode, each dropped at its end.
const (
	poolSchema    = "fencelab_nemesis"
	riverSchema   = "fencelab_nemesis_river"
	ceilingSchema = "fencelab_nemesis_ceiling"
)

type nemesisFlags struct {
	jobs, bareJobs, workers, concurrency, batch, rounds int
	lease, rescueEvery                                  time.Duration
	seed                                                uint64
}

func nemesisMain(args []string) error {
	fs := flag.NewFlagSet("nemesis", flag.ContinueOnError)
	var f nemesisFlags
	fs.IntVar(&f.jobs, "jobs", 5000, "jobs per run")
	fs.IntVar(&f.bareJobs, "bare-jobs", 50_000, "jobs of the ceiling's run, and of the pool's run with no effect rows (a run of 5000 jobs at the ceiling lasts a tenth of a second)")
	fs.IntVar(&f.workers, "workers", 4, "worker processes")
	fs.IntVar(&f.concurrency, "concurrency", 50, "jobs in flight per worker process: the pool's Concurrency, River's MaxWorkers")
	fs.IntVar(&f.batch, "batch", 50, "the pool's batch size, and the ceiling's")
	fs.IntVar(&f.rounds, "rounds", 2, "rounds, each running every queue once")
	fs.DurationVar(&f.lease, "lease", 300*time.Millisecond, "the pool's lease; River's JobTimeout and RescueStuckJobsAfter")
	fs.DurationVar(&f.rescueEvery, "rescue-every", 100*time.Millisecond, "how often River's rescue and scheduling run")
	fs.Uint64Var(&f.seed, "seed", 0, "the nemesis's seed for round 1 (round r uses seed+r-1); 0: a new one")
	role := fs.String("worker", "", "run as a worker process: fencelab or river (the harness's own re-execution)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch *role {
	case "":
	case "fencelab":
		nemesis.WorkerMain() // exits
		return fmt.Errorf("a fencelab worker needs %s", nemesis.WorkerEnv)
	case "river":
		return riverWorkerMain(context.Background(), os.Stdin, os.Stdout)
	default:
		return fmt.Errorf("--worker %q: want fencelab or river", *role)
	}
	if f.jobs < 1 || f.jobs > 1_000_000 || f.bareJobs < 1 || f.bareJobs > 10_000_000 || f.workers < 1 || f.workers > 32 || f.concurrency < 1 || f.concurrency > 1000 ||
		f.batch < 1 || f.batch > engine.MaxBatch || f.rounds < 1 || f.rounds > 20 || f.lease < 50*time.Millisecond || f.rescueEvery <= 0 {
		return errors.New("--jobs 1..1000000, --workers 1..32, --concurrency 1..1000, --batch 1..10000, --rounds 1..20, --lease ≥ 50ms")
	}
	if f.seed == 0 {
		f.seed = uint64(time.Now().UnixNano())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runNemesis(ctx, f)
}

// row is one run's figures.
type row struct {
	rate                                        float64
	v                                           nemesis.Verdict
	freezes                                     int
	elapsed                                     time.Duration
	ceilingJobs, ceilingBatches, ceilingClients int
}

func runNemesis(ctx context.Context, f nemesisFlags) error {
	dsn, stopCluster, err := pgcluster.Open(ctx, os.Getenv, pgcluster.Options{})
	if err != nil {
		return err
	}
	defer stopCluster() //nolint:errcheck
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// Every schema is dropped at the end, whatever happens: on a context
	// of its own, so that Ctrl-C does not keep them.
	drop := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, s := range []string{poolSchema, riverSchema, ceilingSchema} {
			if _, err := db.Exec(dctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
				fmt.Fprintf(os.Stderr, "drop schema %s: %v\n", s, err)
			}
		}
	}
	drop()
	defer drop()
	if err := setupRiver(ctx, db); err != nil {
		return err
	}
	schedule := func(seed uint64) *nemesis.Schedule { return &nemesis.Schedule{Lease: f.lease, Seed: seed} }
	pool := func(seed uint64, withNemesis, noEffects bool) (row, error) {
		jobs := f.jobs
		if noEffects {
			jobs = f.bareJobs
		}
		run := nemesis.PoolRun{Exe: exe, Args: []string{"nemesis", "--worker", "fencelab"}, Workers: f.workers, Jobs: jobs,
			Worker: nemesis.WorkerConfig{DSN: dsn, Schema: poolSchema, Concurrency: f.concurrency, BatchSize: f.batch, Lease: f.lease, NoEffects: noEffects}}
		if withNemesis {
			run.Nemesis = schedule(seed)
		}
		o, err := run.Run(ctx, db)
		if err != nil {
			return row{}, fmt.Errorf("fencelab round: %w", err)
		}
		return row{rate: o.PerSecond(), v: o.Verdict, freezes: len(o.Stats.Freezes), elapsed: o.Elapsed}, nil
	}
	riverRun := func(seed uint64, withNemesis bool) (row, error) {
		var sched *nemesis.Schedule
		if withNemesis {
			sched = schedule(seed)
		}
		o, err := riverNemesisRound(ctx, db, dsn, exe, f, sched)
		if err != nil {
			return row{}, fmt.Errorf("River round: %w", err)
		}
		return row{rate: o.PerSecond(), v: o.Verdict, freezes: len(o.Stats.Freezes), elapsed: o.Elapsed}, nil
	}
	perClient := (f.bareJobs + f.workers*f.batch - 1) / (f.workers * f.batch)
	ceiling := func() (row, error) {
		r, err := nemesis.Ceiling(ctx, db, dsn, ceilingSchema, f.workers, f.batch, perClient)
		if err != nil {
			return row{}, fmt.Errorf("ceiling: %w", err)
		}
		if r.Done != r.Jobs {
			return row{}, fmt.Errorf("ceiling: %d of %d jobs done", r.Done, r.Jobs)
		}
		return row{rate: r.PerSecond(), elapsed: r.Elapsed, ceilingJobs: r.Jobs, ceilingBatches: perClient, ceilingClients: f.workers}, nil
	}

	fmt.Printf("under the nemesis: %d jobs, %d worker processes, lease %v; every %v a random worker frozen for the lease + 50..500ms, at most 2 at once\n",
		f.jobs, f.workers, f.lease, 100*time.Millisecond)
	var pools, rivers, calms, riverCalms, bares, ceilings []row
	for r := range f.rounds {
		seed := f.seed + uint64(r)
		fmt.Printf("round %d (seed %d):\n", r+1, seed)
		type run struct {
			to   *[]row
			name string
			run  func() (row, error)
		}
		a := run{&pools, "fencelab pool, nemesis", func() (row, error) { return pool(seed, true, false) }}
		b := run{&rivers, "River, nemesis", func() (row, error) { return riverRun(seed, true) }}
		if r%2 == 1 {
			a, b = b, a
		}
		for _, x := range []run{a, b,
			{&calms, "fencelab pool, no nemesis", func() (row, error) { return pool(0, false, false) }},
			{&riverCalms, "River, no nemesis", func() (row, error) { return riverRun(0, false) }},
		} {
			got, err := x.run()
			if err != nil {
				return err
			}
			*x.to = append(*x.to, got)
			printRow(x.name, got)
		}
		bare, err := pool(0, false, true)
		if err != nil {
			return err
		}
		bares = append(bares, bare)
		fmt.Printf("  %-28s %8.0f jobs/s   (%d jobs, no effect rows: the ceiling's statements, and renewals)  stuck %d  lost %d\n",
			"fencelab pool, no nemesis", bare.rate, f.bareJobs, bare.v.Unfinished, f.bareJobs-bare.v.Jobs)
		ce, err := ceiling()
		if err != nil {
			return err
		}
		ceilings = append(ceilings, ce)
		fmt.Printf("  %-28s %8.0f jobs/s   (pgbench --protocol=prepared, %d clients × %d batches of %d: %d jobs, no nemesis)\n",
			"ceiling: pool's statements", ce.rate, ce.ceilingClients, ce.ceilingBatches, f.batch, ce.ceilingJobs)
	}

	rate := func(rs []row) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = r.rate
		}
		return median(xs)
	}
	sum := func(rs []row, f func(nemesis.Verdict) int) int {
		n := 0
		for _, r := range rs {
			n += f(r.v)
		}
		return n
	}
	fmt.Println()
	fmt.Printf("River %s: JobTimeout %v, RescueStuckJobsAfter %v, its rescue (JobGetStuck, JobRescueMany) and scheduling (JobSchedule) run by the harness every %v (River's own rescuer runs every 30s and cannot be set), retry policy: at once; MaxWorkers %d, FetchCooldown %v, FetchPollInterval %v; completion with river.JobCompleteTx; %d rounds\n",
		riverVersion, f.lease, f.lease, f.rescueEvery, f.concurrency, riverFetchCooldown, riverFetchPollInterval, f.rounds)
	fmt.Printf("fencelab engine.WorkerPool: Concurrency %d, BatchSize %d, Lease %v, Heartbeat %v; fenced effect written by HandlerTx in the completion's transaction\n",
		f.concurrency, f.batch, f.lease, f.lease/3)
	for _, s := range []struct {
		name string
		rs   []row
	}{{"fencelab pool, nemesis", pools}, {"River, nemesis", rivers}} {
		fmt.Printf("%-24s %8.0f jobs/s (median)  zombie completions %d  final result not the final attempt's %d  stale effects %d  stuck %d  lost %d  (all rounds)\n",
			s.name, rate(s.rs),
			sum(s.rs, func(v nemesis.Verdict) int { return v.ZombieCompletions }),
			sum(s.rs, func(v nemesis.Verdict) int { return v.WrongResult }),
			sum(s.rs, func(v nemesis.Verdict) int { return v.StaleEffects }),
			sum(s.rs, func(v nemesis.Verdict) int { return v.Unfinished }),
			sum(s.rs, func(v nemesis.Verdict) int { return f.jobs - v.Jobs }))
	}
	fmt.Printf("ratio: under the nemesis the fencelab pool runs at %.2f× River (median of %d rounds); without it at %.2f×\n",
		rate(pools)/rate(rivers), f.rounds, rate(calms)/rate(riverCalms))
	fmt.Printf("ratio: the nemesis leaves the fencelab pool %.2f× its calm rate, and River %.2f×\n", rate(pools)/rate(calms), rate(rivers)/rate(riverCalms))
	fmt.Printf("ratio: without the nemesis the fencelab pool runs at %.2f× the ceiling of its own statements through pgbench, and at %.2f× it with no effect rows (medians of %d rounds)\n",
		rate(calms)/rate(ceilings), rate(bares)/rate(ceilings), f.rounds)
	return nil
}

func printRow(name string, r row) {
	v := r.v
	fmt.Printf("  %-28s %8.0f jobs/s   %3d freezes  %4d reclaimed  zombie completions %3d  result not final attempt's %3d  fenced effects not once %3d  stale effects %4d  stuck %d  lost %d\n",
		name, r.rate, r.freezes, v.Reclaimed, v.ZombieCompletions, v.WrongResult, v.NotOnce, v.StaleEffects, v.Unfinished, v.Jobs-(v.Done+v.Failed+v.Unfinished))
}

// setupRiver migrates River's tables into a schema of its own.
func setupRiver(ctx context.Context, db *pgxpool.Pool) error {
	if _, err := db.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{riverSchema}.Sanitize()); err != nil {
		return err
	}
	mig, err := rivermigrate.New(riverpgxv5.New(db), &rivermigrate.Config{Schema: riverSchema})
	if err != nil {
		return err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river's migrations: %w", err)
	}
	return nemesis.SetupEffects(ctx, db, riverSchema)
}

// riverFinal is River's side of the verdict: a job's final attempt is its
// river_job row's attempt, made by the last client in attempted_by, and its
// result the output it recorded.
const riverFinal = `SELECT id,
	CASE state WHEN 'completed' THEN 'done' WHEN 'discarded' THEN 'failed' WHEN 'cancelled' THEN 'failed' ELSE 'unfinished' END AS status,
	attempt::bigint AS epoch, attempted_by[array_length(attempted_by, 1)] AS owner,
	(metadata->'output'->>'epoch')::bigint AS result_epoch, metadata->'output'->>'worker' AS result_worker,
	finalized_at AS finished_at
  FROM ` + riverSchema + `.river_job`

// riverNemesisRound runs River's worker processes under the schedule on fresh
// jobs, with River's rescue and scheduling run from here (never frozen)
// every --rescue-every, and reads the verdict.
func riverNemesisRound(ctx context.Context, db *pgxpool.Pool, dsn, exe string, f nemesisFlags, sched *nemesis.Schedule) (nemesis.Outcome, error) {
	for _, sql := range []string{"TRUNCATE " + riverSchema + ".river_job", "TRUNCATE " + riverSchema + ".effects"} {
		if _, err := db.Exec(ctx, sql); err != nil {
			return nemesis.Outcome{}, err
		}
	}
	driver := riverpgxv5.New(db)
	inserter, err := river.NewClient(driver, &river.Config{Schema: riverSchema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nemesis.Outcome{}, err
	}
	params := make([]river.InsertManyParams, 0, f.jobs)
	for i := range f.jobs {
		params = append(params, river.InsertManyParams{Args: effectArgs{N: i}, InsertOpts: &river.InsertOpts{MaxAttempts: 25}})
	}
	if _, err := inserter.InsertManyFast(ctx, params); err != nil {
		return nemesis.Outcome{}, err
	}
	run := time.Now().UnixNano() & 0xffffff
	var cmds []*exec.Cmd
	for i := range f.workers {
		b, err := json.Marshal(riverWorkerConfig{DSN: dsn, Schema: riverSchema, ID: fmt.Sprintf("r%d-%x", i, run), MaxWorkers: f.concurrency, Lease: f.lease})
		if err != nil {
			return nemesis.Outcome{}, err
		}
		c := exec.Command(exe, "nemesis", "--worker", "river")
		c.Env = append(os.Environ(), riverWorkerEnv+"="+string(b))
		cmds = append(cmds, c)
	}
	rctx, stopRescue := context.WithCancel(ctx)
	rescued := make(chan int, 1)
	go func() { rescued <- rescue(rctx, driver.GetExecutor(), f.lease, f.rescueEvery) }()
	res, err := nemesis.Round{Workers: cmds, Nemesis: sched, DB: db, UnfinishedFunc: func(ctx context.Context) (int, error) {
		var n int
		err := db.QueryRow(ctx, "SELECT count(*) FROM "+riverSchema+".river_job WHERE state NOT IN ('completed', 'discarded', 'cancelled')").Scan(&n)
		return n, err
	}}.Run(ctx)
	stopRescue()
	if n := <-rescued; n > 0 {
		fmt.Printf("  (River's rescue: %d failed pass(es), each tried again at the next tick)\n", n)
	}
	if err != nil {
		return nemesis.Outcome{RoundResult: res}, err
	}
	v, err := nemesis.JudgeSQL(ctx, db, riverFinal, riverSchema)
	if err != nil {
		return nemesis.Outcome{RoundResult: res}, err
	}
	return nemesis.Outcome{RoundResult: res, Verdict: v, Elapsed: v.Last.Sub(res.Start)}, nil
}

// rescue is River's rescuer and scheduler run fast: River's own statements
// (JobGetStuck, JobRescueMany, JobSchedule, through its driver), every
// interval. A job running since before the horizon (now − after) is
// rescued as River's rescuer does: retryable, with the retry policy's time
// (at once here), or discarded on its last attempt; the scheduler then
// makes retryable jobs whose time has come available. River's own rescuer
// runs only every 30 s (JobRescuerIntervalDefault; the client does not
// expose it), and its scheduler every 5 s. As River's rescuer does, a pass
// that fails (a deadlock with a worker's completion, say) is logged and
// the next one tries again; rescue returns how many failed.
func rescue(ctx context.Context, ex riverdriver.Executor, after, interval time.Duration) int {
	t := time.NewTicker(interval)
	defer t.Stop()
	failed := 0
	for {
		select {
		case <-ctx.Done():
			return failed
		case <-t.C:
		}
		if err := rescueOnce(ctx, ex, after); err != nil && ctx.Err() == nil {
			failed++
		}
	}
}

func rescueOnce(ctx context.Context, ex riverdriver.Executor, after time.Duration) error {
	now := time.Now()
	horizon := now.Add(-after)
	stuck, err := ex.JobGetStuck(ctx, &riverdriver.JobGetStuckParams{Max: 10_000, Schema: riverSchema, StuckHorizon: horizon})
	if err != nil {
		return fmt.Errorf("JobGetStuck: %w", err)
	}
	if len(stuck) > 0 {
		p := &riverdriver.JobRescueManyParams{Schema: riverSchema, StuckHorizon: horizon}
		for _, j := range stuck {
			e, _ := json.Marshal(rivertype.AttemptError{At: now.UTC(), Attempt: j.Attempt, Error: "Stuck job rescued by JobRescuer"})
			p.ID, p.Error = append(p.ID, j.ID), append(p.Error, e)
			if j.Attempt < j.MaxAttempts {
				p.State, p.ScheduledAt, p.FinalizedAt = append(p.State, string(rivertype.JobStateRetryable)), append(p.ScheduledAt, now), append(p.FinalizedAt, nil)
			} else {
				p.State, p.ScheduledAt, p.FinalizedAt = append(p.State, string(rivertype.JobStateDiscarded)), append(p.ScheduledAt, j.ScheduledAt), append(p.FinalizedAt, &now)
			}
		}
		if _, err := ex.JobRescueMany(ctx, p); err != nil {
			return fmt.Errorf("JobRescueMany: %w", err)
		}
	}
	if _, err := ex.JobSchedule(ctx, &riverdriver.JobScheduleParams{Max: 10_000, Now: &now, Schema: riverSchema}); err != nil {
		return fmt.Errorf("JobSchedule: %w", err)
	}
	return nil
}

// median is the middle of xs, or the mean of its two middles.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
