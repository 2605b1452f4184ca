package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A worker pool works a queue with a handler, many jobs at once: claims,
// lease renewals and results go a batch at a time, each job's result by
// compare-and-set on its own owner and epoch. The handler here does its
// slow work first (an email, sent with the job's epoch so that the mail
// service can refuse a zombie's late call), and returns its own writes as
// a TxFunc: the pool runs it in the transaction that records the job's
// completion, so the row in sent exists exactly for the jobs whose
// completion landed — never for a zombie's. A handler whose lease was lost
// has its context cancelled, and its late result is refused and reported
// to OnFenced instead of landing on the new owner's work.
func ExampleWorkerPool() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	const schema = "example_pool"
	_ = engine.DropQueue(ctx, pool, schema) // what an earlier run left
	if err := engine.SetupQueue(ctx, pool, schema); err != nil {
		log.Fatal(err)
	}
	defer engine.DropQueue(ctx, pool, schema)
	// The application's own table, beside the queue's.
	if _, err := pool.Exec(ctx, `CREATE TABLE example_pool.sent (email text PRIMARY KEY, job_id bigint, epoch bigint)`); err != nil {
		log.Fatal(err)
	}
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	var jobs []engine.NewJob
	for _, to := range []string{"ada@example.com", "grace@example.com", "edsger@example.com"} {
		payload, _ := json.Marshal(map[string]string{"email": to})
		jobs = append(jobs, engine.NewJob{Payload: payload, MaxAttempts: 5})
	}
	if _, err := q.InsertMany(ctx, jobs); err != nil { // one statement; InsertTx inside a transaction of yours
		log.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	left := make(chan struct{}, 3)
	wp, err := engine.NewWorkerPool(engine.WorkerPoolConfig{
		Queue:       q,
		Owner:       engine.UniqueOwner("mailer"), // unique to this process, never reused
		Concurrency: 10,
		Lease:       30 * time.Second,
		HandlerTx: func(ctx context.Context, job engine.Claim) ([]byte, engine.TxFunc, error) {
			var in struct{ Email string }
			if err := json.Unmarshal(job.Payload, &in); err != nil {
				return nil, nil, err // recorded as the job's failure, retried after a backoff
			}
			// Call the mail service here, with job.Epoch (the fencing token).
			// ctx ends if the lease is lost: give up then.
			result, _ := json.Marshal(map[string]any{"sent_to": in.Email})
			write := func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO example_pool.sent VALUES ($1, $2, $3)`, in.Email, job.JobID, job.Epoch)
				return err
			}
			return result, write, nil
		},
		OnFenced: func(fe *engine.FencedError) {
			fmt.Println("fenced:", fe) // a stalled job's late result, refused
		},
		OnRecorded: func(landed, fenced int) {
			for range landed {
				left <- struct{}{}
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- wp.Run(runCtx) }()
	for range 3 {
		<-left
	}
	stop() // Run claims no more, lets its handlers finish, and returns
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}

	rows, err := pool.Query(ctx, `SELECT j.status, s.email, s.epoch = j.epoch
		FROM example_pool.jobs j JOIN example_pool.sent s ON s.job_id = j.id ORDER BY j.id`)
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var status, to string
		var sameEpoch bool
		if err := rows.Scan(&status, &to, &sameEpoch); err != nil {
			log.Fatal(err)
		}
		fmt.Println(status, to, sameEpoch)
	}
	// Output:
	// done ada@example.com true
	// done grace@example.com true
	// done edsger@example.com true
}
