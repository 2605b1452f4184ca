package judge

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/jackc/pgx/v5"
)

// A lab run keeps two Postgres schemas: a job queue's, with the history
// trigger on top that records every change to a job (sql/history.sql), and
// the receiver's. The engine makes the queue and the receiver
// (engine.SetupQueue, engine.SetupReceiver); the history is the lab's, as
// its verdicts are read from it.

//go:embed sql/history.sql
var historySQL string

//go:embed sql/bounds.sql
var boundsSQL string

// boundsOf is sql/bounds.sql for one of a run's schemas and the table a
// reader's statement writes there.
func boundsOf(schema, table string) string {
	return strings.NewReplacer("{{schema}}", ident(schema), "{{table}}", ident(table)).Replace(boundsSQL)
}

// Default schema names, used by the CLI and the tests.
const (
	DefaultJobsSchema     = "fencing_demo"
	DefaultReceiverSchema = "fencing_receiver"
)

// Schemas names the two Postgres schemas a run uses: the job queue's and
// the receiver's. The receiver is another system, so it gets its own.
type Schemas struct {
	Jobs     string `json:"jobs"`
	Receiver string `json:"receiver"`
}

// DefaultSchemas returns fencing_demo and fencing_receiver.
func DefaultSchemas() Schemas {
	return Schemas{Jobs: DefaultJobsSchema, Receiver: DefaultReceiverSchema}
}

// Validate checks both names and that they differ.
func (s Schemas) Validate() error {
	if err := engine.ValidateSchemaName(s.Jobs); err != nil {
		return fmt.Errorf("jobs %w", err)
	}
	if err := engine.ValidateSchemaName(s.Receiver); err != nil {
		return fmt.Errorf("receiver %w", err)
	}
	if s.Jobs == s.Receiver {
		return fault.Invalidf("the jobs and receiver schemas must differ (both are %q)", s.Jobs)
	}
	return nil
}

// Channel returns the NOTIFY channel on which the jobs schema reports each
// row change.
func (s Schemas) Channel() string { return s.Jobs + "_events" }

// Setup creates the lab's two schemas, if they do not exist yet, in one
// transaction: the queue (engine.SetupQueue), the history trigger that
// records (and NOTIFYs) every change to a job, and the receiver
// (engine.SetupReceiver). It is idempotent and safe to call from several
// processes at once: engine.LockSchemas serializes setups of the same schemas.
func Setup(ctx context.Context, db engine.TxDB, s Schemas) error {
	if err := s.Validate(); err != nil {
		return err
	}
	return inTx(ctx, db, func(tx pgx.Tx) error {
		if err := engine.LockSchemas(ctx, tx, s.Jobs, s.Receiver); err != nil {
			return err
		}
		// A pgx.Tx begins a savepoint: the engine's setups are parts of
		// this one transaction.
		if err := engine.SetupQueue(ctx, tx, s.Jobs); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, historyOf(s)); err != nil {
			return dbErr("setup schema "+s.Jobs, err)
		}
		if err := engine.SetupReceiver(ctx, tx, s.Receiver); err != nil {
			return err
		}
		for _, b := range []struct{ schema, table string }{{s.Jobs, "jobs"}, {s.Receiver, "deliveries"}} {
			if _, err := tx.Exec(ctx, boundsOf(b.schema, b.table)); err != nil {
				return dbErr("bound the writes of schema "+b.schema, err)
			}
		}
		return nil
	})
}

// historyOf is sql/history.sql for a run's schemas.
func historyOf(s Schemas) string {
	return strings.NewReplacer("{{schema}}", ident(s.Jobs), "{{channel}}", literal(s.Channel())).Replace(historySQL)
}

// Drop removes both schemas and everything in them.
func Drop(ctx context.Context, db engine.TxDB, s Schemas) error {
	if err := s.Validate(); err != nil {
		return err
	}
	return engine.DropSchemas(ctx, db, s.Jobs, s.Receiver)
}

// Reset drops both schemas and creates them again, empty.
func Reset(ctx context.Context, db engine.TxDB, s Schemas) error {
	if err := Drop(ctx, db, s); err != nil {
		return err
	}
	return Setup(ctx, db, s)
}

// inTx runs fn in a transaction of db's and commits it if fn returns nil.
func inTx(ctx context.Context, db engine.TxDB, fn func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return dbErr("begin", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	return dbErr("commit", tx.Commit(ctx))
}
