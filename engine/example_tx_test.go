package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/jackc/pgx/v5/pgxpool"
)

// On the one-job path, a worker fences its own writes by making them in
// the transaction of its compare-and-set: a Queue made over a pgx.Tx runs
// its statements there. The write and the commit land together, or — when
// another claim took the job meanwhile — the commit is fenced and the
// transaction rolled back, write and all.
func Example_fencedWritesInATransaction() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	const schema = "example_tx"
	_ = engine.DropQueue(ctx, pool, schema)
	if err := engine.SetupQueue(ctx, pool, schema); err != nil {
		log.Fatal(err)
	}
	defer engine.DropQueue(ctx, pool, schema)
	if _, err := pool.Exec(ctx, `CREATE TABLE example_tx.ledger (job_id bigint, epoch bigint, amount int)`); err != nil {
		log.Fatal(err)
	}
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := q.Insert(ctx, []byte(`{"pay":100}`), 0); err != nil {
		log.Fatal(err)
	}

	// commit books the payment and completes the job in one transaction.
	commit := func(c engine.Claim, who string) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback(ctx) // a no-op after Commit
		if _, err := tx.Exec(ctx, `INSERT INTO example_tx.ledger VALUES ($1, $2, 100)`, c.JobID, c.Epoch); err != nil {
			log.Fatal(err)
		}
		tq, err := engine.NewQueue(tx, engine.QueueConfig{Schema: schema})
		if err != nil {
			log.Fatal(err)
		}
		if _, err := tq.Complete(ctx, c, []byte(`{"paid":100}`)); errors.Is(err, engine.ErrFenced) {
			fmt.Println(who, "is fenced: its payment is rolled back with its commit")
			return
		} else if err != nil {
			log.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			log.Fatal(err)
		}
		fmt.Println(who, "pays and commits")
	}

	a, err := q.Claim(ctx, "worker-a", 100*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // worker-a stalls past its lease
	b, err := q.Claim(ctx, "worker-b", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	commit(b, "worker-b")
	commit(a, "worker-a") // the zombie wakes up

	var payments int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM example_tx.ledger`).Scan(&payments); err != nil {
		log.Fatal(err)
	}
	fmt.Println("payments booked:", payments)
	// Output:
	// worker-b pays and commits
	// worker-a is fenced: its payment is rolled back with its commit
	// payments booked: 1
}
