package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/fencelab/fencelab/engine"
)

const migrateSummary = `Migrate a job queue's schema up or down: the versioned migrations that
engine.SetupQueue runs, for a deploy step of its own. Each run is one
transaction: a failure leaves the schema at the version it was. Several
instances may run it at once; they take turns. It works on DATABASE_URL,
which must be set.

  fencelab migrate --schema billing_jobs            up to the latest version
  fencelab migrate --schema billing_jobs --to 1     down (or up) to version 1
  fencelab migrate --schema billing_jobs --status   say the version, change nothing`

func migrateCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", migrateSummary, stderr)
	schema := fs.String("schema", "", "the queue's schema (required)")
	to := fs.Int("to", engine.LatestVersion, fmt.Sprintf("the version to migrate to: 0 (no queue tables) to %d", engine.LatestVersion))
	status := fs.Bool("status", false, "print the schema's version and change nothing")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *schema == "":
		return usagef("fencelab migrate: --schema is required")
	case fs.NArg() > 0:
		return usagef("fencelab migrate: unexpected argument %q", fs.Arg(0))
	case strings.TrimSpace(getenv("DATABASE_URL")) == "":
		return usagef("fencelab migrate: set DATABASE_URL to the database whose queue to migrate (a throwaway cluster would be gone when this ends)")
	case *to < 0 || *to > engine.LatestVersion:
		return usagef("fencelab migrate: --to %d: this fencelab knows versions 0 to %d", *to, engine.LatestVersion)
	}
	if err := engine.ValidateSchemaName(*schema); err != nil {
		return usagef("fencelab migrate: --schema: %v", err)
	}
	_, pool, closeDB, err := openDB(ctx, getenv, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	defer closeDB()
	if *status {
		v, err := engine.QueueVersion(ctx, pool, *schema)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "schema %s: version %d (this fencelab's latest: %d)\n", *schema, v, engine.LatestVersion)
		return nil
	}
	from, err := engine.MigrateQueue(ctx, pool, *schema, *to)
	if err != nil {
		return err
	}
	if from == *to {
		fmt.Fprintf(stdout, "schema %s: at version %d already; nothing to do\n", *schema, from)
		return nil
	}
	fmt.Fprintf(stdout, "schema %s: version %d → %d\n", *schema, from, *to)
	return nil
}
