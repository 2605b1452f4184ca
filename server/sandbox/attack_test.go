package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/servertest"
)

// peersSetup makes the server's own table, as server/session does.
const peersSetup = `CREATE SCHEMA IF NOT EXISTS fencelab_peers;
CREATE TABLE IF NOT EXISTS fencelab_peers.sessions (id text PRIMARY KEY, instance text NOT NULL)`

// extensionSetup is what an extension installed in public would add: a
// function and an operator on text that every role may call (PUBLIC has
// EXECUTE on a new function), which only the allow-list's schema test
// refuses — their types are all allowed.
const extensionSetup = `CREATE OR REPLACE FUNCTION public.fl_spy(a text, b text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT a = b';
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_operator WHERE oprname = '###' AND oprnamespace = 'public'::regnamespace) THEN
    CREATE OPERATOR public.### (LEFTARG = text, RIGHTARG = text, FUNCTION = public.fl_spy);
  END IF;
END $$`

// makeExtension installs extensionSetup for one test, and drops it after.
func makeExtension(t *testing.T, r *run) {
	t.Helper()
	if _, err := r.pool.Exec(context.Background(), extensionSetup); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = r.pool.Exec(context.Background(), "DROP OPERATOR IF EXISTS public.### (text, text); DROP FUNCTION IF EXISTS public.fl_spy(text, text)")
	})
}

