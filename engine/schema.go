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
