// Package bench measures the fenced claim→complete cycle: N workers, each
// claiming a job and completing it by compare-and-set, until the queue is
// empty. Beside it, in the same run, it measures the database's own ceiling
// for the very same two statements with pgbench, which ships with
// PostgreSQL, so the figure that matters is a ratio, not a number that
// depends on how busy the machine is.
package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Result is one measurement.
type Result struct {
	Name    string        `json:"name"`
	Workers int           `json:"workers"`
	Jobs    int           `json:"jobs"`
	Elapsed time.Duration `json:"elapsed"`
}

// PerSecond returns jobs per second.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Jobs) / r.Elapsed.Seconds()
}

func (r Result) String() string {
	return fmt.Sprintf("%-28s %3d workers  %7d jobs  %8.0f jobs/s", r.Name, r.Workers, r.Jobs, r.PerSecond())
}

// Fill empties the jobs table and inserts n pending jobs in one statement.
func Fill(ctx context.Context, pool *pgxpool.Pool, schema string, n int) error {
	if err := engine.ValidateSchemaName(schema); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	for _, st := range judge.JobsFill(schema, n) {
		if _, err := pool.Exec(ctx, st.SQL, st.Args...); err != nil {
			return fmt.Errorf("fill: %s: %w", st.Name, err)
		}
	}
	return nil
}

// Cycle runs workers goroutines, each with its own connection, through the
// engine's fenced cycle until no job is claimable, and times it. The jobs
// must be in place (Fill).
func Cycle(ctx context.Context, pool *pgxpool.Pool, schema string, workers, jobs int) (Result, error) {
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: schema})
	if err != nil {
		return Result{}, err
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	var mu sync.Mutex
	done := 0
	start := time.Now()
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("bench-%d", i)
			n := 0
			for {
				c, err := q.Claim(ctx, owner, time.Minute)
				if errors.Is(err, engine.ErrNoJob) {
					break
				}
				if err != nil {
					errs <- err
					return
				}
				if _, err := q.Complete(ctx, c, []byte(`{"ok": true}`)); err != nil {
					errs <- err
					return
				}
				n++
			}
			mu.Lock()
			done += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return Result{}, fmt.Errorf("cycle: %w", err)
	}
	if done != jobs {
		return Result{}, fmt.Errorf("cycle: %d jobs done, want %d", done, jobs)
	}
	return Result{Name: "fencelab engine (Go, pgx)", Workers: workers, Jobs: done, Elapsed: elapsed}, nil
}

// FillFinished is Fill with finished jobs in the table first, as a
// long-lived queue's table holds them.
func FillFinished(ctx context.Context, pool *pgxpool.Pool, schema string, finished, pending int) error {
	if err := engine.ValidateSchemaName(schema); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	for _, st := range judge.JobsFillFinished(schema, finished, pending) {
		if _, err := pool.Exec(ctx, st.SQL, st.Args...); err != nil {
			return fmt.Errorf("fill: %s: %w", st.Name, err)
		}
	}
	return nil
}

// Fast works the queue's jobs with engine.WorkerPool (the production path:
// batched claims, renewals and completions, every completion fenced) and
// a handler that does nothing, and times it from the pool's start to the
// statement that recorded the last of them. The jobs must be in place.
func Fast(ctx context.Context, pool *pgxpool.Pool, schema string, concurrency, batch, jobs int) (Result, error) {
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: schema})
	if err != nil {
		return Result{}, err
	}
	var landed, fenced atomic.Int64
	var last atomic.Int64
	all := make(chan struct{})
	wp, err := engine.NewWorkerPool(engine.WorkerPoolConfig{Queue: q, Owner: "bench-pool", Concurrency: concurrency, BatchSize: batch,
		Lease: time.Minute, PollInterval: 20 * time.Millisecond,
		Handler: func(context.Context, engine.Claim) ([]byte, error) { return nil, nil },
		OnRecorded: func(l, f int) {
			fenced.Add(int64(f))
			if landed.Add(int64(l)) == int64(jobs) {
				last.Store(time.Now().UnixNano())
				close(all)
			}
		}})
	if err != nil {
		return Result{}, err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- wp.Run(rctx) }()
	select {
	case <-all:
	case <-ctx.Done():
		stop()
		<-errc
		return Result{}, ctx.Err()
	}
	stop()
	if err := <-errc; err != nil {
		return Result{}, err
	}
	if n := fenced.Load(); n != 0 {
		return Result{}, fmt.Errorf("fast: %d completions were fenced with one owner and no stall", n)
	}
	return Result{Name: fmt.Sprintf("fencelab WorkerPool (batch %d)", batch), Workers: concurrency, Jobs: jobs,
		Elapsed: time.Unix(0, last.Load()).Sub(start)}, nil
}

