package pgsetup_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/postgres/pgsetup"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	setup = `CREATE SCHEMA IF NOT EXISTS made_once;
CREATE TABLE IF NOT EXISTS made_once.things (id bigint PRIMARY KEY, name text NOT NULL);
CREATE INDEX IF NOT EXISTS things_name ON made_once.things (name);`
	ready = `SELECT EXISTS (SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'made_once' AND c.relname = 'things_name')`
)

// The first instances of a new database, all at once, each of whose
// connections has looked the tables up first and remembers them absent,
// as a server's connections do: every one of them starts, the tables are
// made once, and a second round runs no DDL at all.
func TestOnce_TheFirstInstancesOfADatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := pgtest.Database(t)
	cfg.MaxConns, cfg.MinConns = 1, 1
	// Every DDL statement run on the database is logged, made or not:
	// an event trigger fires for CREATE ... IF NOT EXISTS with nothing to
	// make too.
	logDDL, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(logDDL.Close)
	if _, err := logDDL.Exec(ctx, `CREATE TABLE public.ddl_log (tag text NOT NULL);
CREATE FUNCTION public.log_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.ddl_log VALUES (tg_tag); END $$;
CREATE EVENT TRIGGER log_ddl ON ddl_command_start EXECUTE FUNCTION public.log_ddl();`); err != nil {
		t.Fatal(err)
	}
	ddl := func() int {
		var n int
		if err := logDDL.QueryRow(ctx, `SELECT count(*) FROM public.ddl_log`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	pools := make([]*pgxpool.Pool, 8)
	for i := range pools {
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		if _, err := p.Exec(ctx, "SELECT to_regnamespace('made_once'), to_regclass('made_once.things'), to_regclass('made_once.things_name')"); err != nil {
			t.Fatal(err)
		}
		pools[i] = p
	}
	// The first instance holds the lock while the others come: each of
	// them finds the tables absent and waits for it; then the first makes
	// them and commits.
	firstCfg := cfg.Copy()
	firstCfg.MinConns = 0
	firstPool, err := pgxpool.NewWithConfig(ctx, firstCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(firstPool.Close)
	tx, err := firstPool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.LockSchemas(ctx, tx, "made_once"); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, len(pools))
	var wg sync.WaitGroup
	for i, p := range pools {
		wg.Go(func() { errs[i] = pgsetup.Once(ctx, p, "made_once", ready, setup) })
	}
	for waiting := 0; waiting < len(pools); time.Sleep(20 * time.Millisecond) {
		if err := pgtest.Pool(t).QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
 WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = $1`, cfg.ConnConfig.Database).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, setup); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("instance %d: %v", i, err)
		}
	}
	// The first instance's three statements, and none of the eight that
	// waited: each read the catalog again once it held the lock.
	if n := ddl(); n != 3 {
		t.Errorf("%d DDL statements ran, want the first instance's 3", n)
	}

	// Made: a later start runs no DDL. A session holds the table in
	// ACCESS EXCLUSIVE mode, as no instance would but as any DDL on it
	// would need to wait for; the start returns at once all the same.
	holder, err := pools[1].Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx) //nolint:errcheck // the end of the test
	if _, err := holder.Exec(ctx, "LOCK TABLE made_once.things IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	quick, cancelQuick := context.WithTimeout(ctx, 5*time.Second)
	defer cancelQuick()
	if err := pgsetup.Once(quick, pools[2], "made_once", ready, setup); err != nil {
		t.Errorf("a start once the tables are made, beside a session that holds them: %v (it ran DDL)", err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := ddl(); n != 3 {
		t.Errorf("%d DDL statements ran once a start found the tables made, want still 3", n)
	}
}
