// Package pgsetup makes the server's own tables once per database: an
// instance that finds them made runs no DDL, and the first instances of a
// new database make them in turn.
//
// Why not run CREATE ... IF NOT EXISTS at every start: those statements
// take their tables' locks even when there is nothing to make (ALTER
// TABLE an ACCESS EXCLUSIVE one), and deadlock with a running instance's
// writes (40P01). And why the catalog is read as tables: to_regclass and
// the DDL's own IF NOT EXISTS look names up in the backend's catalog
// cache, which still says "absent" after another instance made them while
// this one waited for the lock; a query of pg_class sees the commit.
package pgsetup

import (
	"context"

	"github.com/fencelab/fencelab/engine"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Once runs setup, in one transaction, unless ready says it has nothing
// to do. ready is a query of the catalog's tables (pg_class, pg_attribute,
// pg_namespace), never to_regclass, that answers one boolean: whether the
// last things setup makes are there. Instances that start at once take
// turns under the engine's lock on the name schema (engine.LockSchemas),
// and each reads ready again once it holds it.
func Once(ctx context.Context, pool *pgxpool.Pool, schema, ready, setup string) error {
	if done, err := isReady(ctx, pool, ready); err != nil || done {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := engine.LockSchemas(ctx, tx, schema); err != nil {
			return err
		}
		if done, err := isReady(ctx, tx, ready); err != nil || done {
			return err
		}
		_, err := tx.Exec(ctx, setup)
		return err
	})
}

func isReady(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, ready string) (bool, error) {
	var done bool
	err := db.QueryRow(ctx, ready).Scan(&done)
	return done, err
}
