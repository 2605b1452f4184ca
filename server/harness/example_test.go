package harness_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/engine/lab"
	"github.com/fencelab/fencelab/server/harness"
	"github.com/fencelab/fencelab/server/sandbox"
)

// Check a worker program, here the reference Python worker, through every
// case, and judge it. (Compiled, not run: it needs a database and Python.)
func ExampleRun() {
	ctx := context.Background()
	url := os.Getenv("DATABASE_URL")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	// The workers log in as a role made for each case, which needs the
	// database hardened: only on a database that is fencelab's own.
	if err := sandbox.Harden(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	ins, err := harness.Run(ctx, harness.Config{
		Command:     "python3 server/harness/examples/python/correct.py",
		Pool:        pool,
		DatabaseURL: url,
		Stderr:      os.Stderr,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	rep := lab.JudgeCheck(ins)
	for _, c := range rep.Cases {
		fmt.Println(c.Case, c.OK)
	}
	fmt.Println(rep.Words)
}
