package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/fencelab/fencelab/cmd/internal/bench/nemesis"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// riverWorkerEnv carries a River worker process's riverWorkerConfig as
// JSON; the connection string rides in it, never on the command line.
const riverWorkerEnv = "FENCELAB_NEMESIS_RIVER_WORKER"

// riverWorkerConfig configures one River worker process.
type riverWorkerConfig struct {
	DSN        string        `json:"dsn"`
	Schema     string        `json:"schema"` // River's tables, and the effects table beside them
	ID         string        `json:"id"`     // the client's ID: River records it in attempted_by
	MaxWorkers int           `json:"max_workers"`
	Lease      time.Duration `json:"lease"` // River's JobTimeout and RescueStuckJobsAfter
}

// River's settings under the nemesis, beside the lease (JobTimeout and
// RescueStuckJobsAfter both equal it): the fetch tuning of River's own
// cmd/river bench, as the no-op comparison uses.
const (
	riverFetchCooldown     = 2 * time.Millisecond
	riverFetchPollInterval = 20 * time.Millisecond
)

// retryAtOnce is River's retry policy under the nemesis: a failed attempt
// (a worker that woke past its JobTimeout, say) is retried at once rather
// than after River's default backoff of attempt⁴ seconds, so a run ends
// when the work does.
type retryAtOnce struct{}

func (retryAtOnce) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

// riverClientConfig is the River client's config under the nemesis.
func riverClientConfig(c riverWorkerConfig, ws *river.Workers) *river.Config {
	return &river.Config{
		ID:                   c.ID,
		Schema:               c.Schema,
		FetchCooldown:        riverFetchCooldown,
		FetchPollInterval:    riverFetchPollInterval,
		JobTimeout:           c.Lease,
		RescueStuckJobsAfter: c.Lease,
		RetryPolicy:          retryAtOnce{},
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: c.MaxWorkers}},
		Workers:              ws,
		Logger:               slog.New(slog.DiscardHandler),
	}
}

// effectArgs is a job of the nemesis run.
type effectArgs struct {
	N int `json:"n"`
}

func (effectArgs) Kind() string { return "nemesis_effect" }

// effectWorker does a job as the fencelab workers do: an external effect
// on a connection of its own, then its result (River's recorded output)
// and its fenced effect, the latter in the transaction that completes the
// job with river.JobCompleteTx, as River's docs recommend for a job whose
// database writes must commit with its completion.
type effectWorker struct {
	river.WorkerDefaults[effectArgs]
	db     *pgxpool.Pool
	id     string
	insert string
}

func (w *effectWorker) Work(ctx context.Context, job *river.Job[effectArgs]) error {
	if _, err := w.db.Exec(ctx, w.insert, job.ID, job.Attempt, w.id, nemesis.EffectExternal); err != nil {
		return fmt.Errorf("external effect: %w", err)
	}
	if err := river.RecordOutput(ctx, nemesis.Result{Epoch: int64(job.Attempt), Worker: w.id}); err != nil {
		return err
	}
	tx, err := w.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	if _, err := tx.Exec(ctx, w.insert, job.ID, job.Attempt, w.id, nemesis.EffectFenced); err != nil {
		return fmt.Errorf("fenced effect: %w", err)
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("complete: %w", err)
	}
	return tx.Commit(ctx)
}

// riverWorkerMain is a River worker process: it reads its config from
// riverWorkerEnv and serves the nemesis protocol (nemesis.Serve): ready
// once its client is made, its client started at "go", stopped when its
// standard input ends.
func riverWorkerMain(ctx context.Context, in io.Reader, out io.Writer) error {
	var c riverWorkerConfig
	if err := json.Unmarshal([]byte(os.Getenv(riverWorkerEnv)), &c); err != nil {
		return fmt.Errorf("river worker: %s: %w", riverWorkerEnv, err)
	}
	pcfg, err := pgxpool.ParseConfig(c.DSN)
	if err != nil {
		return err
	}
	pcfg.MaxConns = int32(c.MaxWorkers + 8) // a connection per job in flight, and River's own
	db, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := nemesis.Warm(ctx, db); err != nil {
		return err
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, &effectWorker{db: db, id: c.ID, insert: nemesis.EffectInsert(c.Schema)})
	client, err := river.NewClient(riverpgxv5.New(db), riverClientConfig(c, ws))
	if err != nil {
		return err
	}
	return nemesis.Serve(ctx, in, out, func(ctx context.Context) error {
		if err := client.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		return client.Stop(sctx)
	})
}