// FindPGBench looks for pgbench on PATH and beside the server binaries.
func FindPGBench() (string, error) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin/pgbench", "/usr/pgsql-*/bin/pgbench", "/usr/local/pgsql/bin/pgbench", "/opt/homebrew/bin/pgbench"} {
		m, _ := filepath.Glob(pattern)
		if len(m) > 0 {
			return m[len(m)-1], nil
		}
	}
	return "", errors.New("pgbench not found: it ships with PostgreSQL (Debian: apt-get install postgresql-contrib)")
}

// Script returns a pgbench script of the engine's own claim and fenced
// complete statements, with the arguments written in: the claim's
// RETURNING gives the id and epoch the complete compares against. They
// are the statements the engine really runs: Script claims and completes
// a job through an engine.Queue on the schema, in a transaction of db's
// it rolls back, and takes each statement and its arguments from the
// queue's trace.
func Script(ctx context.Context, db *pgxpool.Pool, schema string) (string, error) {
	claim, complete, c, err := traceCycle(ctx, db, schema)
	if err != nil {
		return "", fmt.Errorf("script: %w", err)
	}
	sub := func(arg any) (string, bool) {
		switch v := arg.(type) {
		case string:
			if v == c.Owner {
				return "'pgbench-' || :client_id", true
			}
			return "'" + strings.ReplaceAll(v, "'", "''") + "'", true
		case int64:
			switch v {
			case c.JobID:
				return ":id", true
			case c.Epoch:
				return ":epoch", true
			}
		case pgtype.Interval: // the claim's lease: traceCycle's minute
			return "'1 minute'", v == pgtype.Interval{Microseconds: time.Minute.Microseconds(), Valid: true}
		}
		return "", false
	}
	cl, err := Inline(claim, sub)
	if err != nil {
		return "", fmt.Errorf("script: %w", err)
	}
	co, err := Inline(complete, sub)
	if err != nil {
		return "", fmt.Errorf("script: %w", err)
	}
	return cl + " \\gset\n" + co + ";\n", nil
}

// traceCycle runs one claim and one complete through an engine.Queue, in
// a transaction it rolls back, and returns the two statements as the
// queue traced them and the claim they were about. The claim takes the
// schema's first claimable job, and Script tells the job's id from its
// epoch by value: so until the two differ, it claims again, a job it
// inserts first each time so that there is one to claim.
func traceCycle(ctx context.Context, db *pgxpool.Pool, schema string) (claim, complete playground.Statement, c engine.Claim, err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return claim, complete, c, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // nothing of it is kept
	var last playground.Statement
	q, err := playground.NewQueue(tx, engine.QueueConfig{Schema: schema}, playground.QueueHooks{Trace: func(t playground.Trace) { last = t.Statement }})
	if err != nil {
		return claim, complete, c, err
	}
	for range 3 {
		if _, err = q.Insert(ctx, []byte(`{}`), 0); err != nil {
			return claim, complete, c, err
		}
		if c, err = q.Claim(ctx, "pgbench", time.Minute); err != nil {
			return claim, complete, c, err
		}
		claim = last
		if _, err = q.Complete(ctx, c, []byte(`{"ok": true}`)); err != nil {
			return claim, complete, c, err
		}
		complete = last
		if c.JobID != c.Epoch {
			return claim, complete, c, nil
		}
	}
	return claim, complete, c, fmt.Errorf("the claimed jobs' ids were their epochs, %d", c.Epoch)
}