// TestCheck_Attacks sends what an attacker would, and wants each refused
// by Check, with its code, before anything runs.
func TestCheck_Attacks(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	other := newRun(t)
	ctx := context.Background()
	makePeers(t, r)
	makeExtension(t, r)
	file := filepath.Join(os.TempDir(), "fencelab-sandbox-"+strconv.Itoa(os.Getpid()))
	before := snapshot(t, r)
	for _, a := range []struct {
		name string
		kind sandbox.Kind
		sql  string
		code sandbox.Code
		at   string // the text the error's position must point at ("" for none)
	}{
		{"another run's schema", sandbox.Complete, "UPDATE jobs SET error = (SELECT owner FROM " + other.schemas.Jobs + ".jobs LIMIT 1) WHERE id = :id", sandbox.CodeDenied, other.schemas.Jobs},
		{"another run's receiver", sandbox.Receiver, "INSERT INTO " + other.schemas.Receiver + ".deliveries (job_id, epoch, owner, payload) VALUES (:job_id, :epoch, :owner, :body)", sandbox.CodeDenied, other.schemas.Receiver},
		{"the server's own table", sandbox.Complete, "UPDATE jobs SET error = (SELECT string_agg(id, ',') FROM fencelab_peers.sessions) WHERE id = :id", sandbox.CodeDenied, "fencelab_peers"},
		{"the history, written", sandbox.Complete, "WITH h AS (DELETE FROM job_history RETURNING 1) UPDATE jobs SET error = 'x' WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"the decisions, read", sandbox.Receiver, "INSERT INTO deliveries (job_id, epoch, owner, payload) SELECT job_id, epoch, owner, payload FROM decisions", sandbox.CodeForbiddenCall, ""},
		{"a second table, with rights", sandbox.Claim, "WITH d AS (UPDATE deliveries SET epoch = 0 RETURNING 1) UPDATE jobs SET owner = :owner RETURNING id, owner, epoch, lease_until", sandbox.CodeWrongTable, ""},
		{"a delete of jobs", sandbox.Complete, "WITH d AS (DELETE FROM jobs RETURNING 1) UPDATE jobs SET error = 'x' WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"pg_read_file", sandbox.Complete, "UPDATE jobs SET error = pg_read_file('/etc/passwd') WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"pg_ls_dir", sandbox.Complete, "UPDATE jobs SET error = (SELECT string_agg(f, ',') FROM pg_ls_dir('.') f) WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"lo_import", sandbox.Complete, "UPDATE jobs SET error = lo_import('/etc/passwd')::text WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"lo_from_bytea", sandbox.Complete, "UPDATE jobs SET error = lo_from_bytea(0, 'x')::text WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"COPY TO PROGRAM", sandbox.Complete, "COPY (SELECT 1) TO PROGRAM 'touch " + file + "'", sandbox.CodeWrongKind, "COPY"},
		{"SET ROLE", sandbox.Complete, "SET ROLE fencelab", sandbox.CodeWrongKind, "SET"},
		{"RESET ROLE", sandbox.Complete, "RESET ROLE", sandbox.CodeWrongKind, "RESET"},
		{"SET SESSION AUTHORIZATION", sandbox.Complete, "SET SESSION AUTHORIZATION fencelab", sandbox.CodeWrongKind, "SET"},
		{"CREATE FUNCTION", sandbox.Complete, "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$", sandbox.CodeWrongKind, "CREATE"},
		{"DO", sandbox.Complete, "DO $$ BEGIN PERFORM pg_sleep(60); END $$", sandbox.CodeWrongKind, "DO"},
		{"two statements", sandbox.Complete, "UPDATE jobs SET error = 'x' WHERE id = :id; DROP TABLE jobs", sandbox.CodeNotOne, "DROP"},
		{"a temp table", sandbox.Complete, "CREATE TEMP TABLE t AS SELECT repeat('x', 1000000) FROM generate_series(1, 1000)", sandbox.CodeWrongKind, "CREATE"},
		{"SELECT INTO a temp table", sandbox.Claim, "SELECT * INTO TEMP t FROM jobs", sandbox.CodeWrongKind, "SELECT"},
		{"LISTEN", sandbox.Complete, "LISTEN " + other.schemas.Jobs + "_events", sandbox.CodeWrongKind, "LISTEN"},
		{"NOTIFY", sandbox.Complete, "NOTIFY " + other.schemas.Jobs + "_events, '{}'", sandbox.CodeWrongKind, "NOTIFY"},
		{"pg_notify", sandbox.Complete, "UPDATE jobs SET error = pg_notify('" + other.schemas.Jobs + "_events', '{}')::text WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"pg_advisory_lock", sandbox.Complete, "UPDATE jobs SET error = pg_advisory_lock(1)::text WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"pg_try_advisory_xact_lock", sandbox.Claim, "UPDATE jobs SET owner = :owner WHERE pg_try_advisory_xact_lock(id) RETURNING id, owner, epoch, lease_until", sandbox.CodeForbiddenCall, ""},
		{"dblink", sandbox.Complete, "UPDATE jobs SET error = (SELECT x FROM dblink('host=example.com', 'SELECT 1') AS t(x text)) WHERE id = :id", sandbox.CodeUnknownName, "dblink"},
		{"CREATE EXTENSION dblink", sandbox.Complete, "CREATE EXTENSION dblink", sandbox.CodeWrongKind, "CREATE"},
		{"LOCK TABLE", sandbox.Complete, "LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE", sandbox.CodeWrongKind, "LOCK"},
		{"a plain SELECT", sandbox.Claim, "SELECT id, owner, epoch, lease_until FROM jobs", sandbox.CodeWrongKind, "SELECT"},
		{"a WITH that writes nothing", sandbox.Complete, "WITH x AS (SELECT 1) SELECT * FROM x", sandbox.CodeWrongTable, ""},
		{"an INSERT as a claim", sandbox.Claim, "INSERT INTO jobs (payload) VALUES ('{}') RETURNING id, owner, epoch, lease_until", sandbox.CodeWrongKind, "INSERT"},
		{"a claim that returns no epoch", sandbox.Claim, "UPDATE jobs SET owner = :owner RETURNING id, owner, lease_until", sandbox.CodeMissingColumn, ""},
		{"a claim whose epoch is text", sandbox.Claim, "UPDATE jobs SET owner = :owner RETURNING id, owner, epoch::text AS epoch, lease_until", sandbox.CodeMissingColumn, ""},
		{"EXPLAIN ANALYZE", sandbox.Complete, "EXPLAIN ANALYZE UPDATE jobs SET error = 'x'", sandbox.CodeWrongKind, "EXPLAIN"},
		{"a syntax error", sandbox.Complete, "UPDATE jobs SET error = 'x' WHERE id = :id )", sandbox.CodeSyntax, ")"},
		{"a syntax error after a character past U+FFFF", sandbox.Complete, "UPDATE jobs SET error = '😀' WHERE id = :id )", sandbox.CodeSyntax, ")"},
		{"an unknown column", sandbox.Complete, "UPDATE jobs SET eror = 'x' WHERE id = :id", sandbox.CodeUnknownName, "eror"},
		{"the timeout turned off", sandbox.Complete, "UPDATE jobs SET error = set_config('statement_timeout', '0', false) || pg_sleep(60)::text WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"SET ROLE by set_config", sandbox.Complete, "UPDATE jobs SET error = set_config('role', 'fencelab', false) WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"another worker's name, by set_config", sandbox.Complete, "UPDATE jobs SET error = pg_catalog.set_config('application_name', 'B', false) WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"SQL run by query_to_xml", sandbox.Complete, "UPDATE jobs SET error = query_to_xml('SELECT ' || 'pg_read_file(''/etc/passwd'')', true, true, '')::text WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"SQL run by ts_stat", sandbox.Complete, "UPDATE jobs SET error = (SELECT string_agg(word, ',') FROM ts_stat('SELECT to_tsvector(owner) FROM jobs')) WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"SQL run by ts_rewrite", sandbox.Complete, "UPDATE jobs SET error = ts_rewrite('a'::tsquery, 'SELECT ''a''::tsquery, ''b''::tsquery')::text WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		// The allow-list (issue: what one visitor's SQL can do to every other reader):
		{"WAL that escapes the rollback", sandbox.Complete, "UPDATE jobs SET error = pg_logical_emit_message(false, 'x', repeat('x', 1000000))::text WHERE id = :id", sandbox.CodeForbiddenCall, "pg_logical_emit_message"},
		{"a table's size", sandbox.Complete, "UPDATE jobs SET attempts = pg_relation_size('jobs')::int WHERE id = :id", sandbox.CodeForbiddenCall, "pg_relation_size"},
		{"another table's size", sandbox.Complete, "UPDATE jobs SET attempts = pg_relation_size('fencelab_peers.sessions')::int WHERE id = :id", sandbox.CodeDenied, "'fencelab_peers"},
		{"the server's version", sandbox.Complete, "UPDATE jobs SET error = version() WHERE id = :id", sandbox.CodeForbiddenCall, "version"},
		{"a sensitive setting", sandbox.Complete, "UPDATE jobs SET error = current_setting('data_directory') WHERE id = :id", sandbox.CodeForbiddenCall, "current_setting"},
		{"every schema's name", sandbox.Complete, "UPDATE jobs SET error = (SELECT max(nspname) FROM pg_namespace) WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"the catalog, qualified", sandbox.Complete, "UPDATE jobs SET error = (SELECT max(rolname) FROM pg_catalog.pg_roles) WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"other sessions", sandbox.Complete, "UPDATE jobs SET error = (SELECT max(application_name) FROM pg_stat_activity) WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"locks", sandbox.Complete, "UPDATE jobs SET attempts = (SELECT count(*) FROM pg_locks)::int WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"the role's name", sandbox.Complete, "UPDATE jobs SET error = current_user WHERE id = :id", sandbox.CodeForbiddenCall, "current_user"},
		{"another backend ended", sandbox.Complete, "UPDATE jobs SET error = pg_terminate_backend(1)::text WHERE id = :id", sandbox.CodeForbiddenCall, "pg_terminate_backend"},
		{"a sleep", sandbox.Complete, "UPDATE jobs SET error = pg_sleep(60)::text WHERE id = :id", sandbox.CodeForbiddenCall, "pg_sleep"},
		{"a series of a billion", sandbox.Complete, "UPDATE jobs SET attempts = (SELECT count(*) FROM generate_series(1, 1e9))::int WHERE id = :id", sandbox.CodeForbiddenCall, "generate_series"},
		{"a name looked up while parsing", sandbox.Complete, "UPDATE jobs SET error = 'fencelab_peers.sessions'::regclass::text WHERE id = :id", sandbox.CodeForbiddenCall, "regclass"},
		{"a name looked up, qualified and quoted", sandbox.Complete, "UPDATE jobs SET error = 'x'::pg_catalog.\"regrole\"::text WHERE id = :id", sandbox.CodeForbiddenCall, "\"regrole\""},
		{"a window function", sandbox.Complete, "UPDATE jobs SET attempts = (SELECT max(r) FROM (SELECT row_number() OVER () AS r FROM jobs) s)::int WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"a name with a brace", sandbox.Complete, "UPDATE jobs SET error = 'x' WHERE id = :id RETURNING id AS \"{FUNCEXPR\"", sandbox.CodeBadText, "\"{"},
		{"a name spelled in escapes", sandbox.Complete, "UPDATE jobs SET error = 'x' WHERE id = :id RETURNING id AS U&\"\\0028\"", sandbox.CodeBadText, "U&"},
		{"an aggregate off the list", sandbox.Complete, "UPDATE jobs SET error = (SELECT string_agg(owner, ',') FROM jobs) WHERE id = :id", sandbox.CodeForbiddenCall, "string_agg"},
		{"a value of a type off the list", sandbox.Complete, "UPDATE jobs SET error = ('<a/>'::xml)::text WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"an extension's operator", sandbox.Complete, "UPDATE jobs SET error = (owner OPERATOR(public.###) 'x')::text WHERE id = :id", sandbox.CodeForbiddenCall, ""},
		{"an extension's function", sandbox.Complete, "UPDATE jobs SET error = public.fl_spy(owner, 'x')::text WHERE id = :id", sandbox.CodeForbiddenCall, "public.fl_spy"},
		{"a delete of deliveries", sandbox.Receiver, "WITH d AS (DELETE FROM deliveries RETURNING 1) INSERT INTO deliveries (job_id, epoch, owner, payload) VALUES (:job_id, :epoch, :owner, :body)", sandbox.CodeForbiddenCall, ""},
		{"a receiver writing jobs", sandbox.Receiver, "UPDATE jobs SET error = 'x' WHERE id = :job_id", sandbox.CodeWrongTable, ""},
	} {
		_, err := r.role.Vet(ctx, a.kind, a.sql)
		var e *sandbox.Error
		if !errors.As(err, &e) || !errors.Is(err, sandbox.ErrRefused) {
			t.Errorf("%s: %v, want a %s refusal", a.name, err, a.code)
			continue
		}
		if e.Code != a.code {
			t.Errorf("%s: %s (%s), want %s", a.name, e.Code, e.Message, a.code)
		}
		if e.Message == "" || strings.Contains(e.Message, "\n") || strings.Contains(e.Message, "password") {
			t.Errorf("%s: message %q", a.name, e.Message)
		}
		if a.at != "" {
			want := len([]rune(a.sql[:strings.Index(a.sql, a.at)])) + 1
			if e.Position != want {
				t.Errorf("%s: position %d, want %d (at %q): %s", a.name, e.Position, want, a.at, e.Message)
			}
		}
		t.Logf("%s: %s: %s", a.name, e.Code, e.Message)
	}
	if _, err := os.Stat(file); err == nil {
		os.Remove(file)
		t.Errorf("COPY TO PROGRAM made %s", file)
	}
	if after := snapshot(t, r); after != before {
		t.Errorf("the attacks left something behind:\n before %s\n after  %s", before, after)
	}
}

// TestExec_RuntimeBounds runs statements that pass Check and must be
// stopped by the role's settings and rights while they run.
func TestExec_RuntimeBounds(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	ctx := context.Background()
	if _, err := r.pool.Exec(ctx, "INSERT INTO "+r.schemas.Jobs+".jobs (payload) VALUES ('{}')"); err != nil {
		t.Fatal(err)
	}
	// A server connection held for the whole test: a pool's idle one may
	// be closed before the attack names it, and pg_terminate_backend of a
	// pid that is no backend only warns, refusing nothing.
	held, err := r.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	var serverPID int
	if err := held.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&serverPID); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, r)
	conn := mustConn(t, r)
	for _, a := range []struct {
		name  string
		sql   string
		codes []sandbox.Code
	}{
		{"a billion rows counted", "UPDATE jobs SET error = " + burn + " WHERE id = :id", []sandbox.Code{sandbox.CodeTimeout}},
		{"the next billion, after that", "UPDATE jobs SET error = " + burn + " WHERE id = :id", []sandbox.Code{sandbox.CodeTimeout}},
		{"a recursive CTE with no end", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) UPDATE jobs SET attempts = (SELECT count(*) FROM n)::int WHERE id = :id", []sandbox.Code{sandbox.CodeTimeout, sandbox.CodeTooBig}},
		{"a sort that fills the disk", "UPDATE jobs SET error = (SELECT max(x) FROM (SELECT concat(a.x, b.x, c.x, d.x, e.x, f.x, '" + strings.Repeat("x", 400) + "') AS x FROM " + tens("a", "b", "c", "d", "e", "f") + " ORDER BY 1) s) WHERE id = :id", []sandbox.Code{sandbox.CodeTimeout, sandbox.CodeTooBig}},
	} {
		c, err := r.role.Vet(ctx, sandbox.Complete, a.sql)
		if err != nil {
			t.Errorf("%s: Check: %v", a.name, err)
			continue
		}
		start := time.Now()
		_, err = sandbox.Exec(ctx, conn, c, map[string]any{"id": int64(1)})
		took := time.Since(start)
		var e *sandbox.Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %v, want refused with one of %v", a.name, err, a.codes)
			continue
		}
		ok := false
		for _, code := range a.codes {
			ok = ok || e.Code == code
		}
		if !ok {
			t.Errorf("%s: %s (%s), want one of %v", a.name, e.Code, e.Message, a.codes)
		}
		if took > slack {
			t.Errorf("%s: took %v, want the 2 s statement timeout (and at most %v on a loaded machine)", a.name, took, slack)
		}
		t.Logf("%s: %s in %v: %s", a.name, e.Code, took.Round(10*time.Millisecond), e.Message)
	}
	if after := snapshot(t, r); after != before {
		t.Errorf("the statements left something behind:\n before %s\n after  %s", before, after)
	}
}

// TestExec_ACancelIsNotTheStatementsTimeout: a statement its caller
// cancels (pgx cancels it in Postgres) ends with the caller's own error;
// the reader is not told their statement ran too long, and the caller
// gets its own cancel back.
func TestExec_ACancelIsNotTheStatementsTimeout(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	if _, err := r.pool.Exec(context.Background(), "INSERT INTO "+r.schemas.Jobs+".jobs (payload) VALUES ('{}')"); err != nil {
		t.Fatal(err)
	}
	conn := mustConn(t, r)
	c, err := r.role.Vet(context.Background(), sandbox.Complete, "UPDATE jobs SET error = "+burn+" WHERE id = :id")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = sandbox.Exec(ctx, conn, c, map[string]any{"id": int64(1)})
	var e *sandbox.Error
	if errors.As(err, &e) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a cancelled statement: %v (a refusal: %v), want the caller's deadline and no refusal", err, e != nil)
	}
}

