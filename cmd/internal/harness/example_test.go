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
// case, and judge it. It needs $DATABASE_URL and Debian's python3 with python3-psycopg.
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
		Command:     "/usr/bin/python3 examples/python/correct.py",
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
	// Output:
	// new-owner-first true
	// zombie-first true
	// crash-before-commit true
	// clock-skew true
	// same-identity true
	// zombie-fails true
	// Your solution passes: all 6 cases end as the article's table says.
}