var placeholder = regexp.MustCompile(`\$(\d+)`)

// Inline writes a statement's arguments into its text, on one line with
// its comments taken out (pgbench reads a command per line): sub gives
// each argument's text, and false for one it does not know, which is an
// error, so that a change to the engine's statements breaks a pgbench
// script loudly rather than silently. Script and the nemesis's ceiling
// both write the engine's statements for pgbench this way.
func Inline(st playground.Statement, sub func(any) (string, bool)) (string, error) {
	var bad error
	sql := placeholder.ReplaceAllStringFunc(st.SQL, func(m string) string {
		n, _ := strconv.Atoi(m[1:])
		if n < 1 || n > len(st.Args) {
			bad = fmt.Errorf("%s: $%d has no argument", st.Name, n)
			return m
		}
		s, ok := sub(st.Args[n-1])
		if !ok {
			bad = fmt.Errorf("%s: argument $%d (%T %v) is not one pgbench's script knows", st.Name, n, st.Args[n-1], st.Args[n-1])
		}
		return s
	})
	if bad != nil {
		return "", bad
	}
	var parts []string
	for _, l := range strings.Split(sql, "\n") {
		if i := strings.Index(l, "--"); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " "), nil
}

// PGBench runs the same claim and complete (Script, on pool) through
// pgbench with clients connections and prepared statements, one
// transaction per job. The jobs must be in place (Fill) and number exactly
// clients × perClient.
func PGBench(ctx context.Context, pool *pgxpool.Pool, pgbench, dsn, schema string, clients, perClient int) (Result, error) {
	text, err := Script(ctx, pool, schema)
	if err != nil {
		return Result{}, err
	}
	return runResult(ctx, "pgbench, same statements", pgbench, dsn, text, clients, perClient, clients*perClient)
}

// runResult runs a pgbench script (RunScript) and names its figure: jobs
// done by clients connections of perClient transactions each.
func runResult(ctx context.Context, name, pgbench, dsn, text string, clients, perClient, jobs int) (Result, error) {
	elapsed, err := RunScript(ctx, pgbench, dsn, text, clients, perClient, nil)
	if err != nil {
		return Result{}, err
	}
	return Result{Name: name, Workers: clients, Jobs: jobs, Elapsed: elapsed}, nil
}

// RunScript runs a pgbench script (its text) with clients connections and
// prepared statements, perClient transactions each, and returns how long
// they took: pgbench's own figure, which leaves out its connection set-up,
// when it gives one. A failed transaction fails the run. run, if set,
// starts and waits for the command (default: cmd.Run).
func RunScript(ctx context.Context, pgbench, dsn, text string, clients, perClient int, run func(*exec.Cmd) error) (time.Duration, error) {
	dir, err := os.MkdirTemp("", "fencelab-bench-*")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "script.sql")
	if err := os.WriteFile(script, []byte(text), 0o644); err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, pgbench, "--no-vacuum", "--protocol=prepared",
		"--client", strconv.Itoa(clients), "--jobs", strconv.Itoa(clients),
		"--transactions", strconv.Itoa(perClient), "--file", script, dsn)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if run == nil {
		run = (*exec.Cmd).Run
	}
	start := time.Now()
	err = run(cmd)
	elapsed := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("pgbench: %v\n%s", err, out.Bytes())
	}
	if m := regexp.MustCompile(`number of failed transactions: (\d+)`).FindSubmatch(out.Bytes()); m != nil && string(m[1]) != "0" {
		return 0, fmt.Errorf("pgbench: %s transactions failed\n%s", m[1], out.Bytes())
	}
	if m := regexp.MustCompile(`tps = ([\d.]+) \(without initial connection time\)`).FindSubmatch(out.Bytes()); m != nil {
		if tps, err := strconv.ParseFloat(string(m[1]), 64); err == nil && tps > 0 {
			elapsed = time.Duration(float64(clients*perClient) / tps * float64(time.Second))
		}
	}
	return elapsed, nil
}