// TestRole_PostgresRefusesWhatCheckTurnsAway connects as the role and
// sends, as its own statements, what Check refuses by their kind: Postgres's
// rights hold without the checker.
func TestRole_PostgresRefusesWhatCheckTurnsAway(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	ctx := context.Background()
	makePeers(t, r)
	conn := mustConn(t, r)
	for _, sql := range []string{
		"CREATE TEMP TABLE t (x int)",
		"CREATE TABLE " + r.schemas.Jobs + ".t (x int)",
		"CREATE TABLE public.t (x int)",
		"CREATE FUNCTION " + r.schemas.Jobs + ".f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$",
		"SET ROLE fencelab",
		"SET SESSION AUTHORIZATION fencelab",
		"COPY (SELECT 1) TO PROGRAM 'true'",
		"COPY (SELECT 1) TO '/tmp/fencelab-sandbox-copy'",
		"DO $$ BEGIN CREATE TEMP TABLE t (x int); END $$",
		"LOCK TABLE " + r.schemas.Jobs + ".job_history",
		"SELECT pg_notify('x', 'y')",
		"SELECT pg_advisory_lock(1)",
		"SELECT lo_from_bytea(0, 'x')",
		"CREATE EXTENSION dblink",
		"ALTER ROLE " + r.role.Name() + " SUPERUSER",
		"SET temp_file_limit = -1",
		// What Check refuses as calls, which Postgres refuses too:
		"SELECT set_config('role', 'fencelab', false)",
		"SELECT set_config('session_authorization', 'fencelab', false)",
		"SELECT query_to_xml('SELECT pg_read_file(''/etc/passwd'')', true, true, '')",
		"SELECT query_to_xml('SELECT * FROM fencelab_peers.sessions', true, true, '')",
		"SELECT query_to_xml('CREATE TEMP TABLE t (x int)', true, true, '')",
		"SELECT query_to_xml('SELECT pg_advisory_lock(1)', true, true, '')",
	} {
		if _, err := conn.Exec(ctx, sql); err == nil {
			t.Errorf("as the role, %q ran", sql)
		}
	}
	// A statement that turns its own timeout off still ends at it: the
	// timer was armed before it started.
	start := time.Now()
	if _, err := conn.Exec(ctx, "SELECT set_config('statement_timeout', '0', false), pg_sleep(30)"); err == nil || time.Since(start) > slack {
		t.Errorf("a sleep after set_config('statement_timeout', '0'): %v after %v", err, time.Since(start))
	}
	if _, err := os.Stat("/tmp/fencelab-sandbox-copy"); err == nil {
		t.Error("COPY TO a file made it")
	}
	if n := snapshot(t, r); !strings.Contains(n, "owns 0") {
		t.Errorf("the role owns something: %s", n)
	}
}

