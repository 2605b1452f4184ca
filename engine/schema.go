package engine

import (
	"context"
	"embed"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed sql/*.sql sql/migrations/*.sql
var sqlFS embed.FS

// DB is what the engine needs from a connection: *pgx.Conn, *pgxpool.Pool
// and pgx.Tx all satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TxDB is a DB that can also begin a transaction.
type TxDB interface {
	DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Default schema names, used by the CLI and the tests.
const (
	DefaultJobsSchema     = "fencing_demo"
	DefaultReceiverSchema = "fencing_receiver"
)

// maxSchemaLen leaves room for the "_events" NOTIFY channel suffix inside
// Postgres's 63-byte identifier limit.
const maxSchemaLen = 48

var schemaNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

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

// ValidateSchemaName checks that name is a plain lowercase identifier that
// Postgres would not fold or reject, and not one of its own schemas.
func ValidateSchemaName(name string) error {
	switch {
	case name == "":
		return invalidf("schema name is empty")
	case len(name) > maxSchemaLen:
		return invalidf("schema name %q is longer than %d characters", name, maxSchemaLen)
	case !schemaNameRE.MatchString(name):
		return invalidf("schema name %q must be lowercase letters, digits and underscores, not starting with a digit", name)
	case strings.HasPrefix(name, "pg_") || name == "public" || name == "information_schema":
		return invalidf("schema name %q is reserved", name)
	}
	return nil
}

// Validate checks both names and that they differ.
func (s Schemas) Validate() error {
	if err := ValidateSchemaName(s.Jobs); err != nil {
		return fmt.Errorf("jobs %w", err)
	}
	if err := ValidateSchemaName(s.Receiver); err != nil {
		return fmt.Errorf("receiver %w", err)
	}
	if s.Jobs == s.Receiver {
		return invalidf("the jobs and receiver schemas must differ (both are %q)", s.Jobs)
	}
	return nil
}

// Channel returns the NOTIFY channel on which the jobs schema reports each
// row change.
func (s Schemas) Channel() string { return s.Jobs + "_events" }

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func schemaSQL(file, schema, channel string) (string, error) {
	b, err := sqlFS.ReadFile("sql/" + file)
	if err != nil {
		return "", err
	}
	return strings.NewReplacer("{{schema}}", ident(schema), "{{channel}}", literal(channel)).Replace(string(b)), nil
}

// schemaLockKey is the advisory lock that serializes setups of one schema:
// CREATE ... IF NOT EXISTS is not safe against itself running at the same
// moment in another session. Setups of different schemas need no order.
func schemaLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("fencelab schema " + schema))
	return int64(h.Sum64())
}

// Setup creates the lab's two schemas, if they do not exist yet: the jobs
// with their claimable-rows index and outbox, the history trigger that
// records (and NOTIFYs) every change to a job, and the receiver. It is
// idempotent and safe to call from several processes at once. A queue that
// needs no history uses SetupQueue.
func Setup(ctx context.Context, db TxDB, s Schemas) error {
	if err := s.Validate(); err != nil {
		return err
	}
	return inTx(ctx, db, func(tx pgx.Tx) error {
		if err := execStatement(ctx, tx, SchemaLock(s.Jobs, s.Receiver)); err != nil {
			return translate("setup lock", err)
		}
		if _, err := MigrateQueue(ctx, tx, s.Jobs, LatestVersion); err != nil {
			return err
		}
		for _, part := range []struct{ file, schema, channel string }{
			{"history.sql", s.Jobs, s.Channel()}, {"receiver.sql", s.Receiver, ""},
		} {
			sql, err := schemaSQL(part.file, part.schema, part.channel)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, sql); err != nil {
				return translate("setup schema "+part.schema, err)
			}
		}
		return nil
	})
}

// SetupQueue creates a queue's schema, or migrates it to LatestVersion:
// the jobs (see the package doc for the table), their indexes and the
// outbox, with no history trigger and no NOTIFY, so that no write pays for
// them. It is MigrateQueue(ctx, db, schema, LatestVersion): idempotent, and
// safe to call from several processes at once. Drop it with DropQueue.
func SetupQueue(ctx context.Context, db TxDB, schema string) error {
	_, err := MigrateQueue(ctx, db, schema, LatestVersion)
	return err
}

// DropQueue removes a queue's schema and everything in it.
func DropQueue(ctx context.Context, db TxDB, schema string) error {
	if err := ValidateSchemaName(schema); err != nil {
		return err
	}
	return inTx(ctx, db, func(tx pgx.Tx) error {
		if err := execStatement(ctx, tx, SchemaLock(schema)); err != nil {
			return translate("drop lock", err)
		}
		return translate("drop schema "+schema, execStatement(ctx, tx, SchemaDropOne(schema)))
	})
}

// SetupReceiver creates the receiver's schema alone, for a receiver that is
// a service of its own (`fencelab receiver`) with no job queue beside it.
func SetupReceiver(ctx context.Context, db TxDB, schema string) error {
	if err := ValidateSchemaName(schema); err != nil {
		return err
	}
	return inTx(ctx, db, func(tx pgx.Tx) error {
		if err := execStatement(ctx, tx, SchemaLock(schema)); err != nil {
			return translate("setup lock", err)
		}
		recv, err := schemaSQL("receiver.sql", schema, "")
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, recv); err != nil {
			return translate("setup schema "+schema, err)
		}
		return nil
	})
}

// ResetReceiver drops the receiver's schema and creates it again, empty.
func ResetReceiver(ctx context.Context, db TxDB, schema string) error {
	if err := ValidateSchemaName(schema); err != nil {
		return err
	}
	if err := execStatement(ctx, db, SchemaDropOne(schema)); err != nil {
		return translate("drop schema "+schema, err)
	}
	return SetupReceiver(ctx, db, schema)
}

// Drop removes both schemas and everything in them.
func Drop(ctx context.Context, db TxDB, s Schemas) error {
	if err := s.Validate(); err != nil {
		return err
	}
	return inTx(ctx, db, func(tx pgx.Tx) error {
		if err := execStatement(ctx, tx, SchemaLock(s.Jobs, s.Receiver)); err != nil {
			return translate("drop lock", err)
		}
		if err := execStatement(ctx, tx, SchemaDrop(s)); err != nil {
			return translate("drop schemas "+s.Jobs+", "+s.Receiver, err)
		}
		return nil
	})
}

// Reset drops both schemas and creates them again, empty.
func Reset(ctx context.Context, db TxDB, s Schemas) error {
	if err := Drop(ctx, db, s); err != nil {
		return err
	}
	return Setup(ctx, db, s)
}

func inTx(ctx context.Context, db TxDB, fn func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return translate("begin", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	return translate("commit", tx.Commit(ctx))
}

func execStatement(ctx context.Context, db DB, st Statement) error {
	_, err := db.Exec(ctx, st.SQL, st.Args...)
	return err
}
