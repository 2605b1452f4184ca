package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/sandbox"
)

// A run's role checks a reader's claim, runs it, and refuses a statement
// that reads a file.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	if err := sandbox.Harden(ctx, pool); err != nil { // once, at the server's start
		fmt.Println(err)
		return
	}
	s := judge.Schemas{Jobs: "example_jobs", Receiver: "example_receiver"}
	if err := judge.Setup(ctx, pool, s); err != nil {
		fmt.Println(err)
		return
	}
	defer judge.Drop(ctx, pool, s) //nolint:errcheck
	role, err := sandbox.NewRole(ctx, pool, s)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer role.Drop(ctx, pool) //nolint:errcheck

	claim, err := role.Vet(ctx, sandbox.Claim, `UPDATE jobs SET status = 'running', owner = :owner,
       epoch = epoch + 1, lease_until = now() + :lease
 WHERE id = (SELECT id FROM jobs WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, owner, epoch, lease_until`)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("parameters:", claim.Params)

	pool.Exec(ctx, "INSERT INTO example_jobs.jobs (payload) VALUES ('{}')") //nolint:errcheck
	conn, err := role.Connect(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx) //nolint:errcheck
	res, err := sandbox.Exec(ctx, conn, claim, map[string]any{"owner": "A", "lease": 30 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("claimed job", res.Rows[0][0], "at epoch", res.Rows[0][2])

	_, err = role.Vet(ctx, sandbox.Complete, "UPDATE jobs SET error = pg_read_file('/etc/passwd') WHERE id = :id")
	var refused *sandbox.Error
	if errors.As(err, &refused) {
		fmt.Println(refused.Code+":", refused.Message)
	}
	// Output:
	// parameters: [owner lease]
	// claimed job 1 at epoch 1
	// forbidden-call: the complete may not use the function pg_read_file(text): a statement may read and write only its run's jobs and deliveries, and use only the clock, intervals, numbers, comparisons, COALESCE and CASE, and text and jsonb functions
}