// TestExec_TheRolesOwnDefaultsDoNotLoosenIt: a session of the role may
// change the role's defaults (ALTER ROLE itself SET …; Check never lets it
// through), and Exec's statements keep their timeout all the same.
func TestExec_TheRolesOwnDefaultsDoNotLoosenIt(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	ctx := context.Background()
	raw := mustConn(t, r)
	var db string
	if err := raw.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{"", " IN DATABASE " + db} {
		if _, err := raw.Exec(ctx, "ALTER ROLE "+r.role.Name()+in+" SET statement_timeout = 0"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.pool.Exec(ctx, "INSERT INTO "+r.schemas.Jobs+".jobs (payload) VALUES ('{}')"); err != nil {
		t.Fatal(err)
	}
	c, err := r.role.Vet(ctx, sandbox.Complete, "UPDATE jobs SET error = "+burn+" WHERE id = :id")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = sandbox.Exec(ctx, mustConn(t, r), c, map[string]any{"id": int64(1)})
	if e := (*sandbox.Error)(nil); !errors.As(err, &e) || e.Code != sandbox.CodeTimeout || time.Since(start) > slack {
		t.Fatalf("a sleep after the role's own timeout was turned off: %v after %v", err, time.Since(start))
	}
}

// tens is a FROM list of ten-row VALUES, one for each name: their cross
// join has 10^len(names) rows, made as they are read.
func tens(names ...string) string {
	var from []string
	for _, n := range names {
		from = append(from, "(VALUES (1),(2),(3),(4),(5),(6),(7),(8),(9),(10)) "+n+"(x)")
	}
	return strings.Join(from, " CROSS JOIN ")
}

// burn is an expression the allow-list passes that takes far longer than
// the statement timeout, with no disk: a billion rows counted.
var burn = "(SELECT count(*)::text FROM " + tens("a", "b", "c", "d", "e", "f", "g", "h", "i") + ")"

// slack is how long a statement the 2 s timeout ends may take on a
// machine shared with other builds: far from the 30 or 60 s it asked for.
const slack = 6 * time.Second

// snapshot says what there is that an attack could leave behind: the
// run's relations and functions, what the role owns anywhere (tables,
// temp tables, functions, large objects: pg_shdepend), and its sessions.
func snapshot(t *testing.T, r *run) string {
	t.Helper()
	var rels, funcs, owned int
	err := r.pool.QueryRow(context.Background(), `SELECT
  (SELECT count(*) FROM pg_class WHERE relnamespace IN (to_regnamespace($1), to_regnamespace($2))),
  (SELECT count(*) FROM pg_proc WHERE pronamespace IN (to_regnamespace($1), to_regnamespace($2))),
  (SELECT count(*) FROM pg_shdepend d JOIN pg_roles r ON r.oid = d.refobjid WHERE r.rolname = $3 AND d.deptype = 'o')`,
		r.schemas.Jobs, r.schemas.Receiver, r.role.Name()).Scan(&rels, &funcs, &owned)
	if err != nil {
		t.Fatal(err)
	}
	return "relations " + strconv.Itoa(rels) + ", functions " + strconv.Itoa(funcs) + ", the role owns " + strconv.Itoa(owned)
}

// TestCheck_RunsNothingTheReaderWrote: the check reads Postgres's tree of
// the statement and never plans it, so not even a constant expression is
// evaluated — planning folds 1/0 into an error, and folded a 600 MB
// repeat until the timeout while the check waited.
func TestCheck_RunsNothingTheReaderWrote(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	ctx := context.Background()
	c, err := r.role.Vet(ctx, sandbox.Complete, "UPDATE jobs SET attempts = 1/0 WHERE id = :id")
	if err != nil {
		t.Fatalf("a constant that fails when evaluated: Check %v, want it passed (Check evaluates nothing)", err)
	}
	if _, err := r.pool.Exec(ctx, "INSERT INTO "+r.schemas.Jobs+".jobs (payload) VALUES ('{}')"); err != nil {
		t.Fatal(err)
	}
	var e *sandbox.Error
	if _, err := sandbox.Exec(ctx, mustConn(t, r), c, map[string]any{"id": int64(1)}); !errors.As(err, &e) || !strings.Contains(e.Message, "division by zero") {
		t.Fatalf("the same statement run: %v, want division by zero", err)
	}
	_, err = r.role.Vet(ctx, sandbox.Complete, "UPDATE jobs SET error = repeat('x', 600000000) WHERE id = :id")
	if !errors.As(err, &e) || e.Code != sandbox.CodeForbiddenCall || !strings.Contains(e.Message, "repeat(text,integer)") {
		t.Fatalf("a 600 MB constant: %v, want forbidden-call naming repeat", err)
	}
}

// TestCheck_SaysTheSameOfNamesThatExistAndNamesThatDoNot: a statement
// cannot learn which schemas, tables or roles there are from the check's
// answers.
func TestCheck_SaysTheSameOfNamesThatExistAndNamesThatDoNot(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	other := newRun(t)
	makePeers(t, r)
	ctx := context.Background()
	for _, pair := range [][2]string{
		{"fencelab_peers.sessions", "no_such_schema.sessions"},
		{other.schemas.Jobs + ".jobs", other.schemas.Jobs + "x.jobs"},
		{other.schemas.Jobs + ".jobs", "public.no_such_table"},
	} {
		var msgs [2]string
		for i, name := range pair {
			for _, sql := range []string{
				"UPDATE jobs SET error = (SELECT max(id::text) FROM " + name + ") WHERE id = :id",
				"UPDATE jobs SET attempts = pg_relation_size('" + name + "')::int WHERE id = :id",
			} {
				_, err := r.role.Vet(ctx, sandbox.Complete, sql)
				var e *sandbox.Error
				if !errors.As(err, &e) {
					t.Fatalf("%s: %v, want refused", sql, err)
				}
				msgs[i] += string(e.Code) + ": " + e.Message + "\n"
			}
		}
		if msgs[0] != msgs[1] {
			t.Errorf("%s and %s are told apart:\n%s\n%s", pair[0], pair[1], msgs[0], msgs[1])
		}
	}
}

// doubling is a claim the allow-list passes whose owner comes back 2 MiB
// long: a text doubled 21 times in a recursive CTE (the byte attack, with
// repeat refused).
const doubling = `WITH RECURSIVE d(s, n) AS (SELECT 'x'::text, 0 UNION ALL SELECT s || s, n + 1 FROM d WHERE n < 21),
big AS (SELECT s FROM d WHERE n = 21)
UPDATE jobs SET status = 'running', owner = :owner, epoch = epoch + 1, lease_until = now() + :lease
 WHERE id = (SELECT id FROM jobs WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, owner || (SELECT s FROM big) AS owner, epoch, lease_until`

// TestExec_AResultOverItsCapIsRefused: a value over MaxValueBytes, or a
// result over MaxResultBytes, is refused with too-big and kept nowhere.
func TestExec_AResultOverItsCapIsRefused(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	ctx := context.Background()
	if _, err := r.pool.Exec(ctx, "INSERT INTO "+r.schemas.Jobs+".jobs (payload) SELECT '{}' FROM generate_series(1, 20)"); err != nil {
		t.Fatal(err)
	}
	conn := mustConn(t, r)
	for _, a := range []struct{ name, sql, want string }{
		{"one value of 2 MiB", doubling, "2097153 bytes in owner"},
		{"many values under the cap", `UPDATE jobs SET status = 'running', owner = :owner, epoch = epoch + 1, lease_until = now() + :lease
RETURNING id, owner, epoch, lease_until, concat(` + strings.Repeat("owner, ", 90) + `'` + strings.Repeat("y", 7000) + `') AS pad`, "more than 65536 bytes in all"},
	} {
		c, err := r.role.Vet(ctx, sandbox.Claim, a.sql)
		if err != nil {
			t.Fatalf("%s: Check: %v", a.name, err)
		}
		res, err := sandbox.Exec(ctx, conn, c, map[string]any{"owner": "A", "lease": time.Minute})
		var e *sandbox.Error
		if !errors.As(err, &e) || e.Code != sandbox.CodeTooBig || !strings.Contains(e.Message, a.want) || res != nil {
			t.Errorf("%s: %v (%v), want too-big saying %q", a.name, err, res != nil, a.want)
		}
		t.Logf("%s: %v", a.name, err)
	}
}

// TestExec_AMessageThatQuotesABigValueIsCut: Postgres quotes the value it
// could not read; a refusal carries at most MaxMessageBytes of it.
func TestExec_AMessageThatQuotesABigValueIsCut(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	ctx := context.Background()
	if _, err := r.pool.Exec(ctx, "INSERT INTO "+r.schemas.Jobs+".jobs (payload) VALUES ('{}')"); err != nil {
		t.Fatal(err)
	}
	c, err := r.role.Vet(ctx, sandbox.Complete, `WITH RECURSIVE d(s, n) AS (SELECT 'x'::text, 0 UNION ALL SELECT s || s, n + 1 FROM d WHERE n < 20)
UPDATE jobs SET attempts = (SELECT s FROM d WHERE n = 20)::int WHERE id = :id`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sandbox.Exec(ctx, mustConn(t, r), c, map[string]any{"id": int64(1)})
	var e *sandbox.Error
	if !errors.As(err, &e) || len(e.Message) > sandbox.MaxMessageBytes+100 || !strings.Contains(e.Message, "more bytes]") {
		t.Fatalf("a 1 MiB value quoted: %d bytes of message (%v), want it cut to %d", len(e.Message), err != nil, sandbox.MaxMessageBytes)
	}
}

// TestVet_AStatementsShapeIsBounded: a sub-select that doubles a text,
// nested 20 and 24 times (the 952-byte statement that once grew a backend
// to 8.7 GB while Postgres planned it), and a chain of CTEs that does the
// same, are refused by Vet before anything runs, naming the bound; ours,
// and a statement at the bound, are not.
func TestVet_AStatementsShapeIsBounded(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	ctx := context.Background()
	nested := func(n int) string {
		inner := "(SELECT 'xxxxxxxxxxxxxxxx'::text AS t)"
		for range n {
			inner = "(SELECT s.t || s.t AS t FROM " + inner + " s)"
		}
		return "UPDATE jobs SET error = " + inner + " WHERE id = :id"
	}
	chain := func(n int) string {
		ctes := []string{"c0 AS (SELECT 'xxxxxxxxxxxxxxxx'::text AS t)"}
		for i := 1; i < n; i++ {
			ctes = append(ctes, "c"+strconv.Itoa(i)+" AS (SELECT t || t AS t FROM c"+strconv.Itoa(i-1)+")")
		}
		return "WITH " + strings.Join(ctes, ", ") + " UPDATE jobs SET error = (SELECT t FROM c" + strconv.Itoa(n-1) + ") WHERE id = :id"
	}
	for _, sql := range []string{nested(20), nested(24), nested(sandbox.MaxQueries - 1), chain(sandbox.MaxQueries - 1)} {
		start := time.Now()
		_, err := r.role.Vet(ctx, sandbox.Complete, sql)
		var se *sandbox.Error
		if !errors.As(err, &se) || se.Code != sandbox.CodeForbiddenCall || !strings.Contains(se.Message, "queries") {
			t.Errorf("%.60s… (%d bytes): %v; want it refused for its queries", sql, len(sql), err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("refusing it took %v", took)
		}
	}
	flat := "UPDATE jobs SET attempts = GREATEST(" + strings.Repeat("1,", 3000) + "1) WHERE id = :id" // under 8 KiB of text
	var se *sandbox.Error
	if _, err := r.role.Vet(ctx, sandbox.Complete, flat); !errors.As(err, &se) || !strings.Contains(se.Message, "parts (its query tree's nodes)") {
		t.Errorf("GREATEST of 3,001 numbers: %v; want it refused for its nodes", err)
	}
	for _, sql := range []string{nested(sandbox.MaxQueries - 2), chain(sandbox.MaxQueries - 2), sandbox.Ours().Complete} {
		if _, err := r.role.Vet(ctx, sandbox.Complete, sql); err != nil {
			t.Errorf("%.60s…: %v; want it passed", sql, err)
		}
	}
}

// TestEndOverruns_AStatementPastItsTimeIsEnded: a reader's session that
// has lifted its own statement timeout (a statement may change its
// session's settings) and runs on is ended by EndOverruns, once it has
// run the timeout and the grace; the server's own session goes on.
func TestEndOverruns_AStatementPastItsTimeIsEnded(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	ctx := context.Background()
	conn, err := r.role.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET statement_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := conn.Exec(ctx, "SELECT pg_sleep(60)")
		done <- err
	}()
	var ended []sandbox.Overrun
	for time.Since(start) < 20*time.Second && len(ended) == 0 {
		time.Sleep(200 * time.Millisecond)
		o, err := sandbox.EndOverruns(ctx, r.pool)
		if err != nil {
			t.Fatal(err)
		}
		if len(o) > 0 && time.Since(start) < 3*time.Second {
			t.Fatalf("ended after %v, before the timeout and the grace: %+v", time.Since(start), o)
		}
		ended = o
	}
	if len(ended) != 1 || ended[0].Role != r.role.Name() || !ended[0].Stopped {
		t.Fatalf("ended %+v; want the reader's one backend", ended)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the statement ran to its end")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the statement still runs after its backend was ended")
	}
	var one int
	if err := r.pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the server's own session after it: %v", err)
	}
}

// TestExec_AStatementsWritesAreBounded: a run's tables are UNLOGGED (no
// WAL for a stranger's rows), and a reader's statement that writes more
// than 1,000 rows, or more than 1 MiB, of a run's table is refused whole
// (too-big), leaving nothing written; one at the bound is not, and the
// server's own statements are not counted.
func TestExec_AStatementsWritesAreBounded(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	ctx := context.Background()
	var logged []string
	rows, err := r.pool.Query(ctx, `SELECT c.oid::regclass::text FROM pg_class c
 WHERE c.relnamespace IN ($1::regnamespace, $2::regnamespace) AND c.relkind IN ('r', 'i') AND c.relpersistence <> 'u'`, r.schemas.Jobs, r.schemas.Receiver)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		_ = rows.Scan(&n)
		logged = append(logged, n)
	}
	if rows.Close(); len(logged) > 0 {
		t.Errorf("a run's relations that still write WAL: %v", logged)
	}
	conn := mustConn(t, r)
	deliveries := func(n int, pad int) string {
		return fmt.Sprintf(`INSERT INTO deliveries AS held (job_id, epoch, owner, payload)
SELECT g, :epoch, :owner, jsonb_build_object('pad', '%s') FROM (SELECT (a.x - 1) * 100 + (b.x - 1) * 10 + (c.x - 1) + (d.x - 1) * 1000 AS g FROM %s) s WHERE g < %d
ON CONFLICT (job_id) DO NOTHING`, strings.Repeat("x", pad), tens("a", "b", "c", "d"), n)
	}
	count := func() int {
		var n int
		if err := r.pool.QueryRow(ctx, "SELECT count(*) FROM "+r.schemas.Receiver+".deliveries").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, a := range []struct {
		name string
		sql  string
		want string // in the refusal; "" for none
	}{
		{"1,001 rows", deliveries(1001, 1), "at most 1000 rows"},
		{"900 rows of 2 KiB", deliveries(900, 2048), "at most 1 MiB"},
		{"1,000 rows", deliveries(1000, 1), ""},
	} {
		before := count()
		c, err := r.role.Vet(ctx, sandbox.Receiver, a.sql)
		if err != nil {
			t.Fatalf("%s: Vet: %v", a.name, err)
		}
		_, err = sandbox.Exec(ctx, conn, c, map[string]any{"epoch": 1, "owner": "A"})
		var se *sandbox.Error
		switch {
		case a.want == "" && err != nil:
			t.Errorf("%s: %v; want it written", a.name, err)
		case a.want != "" && (!errors.As(err, &se) || se.Code != sandbox.CodeTooBig || !strings.Contains(se.Message, a.want)):
			t.Errorf("%s: %v; want too-big naming %q", a.name, err, a.want)
		case a.want != "" && count() != before:
			t.Errorf("%s: refused, but %d rows stayed written", a.name, count()-before)
		}
	}
	if _, err := r.pool.Exec(ctx, "INSERT INTO "+r.schemas.Jobs+".jobs (payload) SELECT '{}' FROM generate_series(1, 5000)"); err != nil {
		t.Fatalf("the server's own 5,000 jobs: %v", err)
	}
}

// TestWatchOverruns_ADatabaseThatDoesNotAnswerIsSaidInWords: with the
// database unreachable the watch says so once, in its own words: never
// the driver's error (a failed connection's names the user and the
// database) and never a grant of pg_signal_backend, which has nothing to
// do with it.
func TestWatchOverruns_ADatabaseThatDoesNotAnswerIsSaidInWords(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "host="+t.TempDir()+" user=fl_watch_probe dbname=fl_watch_db connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	logs := &servertest.LogBuffer{}
	stop := sandbox.WatchOverruns(pool, slog.New(slog.NewTextHandler(logs, nil)))
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "level=WARN") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	got := logs.String()
	if !strings.Contains(got, "the database does not answer") {
		t.Fatalf("the watch did not say the database does not answer:\n%s", got)
	}
	for _, leak := range []string{"user=", "fl_watch_probe", "fl_watch_db", "pg_signal_backend"} {
		if strings.Contains(got, leak) {
			t.Errorf("the watch's log carries %q:\n%s", leak, got)
		}
	}
	if n := strings.Count(got, "does not answer"); n != 1 {
		t.Errorf("an outage said %d times, want once:\n%s", n, got)
	}
}
