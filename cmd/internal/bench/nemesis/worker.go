package nemesis

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// WorkerEnv names the environment variable that carries a worker
// process's WorkerConfig as JSON. Its presence is what makes a program (a
// test binary re-executed, the River benchmark's binary) a fencelab worker;
// the connection string rides in it because a command line is visible to
// every local user.
const WorkerEnv = "FENCELAB_NEMESIS_WORKER"

// WorkerConfig configures one fencelab worker process.
type WorkerConfig struct {
	DSN         string        `json:"dsn"`
	Schema      string        `json:"schema"` // the queue's schema, which holds the effects table too
	Owner       string        `json:"owner"`  // the pool's owner: unique to the process
	Concurrency int           `json:"concurrency"`
	BatchSize   int           `json:"batch_size"`
	Lease       time.Duration `json:"lease"`
	// Broken breaks guards on purpose: only the test that proves the
	// verdict catches zombies sets it.
	Broken playground.Guards `json:"broken,omitempty"`
	// NoEffects leaves the effect rows out: each job only returns its
	// Result, with a plain Handler, so the pool's statements are the
	// ceiling's (claims and completions), with its renewals beside them.
	NoEffects bool `json:"no_effects,omitempty"`
}

// Env returns the environment entry that hands c to a worker process.
func (c WorkerConfig) Env() (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	return WorkerEnv + "=" + string(b), nil
}

// Result is what a job's handler returns: the epoch it held and the
// worker it ran on, so that the verdict can tell the final claim's result
// from a zombie's.
type Result struct {
	Epoch  int64  `json:"epoch"`
	Worker string `json:"worker"`
}

// WorkerMain is the main function of a fencelab worker process: if
// WorkerEnv is set it reads its config from there, serves the protocol
// (Serve) on standard input and output, and exits the process: 0 after a
// clean stop, 1 with the error on standard error otherwise. Without
// WorkerEnv it returns at once, and the program goes on as itself.
func WorkerMain() {
	raw, ok := os.LookupEnv(WorkerEnv)
	if !ok {
		return
	}
	var cfg WorkerConfig
	err := json.Unmarshal([]byte(raw), &cfg)
	if err == nil {
		err = PoolWorker(context.Background(), cfg, os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nemesis worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// PoolWorker connects, and works cfg's queue with engine.WorkerPool until
// in ends (see Serve). Each job's handler writes an external effect on a
// connection of its own, then returns its Result and the write of its
// fenced effect, which the pool runs in the transaction that records the
// completion.
func PoolWorker(ctx context.Context, cfg WorkerConfig, in io.Reader, out io.Writer) error {
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return fmt.Errorf("worker: database url: %w", err)
	}
	// One connection per handler for the external effects, and a few for
	// the pool's own claims, renewals and completions.
	pcfg.MaxConns = int32(cfg.Concurrency + 4)
	db, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("worker: connect: %w", err)
	}
	defer db.Close()
	if err := Warm(ctx, db); err != nil {
		return fmt.Errorf("worker: connect: %w", err)
	}
	q, err := playground.NewQueue(db, engine.QueueConfig{Schema: cfg.Schema}, playground.QueueHooks{Broken: cfg.Broken})
	if err != nil {
		return err
	}
	insert := EffectInsert(cfg.Schema)
	pc := engine.WorkerPoolConfig{Queue: q, Owner: cfg.Owner, Concurrency: cfg.Concurrency, BatchSize: cfg.BatchSize,
		Lease: cfg.Lease, PollInterval: 20 * time.Millisecond}
	if cfg.NoEffects {
		// A plain Handler: the pool records it with CompleteBatch alone.
		pc.Handler = func(ctx context.Context, job engine.Claim) ([]byte, error) {
			return json.Marshal(Result{Epoch: job.Epoch, Worker: cfg.Owner})
		}
	} else {
		pc.HandlerTx = func(ctx context.Context, job engine.Claim) ([]byte, engine.TxFunc, error) {
			return handle(ctx, db, insert, cfg.Owner, job)
		}
	}
	wp, err := engine.NewWorkerPool(pc)
	if err != nil {
		return err
	}
	return Serve(ctx, in, out, wp.Run)
}

// Warm opens every connection db may hold before the worker says it is
// ready: otherwise the first jobs of a run wait for hundreds of
// connections to be opened at once, on two cores, and their leases run
// out with no nemesis at all (seen: jobs claimed at the go whose handlers
// got a connection 1.3 s later). Used by the River workers too.
func Warm(ctx context.Context, db *pgxpool.Pool) error {
	n := int(db.Config().MaxConns)
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := db.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}

// handle is a job's work: the external effect, then the result and the
// fenced effect's write, which the pool runs in the transaction that
// records the completion, once the job's row is locked and its owner and
// epoch checked: it commits with the completion, or not at all.
func handle(ctx context.Context, db engine.DB, insert, owner string, job engine.Claim) ([]byte, engine.TxFunc, error) {
	if _, err := db.Exec(ctx, insert, job.JobID, job.Epoch, owner, EffectExternal); err != nil {
		return nil, nil, fmt.Errorf("external effect: %w", err)
	}
	result, err := json.Marshal(Result{Epoch: job.Epoch, Worker: owner})
	if err != nil {
		return nil, nil, err
	}
	return result, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insert, job.JobID, job.Epoch, owner, EffectFenced)
		return err
	}, nil
}
