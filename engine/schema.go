package engine

import (
	"context"
	"embed"
	"hash/fnv"
	"regexp"
	"strings"

	"github.com/fencelab/fencelab/engine/internal/hook"
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

// maxSchemaLen leaves room for a suffix of up to 15 bytes (the lab's
// NOTIFY channel, "_events") inside Postgres's 63-byte identifier limit.
const maxSchemaLen = 48

var schemaNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

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

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

func schemaSQL(file, schema string) (string, error) {
	b, err := sqlFS.ReadFile("sql/" + file)
	if err != nil {
		return "", err
	}
	return strings.NewReplacer("{{schema}}", ident(schema)).Replace(string(b)), nil
}

// schemaLockKey is the advisory lock that serializes setups of one schema:
// CREATE ... IF NOT EXISTS is not safe against itself running at the same
// moment in another session. Setups of different schemas need no order.
func schemaLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("fencelab schema " + schema))
	return int64(h.Sum64())
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
		if err := execStatement(ctx, tx, schemaLock(schema)); err != nil {
			return translate("drop lock", err)
		}
		return translate("drop schema "+schema, execStatement(ctx, tx, schemaDropOne(schema)))
	})
}

// SetupReceiver creates the receiver's schema alone, for a receiver that is
// a service of its own (`fencelab receiver`) with no job queue beside it.
func SetupReceiver(ctx context.Context, db TxDB, schema string) error {
	if err := ValidateSchemaName(schema); err != nil {
		return err
	}
	return inTx(ctx, db, func(tx pgx.Tx) error {
		if err := execStatement(ctx, tx, schemaLock(schema)); err != nil {
			return translate("setup lock", err)
		}
		recv, err := schemaSQL("receiver.sql", schema)
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
	if err := execStatement(ctx, db, schemaDropOne(schema)); err != nil {
		return translate("drop schema "+schema, err)
	}
	return SetupReceiver(ctx, db, schema)
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

func execStatement(ctx context.Context, db DB, st hook.Statement) error {
	_, err := db.Exec(ctx, st.SQL, st.Args...)
	return err
}
