package sandbox

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/judge"
)

// Settings are the role's session settings, set on the role for the
// run's database (ALTER ROLE … IN DATABASE … SET) and applied again before
// every statement Exec runs (RESET ALL), since a statement may change its
// own session's settings with set_config.
var Settings = []struct{ Name, Value string }{
	// A statement ends after 2 s, whatever it does: pg_sleep, a recursive
	// CTE with no end, generate_series(1, 1e9).
	{"statement_timeout", "2s"},
	// A row lock waited for gives up after 1 s, before the statement's time.
	{"lock_timeout", "1s"},
	// A transaction left open is ended (Exec opens none; a worker's bug might).
	{"idle_in_transaction_session_timeout", "5s"},
	// Sorts and hashes spill to disk early, and that disk is capped.
	{"work_mem", "1MB"},
	{"temp_file_limit", "64MB"},
}

// ConnectionLimit caps the connections one run's role may hold at once:
// its two workers, the receiver, a relay, checks, with room to spare.
const ConnectionLimit = 12

// RoleSuffix ends the name of every role the sandbox makes: the run's
// jobs schema's name, then this.
const RoleSuffix = "_sql"

// RoleName is the name of the role for a run's schemas. A server's run
// schemas start with its prefix (fl_<instance>_), so its roles do too, and
// the sweep that drops a gone server's schemas finds its roles by the same
// prefix (ListRoles).
func RoleName(s judge.Schemas) string { return s.Jobs + RoleSuffix }

// ErrNotHardened is returned by NewRole when the database still gives
// every role what a run's role must not have; Harden takes it away.
var ErrNotHardened = errors.New("sandbox: the database is not hardened")

// hardenLock serializes Harden across servers: two GRANTs on one object at
// once fail with "tuple concurrently updated".
const hardenLock = "fencelab sandbox harden"

// Harden takes away from PUBLIC, in the current database, what every role
// would otherwise have and a run's role must not, and gives it back to
// the server's own role (current_user), which the engine needs:
//
//   - TEMPORARY on the database: a temporary table is not capped by
//     temp_file_limit, so a role that can make them can fill the disk;
//   - EXECUTE on pg_notify: a role that can notify any channel could feed
//     another run's row listener events that never happened;
//   - EXECUTE on the advisory lock functions: a session-level lock
//     outlives the statement and could block another run's set-up, or
//     make a gone server look alive;
//   - EXECUTE on lo_create, lo_creat, lo_from_bytea and lo_import: a large
//     object outlives the session.
//
// Postgres cannot deny these to one role while PUBLIC holds them, so it
// is the database's grants that change; other programs sharing the
// database lose them too unless granted them by name. It needs the
// database's owner and, for pg_catalog's functions, a superuser. It is
// idempotent and safe to call from several servers at once.
func Harden(ctx context.Context, db *pgxpool.Pool) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("harden: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := engine.LockSchemas(ctx, tx, hardenLock); err != nil {
		return fmt.Errorf("harden: lock: %w", err)
	}
	var dbName string
	if err := tx.QueryRow(ctx, "SELECT current_database()").Scan(&dbName); err != nil {
		return fmt.Errorf("harden: %w", err)
	}
	d := pgx.Identifier{dbName}.Sanitize()
	stmts := []string{
		"GRANT TEMPORARY ON DATABASE " + d + " TO CURRENT_USER",
		"REVOKE TEMPORARY ON DATABASE " + d + " FROM PUBLIC",
	}
	rows, err := tx.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p
 WHERE p.pronamespace = 'pg_catalog'::regnamespace
   AND (p.proname IN ('pg_notify', 'lo_create', 'lo_creat', 'lo_from_bytea', 'lo_import')
        OR starts_with(p.proname, 'pg_advisory_') OR starts_with(p.proname, 'pg_try_advisory_'))
 ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("harden: list functions: %w", err)
	}
	funcs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("harden: list functions: %w", err)
	}
	for _, f := range funcs {
		stmts = append(stmts, "GRANT EXECUTE ON FUNCTION "+f+" TO CURRENT_USER", "REVOKE EXECUTE ON FUNCTION "+f+" FROM PUBLIC")
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("harden: %s: %w", strings.SplitN(s, " TO ", 2)[0], err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("harden: commit: %w", err)
	}
	return nil
}

// Role is the Postgres role made for one run: it logs in with a random
// password that only this value holds, and may use that run's two schemas
// and nothing else. Its methods may be called concurrently.
type Role struct {
	name     string
	password string
	schemas  judge.Schemas
	conn     *pgx.ConnConfig // the server's, with this role's user and password

	allowMu sync.Mutex
	allow   *allowList // read once (allowList)
}

// Name is the role's name (not secret).
func (r *Role) Name() string { return r.name }

// Schemas are the run's schemas the role may use.
func (r *Role) Schemas() judge.Schemas { return r.schemas }

