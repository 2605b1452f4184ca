package engine

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// LatestVersion is the newest version of the queue's schema this engine
// knows: the number of its last migration. SetupQueue migrates to it.
const LatestVersion = 3

// migration is one numbered step of the queue's schema, with the SQL that
// takes a schema up to it and the SQL that takes it back down.
type migration struct {
	version  int
	name     string
	up, down string
}

// migrations reads engine/sql/migrations: NNN_name.up.sql and
// NNN_name.down.sql, numbered from 1 without a gap.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(sqlFS, "sql/migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".up.sql")
		if !ok {
			continue
		}
		num, label, _ := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if err != nil || v != len(ms)+1 {
			return nil, fmt.Errorf("migration %s is out of sequence", e.Name())
		}
		up, err := fs.ReadFile(sqlFS, "sql/migrations/"+e.Name())
		if err != nil {
			return nil, err
		}
		down, err := fs.ReadFile(sqlFS, "sql/migrations/"+name+".down.sql")
		if err != nil {
			return nil, fmt.Errorf("migration %s has no down: %w", name, err)
		}
		ms = append(ms, migration{version: v, name: label, up: string(up), down: string(down)})
	}
	if len(ms) != LatestVersion {
		return nil, fmt.Errorf("%d migrations, but LatestVersion is %d", len(ms), LatestVersion)
	}
	return ms, nil
}

// QueueVersion returns the version a queue's schema is at: 0 for a schema
// (or a database) with no queue in it.
func QueueVersion(ctx context.Context, db DB, schema string) (int, error) {
	if err := ValidateSchemaName(schema); err != nil {
		return 0, err
	}
	v, err := queueVersion(ctx, db, schema)
	return v, translate("schema version of "+schema, err)
}

func queueVersion(ctx context.Context, db DB, schema string) (int, error) {
	var kept bool
	st := versionTableExists(schema)
	if err := db.QueryRow(ctx, st.SQL, st.Args...).Scan(&kept); err != nil || !kept {
		return 0, err
	}
	st = versionGet(schema)
	var v int
	err := db.QueryRow(ctx, st.SQL, st.Args...).Scan(&v)
	return v, err
}

// MigrateQueue takes a queue's schema up or down to version (0 to
// LatestVersion; 0 removes the queue's tables and every job in them, but
// leaves the schema and its version table: DropQueue removes those), one
// migration at a time, all in one transaction: a failure leaves the schema
// at the version it was. It returns the version the schema was at before.
// The versions applied are kept in the schema's own schema_migrations
// table. A schema made before versions were kept is taken over as version
// 0: migration 1 creates nothing that is already there. It is safe to run
// from several processes at once; they take turns.
func MigrateQueue(ctx context.Context, db TxDB, schema string, version int) (from int, err error) {
	if err := ValidateSchemaName(schema); err != nil {
		return 0, err
	}
	if version < 0 || version > LatestVersion {
		return 0, invalidf("schema version %d: this engine knows versions 0 to %d", version, LatestVersion)
	}
	ms, err := migrations()
	if err != nil {
		return 0, fmt.Errorf("migrate %s: %w", schema, err)
	}
	err = inTx(ctx, db, func(tx pgx.Tx) error {
		if err := execStatement(ctx, tx, schemaLock(schema)); err != nil {
			return translate("migrate lock", err)
		}
		if from, err = queueVersion(ctx, tx, schema); err != nil {
			return translate("migrate "+schema, err)
		}
		if from > LatestVersion {
			return invalidf("schema %s is at version %d, newer than this engine's %d: run a newer fencelab", schema, from, LatestVersion)
		}
		for _, m := range ms[min(from, version):version] {
			if err := applyMigration(ctx, tx, schema, m.up, m.version, m.name); err != nil {
				return err
			}
			if err := execStatement(ctx, tx, versionAdd(schema, m.version, m.name)); err != nil {
				return translate(fmt.Sprintf("migrate %s to %d", schema, m.version), err)
			}
		}
		for i := from - 1; i >= version; i-- {
			m := ms[i]
			if err := applyMigration(ctx, tx, schema, m.down, m.version-1, m.name+" down"); err != nil {
				return err
			}
			if err := execStatement(ctx, tx, versionRemove(schema, m.version)); err != nil {
				return translate(fmt.Sprintf("migrate %s to %d", schema, m.version-1), err)
			}
		}
		return nil
	})
	return from, err
}

// applyMigration runs one migration's SQL, with the version table made
// first so that the step can be recorded.
func applyMigration(ctx context.Context, tx pgx.Tx, schema, sqlText string, to int, name string) error {
	op := fmt.Sprintf("migrate %s to %d (%s)", schema, to, name)
	sql := strings.NewReplacer("{{schema}}", ident(schema)).Replace(sqlText)
	if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+ident(schema)); err != nil {
		return translate(op, err)
	}
	if err := execStatement(ctx, tx, versionTableCreate(schema)); err != nil {
		return translate(op, err)
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		return translate(op, err)
	}
	return nil
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
	return DropSchemas(ctx, db, schema)
}

// DropSchemas drops each named schema (a queue's, a receiver's, or one of
// the caller's own) and everything in it, in one transaction, under the
// locks LockSchemas takes: a setup or migration of one of them waits, and
// never meets the drop halfway. A name that is not a valid schema name is
// refused (ErrInvalidInput) and nothing is dropped.
func DropSchemas(ctx context.Context, db TxDB, schemas ...string) error {
	for _, s := range schemas {
		if err := ValidateSchemaName(s); err != nil {
			return err
		}
	}
	return inTx(ctx, db, func(tx pgx.Tx) error {
		if err := execStatement(ctx, tx, schemaLock(schemas...)); err != nil {
			return translate("drop lock", err)
		}
		for _, s := range schemas {
			if err := execStatement(ctx, tx, schemaDropOne(s)); err != nil {
				return translate("drop schema "+s, err)
			}
		}
		return nil
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

// LockSchemas takes, until db's transaction ends, the advisory lock that
// SetupQueue, MigrateQueue, DropSchemas and SetupReceiver take on each
// named schema: code of the caller's own that creates or drops things in
// such a schema (a trigger, grants) waits its turn with them. The keys are
// taken in one order, so two callers that share a schema cannot deadlock;
// other schemas are not held up. db must be in a transaction, or the lock
// is gone as soon as it is taken. A name is only hashed into a key, so it
// may also name a set-up of the caller's own that is no schema at all.
func LockSchemas(ctx context.Context, db DB, schemas ...string) error {
	return translate("lock schemas", execStatement(ctx, db, schemaLock(schemas...)))
}
