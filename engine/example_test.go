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

// A worker's loop: claim a job under a lease, keep the lease alive while
// the work runs, call the external system with the job's epoch, then
// commit by compare-and-set. When another worker has taken the job over
// meanwhile — this worker stalled past its lease — its commit is fenced
// and its result dropped; the loop moves on.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	const jobs, receiver = "example_jobs", "example_receiver"
	for _, schema := range []string{jobs, receiver} {
		_ = engine.DropQueue(ctx, pool, schema) // what an earlier run left
		defer engine.DropQueue(ctx, pool, schema)
	}
	if err := engine.SetupQueue(ctx, pool, jobs); err != nil {
		log.Fatal(err)
	}
	if err := engine.SetupReceiver(ctx, pool, receiver); err != nil { // another system: its own schema
		log.Fatal(err)
	}

	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: jobs})
	if err != nil {
		log.Fatal(err)
	}
	rcv, err := engine.NewReceiver(pool, engine.ReceiverConfig{Schema: receiver})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := q.Insert(ctx, []byte(`{"email":"ada@example.com"}`), 0); err != nil {
		log.Fatal(err)
	}

	const lease = 200 * time.Millisecond
	// work is one turn of a worker's loop. stall, if set, is where it
	// freezes: a GC pause, a hung call, a closed laptop lid.
	work := func(owner string, stall func()) {
		c, err := q.Claim(ctx, owner, lease)
		if errors.Is(err, engine.ErrNoJob) {
			fmt.Println(owner, "finds nothing to do")
			return
		} else if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s claims job %d at epoch %d\n", owner, c.JobID, c.Epoch)

		// A heartbeat keeps the lease while the work runs; a worker that
		// stalls stops renewing, and its lease runs out on the database clock.
		if stall != nil {
			stall()
		} else if _, err := q.Renew(ctx, c, lease); err != nil {
			log.Fatal(err)
		}

		// The external system gets the epoch, and refuses an older one.
		result := []byte(fmt.Sprintf(`{"sent_by":%q}`, owner))
		_, err = rcv.Deliver(ctx, engine.Delivery{JobID: c.JobID, Epoch: c.Epoch, Owner: owner, Payload: result})
		if errors.Is(err, engine.ErrStale) {
			fmt.Println(owner, "is refused by the receiver: a newer epoch was delivered")
		} else if err != nil {
			log.Fatal(err)
		}

		_, err = q.Complete(ctx, c, result)
		var fe *engine.FencedError
		switch {
		case errors.As(err, &fe):
			fmt.Printf("%s's commit is fenced: it holds epoch %d, the row is at epoch %d\n", owner, fe.HeldEpoch, fe.RowEpoch)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println(owner, "commits")
		}
	}

	// worker-a stalls past its lease; worker-b takes the job over and
	// finishes it; then worker-a wakes up and carries on.
	stalled, wake, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		work("worker-a", func() { close(stalled); <-wake })
		close(done)
	}()
	<-stalled
	time.Sleep(lease + 100*time.Millisecond) // worker-a's lease runs out
	work("worker-b", nil)
	close(wake)
	<-done

	// Output:
	// worker-a claims job 1 at epoch 1
	// worker-b claims job 1 at epoch 2
	// worker-b commits
	// worker-a is refused by the receiver: a newer epoch was delivered
	// worker-a's commit is fenced: it holds epoch 1, the row is at epoch 2
}