// String names the role and never shows its password; so do GoString
// (%#v) and LogValue (log/slog).
func (r *Role) String() string { return "sandbox role " + r.name }

// GoString is String, so that %#v shows no password either.
func (r *Role) GoString() string { return r.String() }

// LogValue logs the role by name alone.
func (r *Role) LogValue() slog.Value { return slog.StringValue(r.name) }

// ConnConfig returns a copy of the server's connection config that logs in
// as the role, for a connection that runs a reader's statements (a
// worker's, the receiver's). It holds the role's password: pass it to a
// child process in its environment (PGPASSWORD), never on a command line,
// and never log it.
func (r *Role) ConnConfig() *pgx.ConnConfig {
	c := r.conn.Copy()
	return c
}

// Connect opens a connection as the role. The caller closes it.
func (r *Role) Connect(ctx context.Context) (*pgx.Conn, error) {
	c, err := pgx.ConnectConfig(ctx, r.ConnConfig())
	if err != nil {
		return nil, fmt.Errorf("connect as %s: %w", r, engine.ErrUnavailable)
	}
	return c, nil
}

// NewRole makes the role for a run whose schemas judge.Setup made, on
// the database the pool reaches. The role
//
//   - logs in (LOGIN, a random 256-bit password sent to Postgres only as a
//     SCRAM verifier, so no statement, log or error holds it), at most
//     ConnectionLimit times at once; it is no superuser, inherits nothing,
//     makes no database, role or replication, bypasses no row security;
//   - may USE the run's two schemas, SELECT and UPDATE jobs, and SELECT,
//     INSERT and UPDATE deliveries: nothing else in them (not job_history,
//     not decisions, not outbox), CREATE nowhere;
//   - starts every session with Settings and its search_path set to the
//     run's schemas, for this database only.
//
// The history triggers' functions are made SECURITY DEFINER (with a fixed
// search_path), so the role's updates of jobs are recorded in tables it
// cannot write (job_history, job_writes). NewRole refuses (ErrNotHardened) while PUBLIC holds what
// Harden takes away. Drop removes the role.
func NewRole(ctx context.Context, db *pgxpool.Pool, s judge.Schemas) (*Role, error) {
	return newRole(ctx, db, s, RoleName(s), true)
}

// WorkerRoleName is the name of the role a check's worker programs log in
// as, for a run's schemas.
func WorkerRoleName(s judge.Schemas) string { return s.Jobs + "_worker" + RoleSuffix }

// NewWorkerRole makes the role that the worker programs of a check
// (`fencelab check --worker`) log in as: NewRole's, with fewer rights.
// It may SELECT and UPDATE the run's jobs, and nothing else: not the
// receiver's deliveries (the check serves the receiver itself), not the
// history or job_writes its verdicts are read from, and as no superuser
// it cannot turn the history's triggers off (session_replication_role).
// Its name is WorkerRoleName; DatabaseURL and Password give it to a
// worker.
func NewWorkerRole(ctx context.Context, db *pgxpool.Pool, s judge.Schemas) (*Role, error) {
	return newRole(ctx, db, s, WorkerRoleName(s), false)
}

// Password is the role's password, for a worker program's environment
// (PGPASSWORD) alone: never a command line, a log or an error.
func (r *Role) Password() string { return r.password }

