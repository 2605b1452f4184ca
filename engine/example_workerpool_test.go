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
	"github.com/jackc/pgx/v5/pgxpool"
)

// A worker pool works a queue with a handler function, many jobs at once:
// claims, lease renewals and results go a batch at a time, each job's
// result by compare-and-set on its own owner and epoch. A handler whose
// lease was lost has its context cancelled, and its late result is
// refused and reported to OnFenced instead of landing on the new owner's
// work.
func ExampleWorkerPool() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	const schema = "example_pool"
	_ = engine.DropQueue(ctx, pool, schema)
	if err := engine.SetupQueue(ctx, pool, schema); err != nil { // no history trigger: nothing to pay for
		log.Fatal(err)
	}
	defer engine.DropQueue(ctx, pool, schema)
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	for _, to := range []string{"ada@example.com", "grace@example.com", "edsger@example.com"} {
		payload, _ := json.Marshal(map[string]string{"email": to})
		if _, err := q.Insert(ctx, payload, 0); err != nil {
			log.Fatal(err)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	left := make(chan struct{}, 3)
	wp, err := engine.NewWorkerPool(engine.WorkerPoolConfig{
		Queue:       q,
		Owner:       "mailer-" + fmt.Sprint(os.Getpid()), // unique to this process, never reused
		Concurrency: 10,
		Lease:       30 * time.Second,
		Handler: func(ctx context.Context, job engine.Claim) ([]byte, error) {
			var in struct{ Email string }
			if err := json.Unmarshal(job.Payload, &in); err != nil {
				return nil, err // recorded as the job's failure
			}
			// Call the mail service with the job's epoch (the fencing
			// token), so that it can refuse a zombie's late call too.
			return json.Marshal(map[string]any{"sent_to": in.Email, "epoch": job.Epoch})
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

	rows, err := pool.Query(ctx, "SELECT status, result->>'sent_to' FROM example_pool.jobs ORDER BY id")
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var status, to string
		if err := rows.Scan(&status, &to); err != nil {
			log.Fatal(err)
		}
		fmt.Println(status, to)
	}
	// Output:
	// done ada@example.com
	// done grace@example.com
	// done edsger@example.com
}
