// Package sandbox runs a reader's own SQL — the four statements a solution
// is made of: the claim, complete, fail and the receiver's rule for a
// delivery — as a Postgres role made for that run alone. It has no HTTP
// and no page; the runner and the API use it.
//
// # Overview
//
// Once at start, with custom SQL on, the server calls Harden. For each run
// that takes a reader's statements:
//
//	role, err := sandbox.NewRole(ctx, pool, run.Schemas) // after judge.Setup
//	defer role.Drop(ctx, pool)                           // before or after judge.Drop
//	claim, err := role.Vet(ctx, sandbox.Claim, text)   // *sandbox.Error: a 400 with its Code, Message, Position
//	conn, err := role.Connect(ctx)                       // or role.ConnConfig() in a worker process
//	res, err := sandbox.Exec(ctx, conn, claim, map[string]any{"owner": "A", "lease": lease})
//
// SpecOf says, for each Kind, the named parameters a statement may use
// (with the types Postgres is told they have), the verbs it may start
// with, the one table it must write, the columns it must return and how
// its result is read.
//
// # Why Postgres's privileges are the sandbox
//
// A statement is not made safe by reading its text: SQL has functions that
// run other SQL (query_to_xml), change the session (set_config), read
// files, sleep. What holds is who runs it. A reader's statement runs in a
// session that logged in as the run's role, so the session user is that
// role: it holds no other role's rights and can become no other role —
// SET ROLE, SET SESSION AUTHORIZATION and set_config('role', …) are all
// refused by Postgres, whatever the statement does. Whatever Vet misses,
// Postgres refuses at run time with the same rights.
//
// This is why statements are not run after SET ROLE on a connection of the
// server's: there the session user is the server's role, and a statement
// as small as
//
//	UPDATE jobs SET error = set_config('role', 'none', false) || query_to_xml('…', true, true, '') …
//
// goes back to the server's role halfway through and runs anything as it.
// Preparing the statement (one statement, no SET) does not stop a function
// call. So the role logs in itself, with a random password that only the
// *Role holds (Postgres gets a SCRAM verifier, so no statement, log line or
// error holds the password; ConnConfig is the one way out, for a worker's
// environment).
//
// # The role's rights
//
//	CONNECT        the database (PUBLIC's), at most ConnectionLimit sessions
//	USAGE          the run's jobs and receiver schemas (and PUBLIC's pg_catalog, public)
//	SELECT, UPDATE jobs
//	SELECT, INSERT, UPDATE deliveries
//	nothing else   no other schema (fencelab_peers, another run's), no job_history,
//	               decisions or outbox, CREATE nowhere, no TEMPORARY, no superuser,
//	               CREATEROLE, CREATEDB, REPLICATION, BYPASSRLS, and it inherits nothing
//
// The history trigger's function is made SECURITY DEFINER, so the role's
// updates are recorded in job_history, which it can neither read nor write:
// verdicts read from the history cannot be forged by a statement.
//
// # Settings
//
// Set on the role for the run's database, and by value again before each
// Exec: statement_timeout 2 s (pg_sleep, a recursive CTE with no end,
// generate_series(1, 1e9) end there), lock_timeout 1 s,
// idle_in_transaction_session_timeout 5 s, work_mem 1 MB, temp_file_limit
// 64 MB (sorts and hashes that spill to disk stop there), and search_path
// the run's two schemas. A statement may change its own session's
// settings, but the timeout of a running statement is armed before it
// starts, and Exec sets them all again before the next; temp_file_limit
// the role cannot change at all.
//
// # What Harden changes, and why
//
// Some rights every role has through PUBLIC, and Postgres cannot deny them
// to one role while PUBLIC holds them: TEMPORARY on the database (a
// temporary table is not capped by temp_file_limit and could fill the
// disk), EXECUTE on pg_notify (a role could send another run's row
// listener events that never happened), on the advisory lock functions (a
// session-level lock could block another run's set-up or make a gone
// server look alive) and on the large-object constructors (a large object
// outlives its session). Harden revokes them from PUBLIC in the current
// database and grants them to the server's own role. NewRole checks that
// the role lacks them and refuses with ErrNotHardened otherwise.
//
// # The checker: an allow-list
//
// Role.Vet runs nothing, and plans nothing. It vets the text (size,
// UTF-8, NUL, invisible characters, one statement, only the kind's named
// parameters, rewritten to $n outside literals, quoted names, comments and
// dollar quotes; quoted names of at most 63 bytes without spaces, brackets
// or backslashes; no U&"…" names; no reg* type named, since their input
// looks names up while the statement is parsed) and its first keyword
// (UPDATE or WITH; INSERT too for the receiver), which turns away every
// utility statement. Then Postgres parses it as the role, on a connection
// of the check's own that asks for the rewritten query tree
// (debug_print_rewritten, sent as a LOG message): every table, function,
// operator and type in it resolved to its oid. The tree is held to the
// allow-list (allow.go) before anything else happens:
//
//	relations   the run's jobs and deliveries, nothing else (no catalog, no pg_stat_*)
//	functions   AllowedFunctions, in pg_catalog: the clock and intervals, numbers,
//	            aggregates count/max/min/sum/bool_*, text and jsonb; casts between
//	            AllowedTypes
//	operators   those of pg_catalog on AllowedTypes
//	types       AllowedTypes, their arrays, and the types of the two tables' columns
//	expressions COALESCE, NULLIF, GREATEST, LEAST, CASE, sub-selects, CTEs, VALUES,
//	            ON CONFLICT; CURRENT_TIMESTAMP and its kin, not CURRENT_USER
//	statements  SELECT, UPDATE and INSERT; never DELETE or a utility statement
//
// Anything else is refused, naming what was used: current_setting,
// version(), pg_relation_size, pg_logical_emit_message, set_config,
// pg_sleep, repeat, generate_series, a window function, pg_class. The
// tree also gives the tables the statement writes, which must be the
// kind's one. The check never plans the statement, so constant folding
// never evaluates the reader's expressions during it (a 600 MB repeat, 1/0).
// Postgres's errors at parse time are told in the reader's terms: the run's
// schema names are taken out, and a schema, qualified table or role that
// does not exist gets the same answer as one the role may not use, so no
// statement learns which exist. Each refusal is an *Error with a Code, one
// sentence, and its position in the reader's own text.
//
// # What it does not do
//
//   - Memory: Postgres has no per-statement memory cap. Vet bounds a
//     statement's shape (MaxQueries, MaxNodes), and the private cluster
//     caps each backend's own memory (pgcluster's BackendMemory); a
//     Postgres of DATABASE_URL's has whatever cap its operator set.
//   - Time past the timeout: Postgres cancels a statement only where it
//     checks for interrupts; WatchOverruns ends the backend of one that
//     runs OverrunGrace past statement_timeout.
//   - Cheating in one's own run: the role may write any column of its own
//     jobs rows and its receiver's deliveries. The history records each
//     write's backend_pid: attribute writes to workers by it, not by
//     application_name.
//   - Values built by allowed expressions (a CTE that doubles a text ten
//     times) are bounded by statement_timeout, and by the byte caps of
//     the events that carry them, not by the allow-list.
//   - A run's own sessions: its workers share the role, so one worker's
//     statement may hold a row lock the other waits for, up to
//     lock_timeout (pg_terminate_backend is off the list).
//   - NOTIFY as a command cannot be revoked; Vet refuses it as a
//     statement, and no function a statement can call runs it.
//   - USAGE on public: PUBLIC has it; the role has no right on any table
//     there, and CREATE there is PUBLIC's no more since PG15.
//   - temp_file_limit needs a superuser to set; a server whose role is
//     not one skips it (temporary tables are denied all the same).
//   - A server with CREATEROLE but no superuser makes itself a member of
//     each role, to drop what it owns; that path is untested here (the
//     tests' cluster runs as a superuser).
//
// # Cleanup
//
// Role.Drop turns the role NOLOGIN, terminates its sessions (so none of
// its statements outlives it), then DROP OWNED and DROP ROLE. A role is
// named after its run's jobs schema (RoleName: fl_<instance>_…_j_sql), so
// the sweep that drops a gone server's schemas finds its roles by the
// same prefix (ListRoles, which lists only roles with settings for the
// current database: roles are shared by the cluster's databases) and drops
// them with DropRole.
package sandbox