func newRole(ctx context.Context, db *pgxpool.Pool, s judge.Schemas, roleName string, deliveries bool) (*Role, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	r := &Role{name: roleName, schemas: s, password: randomPassword()}
	r.conn = db.Config().ConnConfig.Copy()
	r.conn.User = r.name
	r.conn.Password = r.password
	verifier, err := scramVerifier(r.password)
	if err != nil {
		return nil, err
	}
	ident := func(n string) string { return pgx.Identifier{n}.Sanitize() }
	name, j, rc := ident(r.name), ident(s.Jobs), ident(s.Receiver)
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("make %s: %w", r, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := engine.LockSchemas(ctx, tx, s.Jobs, s.Receiver); err != nil {
		return nil, fmt.Errorf("make %s: lock: %w", r, err)
	}
	var dbName string
	var super, trigger bool
	if err := tx.QueryRow(ctx, `SELECT current_database(), (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),
 to_regprocedure($1) IS NOT NULL`, s.Jobs+".job_history_record()").Scan(&dbName, &super, &trigger); err != nil {
		return nil, fmt.Errorf("make %s: %w", r, err)
	}
	stmts := []string{
		"CREATE ROLE " + name + " LOGIN NOSUPERUSER NOINHERIT NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS" +
			fmt.Sprintf(" CONNECTION LIMIT %d PASSWORD '%s'", ConnectionLimit, verifier),
	}
	if !super {
		// A CREATEROLE server must be a member to drop what the role owns.
		stmts = append(stmts, "GRANT "+name+" TO CURRENT_USER")
	}
	if deliveries {
		stmts = append(stmts,
			"GRANT USAGE ON SCHEMA "+j+", "+rc+" TO "+name,
			"GRANT SELECT, UPDATE ON TABLE "+j+".jobs TO "+name,
			"GRANT SELECT, INSERT, UPDATE ON TABLE "+rc+".deliveries TO "+name,
		)
	} else {
		stmts = append(stmts,
			"GRANT USAGE ON SCHEMA "+j+" TO "+name,
			"GRANT SELECT, UPDATE ON TABLE "+j+".jobs TO "+name,
		)
	}
	for _, st := range Settings {
		if st.Name == "temp_file_limit" && !super {
			continue // a superuser's setting; documented in doc.go
		}
		stmts = append(stmts, "ALTER ROLE "+name+" IN DATABASE "+ident(dbName)+" SET "+st.Name+" = '"+st.Value+"'")
	}
	stmts = append(stmts, "ALTER ROLE "+name+" IN DATABASE "+ident(dbName)+" SET search_path = "+j+", "+rc)
	if trigger {
		// Both of sql/history.sql's trigger functions: the row history and
		// the statement record (job_writes, and its sequences).
		stmts = append(stmts, "ALTER FUNCTION "+j+".job_history_record() SECURITY DEFINER SET search_path = pg_catalog, pg_temp",
			"ALTER FUNCTION "+j+".job_writes_record() SECURITY DEFINER SET search_path = pg_catalog, pg_temp")
	}
	for _, st := range stmts {
		if _, err := tx.Exec(ctx, st); err != nil {
			return nil, fmt.Errorf("make %s: %s: %w", r, strings.Fields(st)[0]+" "+strings.Fields(st)[1], err)
		}
	}
	var temp, notify bool
	if err := tx.QueryRow(ctx, `SELECT has_database_privilege($1, current_database(), 'TEMPORARY'),
 has_function_privilege($1, 'pg_notify(text,text)', 'EXECUTE')`, r.name).Scan(&temp, &notify); err != nil {
		return nil, fmt.Errorf("make %s: %w", r, err)
	}
	if temp || notify {
		return nil, fmt.Errorf("make %s: %w: PUBLIC may still make temporary tables or notify (call Harden)", r, ErrNotHardened)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("make %s: commit: %w", r, err)
	}
	return r, nil
}

// Drop ends the role's sessions, drops what it owns and its grants in this
// database, and drops it. It is idempotent; the run's schemas are the
// runner's to drop.
func (r *Role) Drop(ctx context.Context, db *pgxpool.Pool) error { return DropRole(ctx, db, r.name) }

// DropRole drops a role the sandbox made, by name (see ListRoles): its
// sessions are terminated first, so none of its statements outlives it.
func DropRole(ctx context.Context, db *pgxpool.Pool, name string) error {
	if !strings.HasSuffix(name, RoleSuffix) {
		return fmt.Errorf("drop role %s: not a sandbox role", name)
	}
	var exists bool
	if err := db.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("drop role %s: %w", name, err)
	}
	if !exists {
		return nil
	}
	// NOLOGIN first, so no new session starts while the old ones end.
	n := pgx.Identifier{name}.Sanitize()
	if _, err := db.Exec(ctx, "ALTER ROLE "+n+" NOLOGIN"); err != nil {
		return fmt.Errorf("drop role %s: %w", name, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		var left int
		if err := db.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = $1`, name).Scan(&left); err != nil {
			return fmt.Errorf("drop role %s: end its sessions: %w", name, err)
		}
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("drop role %s: %w", name, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	for _, st := range []string{"DROP OWNED BY " + n, "DROP ROLE IF EXISTS " + n} {
		if _, err := tx.Exec(ctx, st); err != nil {
			return fmt.Errorf("drop role %s: %w", name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("drop role %s: %w", name, err)
	}
	return nil
}

// ListRoles lists the sandbox's roles for the current database whose names
// start with prefix: those with settings for this database (every role
// NewRole makes has them). Roles are shared by the cluster's databases, so
// a sweep must not take another database's for its own.
func ListRoles(ctx context.Context, db *pgxpool.Pool, prefix string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT r.rolname FROM pg_roles r
  JOIN pg_db_role_setting s ON s.setrole = r.oid
  JOIN pg_database d ON d.oid = s.setdatabase AND d.datname = current_database()
 WHERE starts_with(r.rolname, $1) AND right(r.rolname, length($2)) = $2
 ORDER BY 1`, prefix, RoleSuffix)
	if err != nil {
		return nil, fmt.Errorf("list sandbox roles: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list sandbox roles: %w", err)
	}
	return names, nil
}

func randomPassword() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// scramVerifier is what Postgres stores for a SCRAM-SHA-256 password
// (RFC 5802, RFC 7677); CREATE ROLE … PASSWORD accepts it as is, so the
// password itself never reaches the server.
func scramVerifier(password string) (string, error) {
	const iterations = 4096
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return "", fmt.Errorf("password verifier: %w", err)
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	clientKey := mac(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	server := mac(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(stored[:]), b64(server)), nil
}
