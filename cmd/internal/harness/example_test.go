package harness_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/cmd/internal/harness"
	"github.com/fencelab/fencelab/server/run/check"
	"github.com/fencelab/fencelab/server/sandbox"
)

// Check a worker program, here the reference Python worker, through every
// case, and judge it. (Compiled, not run: it needs a database and Python.)
func ExamplePlayer() {
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
	player, err := harness.NewPlayer(harness.Config{
		Command:     "python3 cmd/internal/harness/examples/python/correct.py",
		Pool:        pool,
		DatabaseURL: url,
		Stderr:      os.Stderr,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The check's pipeline plays each case and judges them.
	rep, err := check.Play(ctx, check.Plan{Cases: player.Cases(), Player: player})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range rep.Cases {
		fmt.Println(c.Case, c.OK)
	}
	fmt.Println(rep.Words)
}
