package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/check"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/sandbox/sandboxtest"
)

// checkCmd is the check command for a solution.
func checkCmd(t *testing.T, sol sandbox.Solution) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"action": "check", "solution": sol})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkReport waits for the session's finished check and returns its report.
func (s *sess) checkReport(timeout time.Duration) *protocol.CheckReport {
	s.ts.t.Helper()
	e := s.waitEvent(timeout, "a finished check", func(e protocol.Event) bool {
		return e.Kind == protocol.KindBatch && e.Batch.Name == experiments.BatchCheck && e.Batch.Phase == protocol.BatchFinished
	})
	if e.Batch.Check == nil {
		s.ts.t.Fatalf("the finished check carries no report: %+v", e.Batch)
	}
	return e.Batch.Check
}

// rolesOf counts the sandbox roles there are.
func rolesOf(t *testing.T) int {
	t.Helper()
	var n int
	if err := pgtest.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM pg_roles WHERE rolname LIKE 'fl\\_%\\_sql'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The page's Check it, through the API: a reader's claim that does not
// raise the epoch is run for real in every case, and the report names
// the requirement from what happened; put back, the same solution passes.
// Its runs carry the reader's own statements on the timeline.
func TestCheck_TheReadersStatementsRunForReal(t *testing.T) {
	ts := startServer(t, nil)
	s := ts.newSession()
	sol := sandbox.Ours()
	sol.Claim = strings.Replace(sol.Claim, "       epoch = epoch + 1,\n", "", 1)
	res := s.cmd(checkCmd(t, sol))
	if len(res.Runs) != len(experiments.CheckCases()) {
		t.Fatalf("the check started %d runs, want one per case (%d)", len(res.Runs), len(experiments.CheckCases()))
	}
	rep := s.checkReport(2 * time.Minute)
	if rep.Pass {
		t.Fatalf("a claim that keeps the epoch passes: %+v", rep)
	}
	var named bool
	for _, b := range rep.Broken {
		named = named || b.Requirement == experiments.ReqEpochRaised
	}
	if !named {
		t.Fatalf("the report does not name %s: %+v", experiments.ReqEpochRaised, rep.Broken)
	}
	// The timeline shows their statements as they ran.
	var theirs bool
	for _, e := range s.events(0, res.Runs[0]) {
		if e.Kind == protocol.KindSQL && e.SQL.Op == protocol.OpClaim && e.SQL.Stmt.Name == "ReaderClaim" {
			theirs = !strings.Contains(e.SQL.Stmt.SQL, "epoch + 1")
		}
	}
	if !theirs {
		t.Fatalf("run %s's timeline does not show the reader's claim", res.Runs[0])
	}

	s.cmd(checkCmd(t, sandbox.Ours()))
	waitFor(t, 2*time.Minute, "the second check", func() bool {
		n := 0
		for _, e := range s.events(0, "") {
			if e.Kind == protocol.KindBatch && e.Batch.Name == experiments.BatchCheck && e.Batch.Phase == protocol.BatchFinished {
				n++
			}
		}
		return n == 2
	})
	var last *protocol.CheckReport
	for _, e := range s.events(0, "") {
		if e.Kind == protocol.KindBatch && e.Batch.Phase == protocol.BatchFinished && e.Batch.Check != nil {
			last = e.Batch.Check
		}
	}
	if !last.Pass {
		t.Fatalf("our own statements do not pass: %s %+v", last.Words, last.Broken)
	}
	waitFor(t, 20*time.Second, "the checks' roles are dropped", func() bool { return rolesOf(t) == 0 })
}

// Every attack is refused with a 400 that says why and where, starts no
// run, and leaves no schema and no role behind.
func TestCheck_AttacksAreRefusedAndLeaveNothing(t *testing.T) {
	ts := startServer(t, nil)
	s := ts.newSession()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	victim := judge.Schemas{Jobs: pgtest.Schema(t), Receiver: pgtest.Schema(t)}
	if err := judge.Setup(ctx, pool, victim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = judge.Drop(context.Background(), pool, victim) })
	attacks := []struct {
		name string
		kind sandbox.Kind
		text string
	}{
		{"another run's schema", sandbox.Complete, fmt.Sprintf("UPDATE %s.jobs SET status = 'done' WHERE id = :id", victim.Jobs)},
		{"another run's schema, read", sandbox.Complete, fmt.Sprintf("UPDATE jobs SET error = (SELECT string_agg(owner, ',') FROM %s.jobs) WHERE id = :id", victim.Jobs)},
		{"fencelab_peers", sandbox.Fail, "UPDATE jobs SET error = (SELECT count(*)::text FROM fencelab_peers) WHERE id = :id"},
		{"pg_read_file", sandbox.Complete, "UPDATE jobs SET error = pg_read_file('/etc/passwd') WHERE id = :id"},
		{"COPY TO PROGRAM", sandbox.Complete, "COPY jobs TO PROGRAM 'touch /tmp/fencelab-pwned'"},
		{"SET ROLE", sandbox.Claim, "SET ROLE postgres"},
		{"set_config role", sandbox.Complete, "UPDATE jobs SET error = set_config('role', 'postgres', false) WHERE id = :id"},
		{"creating a function", sandbox.Fail, "CREATE FUNCTION fl_evil() RETURNS int LANGUAGE sql AS 'SELECT 1'"},
		{"pg_sleep(60)", sandbox.Complete, "UPDATE jobs SET error = pg_sleep(60)::text WHERE id = :id"},
		{"a recursive CTE with no end", sandbox.Fail, "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) UPDATE jobs SET error = (SELECT max(n)::text FROM r) WHERE id = :id"},
		{"generate_series(1, 1e9)", sandbox.Complete, "UPDATE jobs SET error = (SELECT sum(g)::text FROM generate_series(1, 1000000000) g) WHERE id = :id"},
		{"a temp table", sandbox.Claim, "CREATE TEMP TABLE fill AS SELECT repeat('x', 1000000) FROM generate_series(1, 100000)"},
		{"sorting to fill the disk", sandbox.Fail, "UPDATE jobs SET error = (SELECT md5(string_agg(x, '' ORDER BY x)) FROM (SELECT md5(g::text) || repeat('y', 200) AS x FROM generate_series(1, 3000000) g) s) WHERE id = :id"},
		{"LISTEN", sandbox.Receiver, "LISTEN fencelab"},
		{"NOTIFY", sandbox.Receiver, "NOTIFY fencelab, 'a row that never changed'"},
		{"pg_notify", sandbox.Complete, "UPDATE jobs SET error = pg_notify('fencelab', 'x')::text WHERE id = :id"},
		{"an advisory lock", sandbox.Claim, "UPDATE jobs SET owner = :owner WHERE id = (SELECT id FROM jobs WHERE pg_advisory_lock(42) IS NOT NULL LIMIT 1) RETURNING id, owner, epoch, lease_until"},
		{"dblink", sandbox.Receiver, "INSERT INTO deliveries (job_id, epoch, owner, payload) SELECT * FROM dblink('dbname=postgres', 'SELECT 1, 1, ''x'', ''{}''::jsonb') AS t(a bigint, b bigint, c text, d jsonb)"},
		{"two statements", sandbox.Complete, "UPDATE jobs SET status = 'done' WHERE id = :id; DROP TABLE jobs"},
	}
	schemas, roles := schemasOf(t, ts), rolesOf(t)
	for _, a := range attacks {
		sol := sandbox.Ours().With(a.kind, a.text)
		start := time.Now()
		ans := s.try(checkCmd(t, sol))
		var body struct {
			Error  string
			Code   string
			Detail *sandbox.Detail
		}
		ans.json(t, &body)
		if ans.Status != http.StatusBadRequest || body.Detail == nil || body.Detail.Kind != a.kind.String() || body.Error == "" {
			t.Errorf("%s: %d %s, want a 400 about the %s", a.name, ans.Status, ans.Body, a.kind)
			continue
		}
		t.Logf("%s: %s (%s, in %v)", a.name, body.Error, body.Detail.Code, time.Since(start).Round(time.Millisecond))
	}
	for _, e := range s.events(0, "") {
		if e.Kind == protocol.KindBatch || e.Kind == protocol.KindRunState {
			t.Fatalf("a refused check started something: %+v", e)
		}
	}
	if got := schemasOf(t, ts); got != schemas {
		t.Errorf("schemas: %d before, %d after", schemas, got)
	}
	if got := rolesOf(t); got != roles {
		t.Errorf("roles: %d before, %d after", roles, got)
	}
	var victims int
	if err := pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.jobs", victim.Jobs)).Scan(&victims); err != nil || victims != 0 {
		t.Errorf("the other run's jobs: %d rows, %v", victims, err)
	}
}

// A server started with custom SQL off refuses the check command, and
// says why.
func TestCheck_NoCustomSQLRefuses(t *testing.T) {
	ts := startServer(t, func(c *api.Config) { c.NoCustomSQL = true })
	s := ts.newSession()
	ans := s.try(checkCmd(t, sandbox.Ours()))
	if ans.Status != http.StatusForbidden || !strings.Contains(ans.errText(), "--no-custom-sql") {
		t.Fatalf("check on a server without custom SQL: %d %s", ans.Status, ans.Body)
	}
}

// Bad input in a check command is refused before anything happens: a
// lone surrogate, a NUL, a missing statement, an unknown field, a lease
// out of range.
func TestCheck_BadCommands(t *testing.T) {
	ts := startServer(t, nil)
	s := ts.newSession()
	ours, _ := json.Marshal(sandbox.Ours())
	for _, body := range []string{
		`{"action":"check"}`,
		`{"action":"check","solution":{"claim":"UPDATE jobs SET owner = '\ud800' WHERE id = 1"}}`,
		`{"action":"check","solution":{"claim":"UPDATE\u0000 jobs","complete":"x","fail":"x","receiver":"x"}}`,
		`{"action":"check","solution":{"claim":"","complete":"x","fail":"x","receiver":"x"}}`,
		`{"action":"check","solution":{"claim":"x","complete":"x","fail":"x","receiver":"x","extra":"x"}}`,
		`{"action":"check","solution":"UPDATE jobs"}`,
		`{"action":"check","solution":` + string(ours) + `,"lease_ms":99999999999999999999}`,
		// Inside a run's bounds, past a check's: every case would wait a minute.
		`{"action":"check","solution":` + string(ours) + `,"lease_ms":60000}`,
		`{"action":"check","solution":` + string(ours) + `,"ordering":"zombie-first"}`,
	} {
		ans := s.try(body)
		if ans.Status != http.StatusBadRequest || ans.errText() == "" {
			t.Errorf("%s: %d %s, want a 400 with a reason", body, ans.Status, ans.Body)
		}
	}
	// Six at once: each is answered — played (200), or replaced by a newer
	// one while it waited in line (409) — and the session ends up with one
	// check that finishes.
	codes := s.tryAtOnce(6, checkCmd(t, sandbox.Ours()))
	played := 0
	for _, c := range codes {
		if c != http.StatusOK && c != http.StatusConflict && c != http.StatusServiceUnavailable {
			t.Fatalf("six checks at once: %v", codes)
		}
		if c == http.StatusOK {
			played++
		}
	}
	if played == 0 {
		t.Fatalf("six checks at once, none played: %v", codes)
	}
	rep := s.checkReport(2 * time.Minute)
	if !rep.Pass {
		t.Fatalf("ours, sent six times at once, does not pass: %+v", rep)
	}
	waitFor(t, 30*time.Second, "every check's roles are dropped", func() bool { return rolesOf(t) == 0 })
}

// Recordings are the lab's alone: a reader's check, whose runs carry their
// own statements (here the start's, which the zombie beats, with a marker
// in the owner their claim returns), is never kept as a setup's recording,
// so what the busy demo shows every other reader as "a recorded run of
// this very setup" stays the lab's fenced build.
func TestRecordings_AReadersCheckIsNeverShownAsTheSetups(t *testing.T) {
	ts := startServer(t, nil)
	s := ts.newSession()
	sol := sandbox.Start()
	sol.Claim = strings.Replace(sol.Claim, "RETURNING id, owner, epoch", "RETURNING id, owner || ' visitor-was-here' AS owner, epoch", 1)
	if !strings.Contains(sol.Claim, "visitor-was-here") {
		t.Fatal("the start's claim returns no owner to mark")
	}
	s.cmd(checkCmd(t, sol))
	if rep := s.checkReport(2 * time.Minute); rep.Pass {
		t.Fatalf("the start passes: %+v", rep)
	}
	for _, o := range []experiments.Ordering{experiments.NewOwnerFirst, experiments.ZombieFirst} {
		a := ts.do(http.MethodGet, "/api/recordings/find?ordering="+string(o)+"&broken=", "", "", "")
		if a.Status != http.StatusOK {
			t.Fatalf("find %s: %d %s", o, a.Status, a.Body)
		}
		if strings.Contains(string(a.Body), "visitor-was-here") || strings.Contains(string(a.Body), `"custom":true`) {
			t.Errorf("the %s recording every reader is shown is the visitor's run", o)
		}
		var r struct {
			Outcome *protocol.Outcome
			Seed    bool
		}
		if err := json.Unmarshal(a.Body, &r); err != nil || r.Outcome == nil || !r.Outcome.Safe {
			t.Errorf("the %s recording of the fenced build is not safe: %v %+v", o, err, r.Outcome)
		}
	}
	if a := ts.do(http.MethodGet, "/api/recordings", "", "", ""); strings.Contains(string(a.Body), "visitor-was-here") {
		t.Error("the recordings' list holds the visitor's run")
	}
}

// The public server's attacks, through the server, each refused by the
// allow-list before anything runs: reads of what other readers' runs
// leave in the catalog and the server's settings, WAL written outside any
// transaction's rollback, and a constant Postgres would fold while the
// check waits. Against bbdd733 every one of these passed the check (the
// WAL one wrote 200 MB in each trial run), or was refused only after it
// had run.
func TestCheck_WhatOneVisitorCouldReadOrWriteIsRefused(t *testing.T) {
	ts := startServer(t, nil)
	s := ts.newSession()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	var walBefore string
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&walBefore); err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		name string
		kind sandbox.Kind
		text string
		says string // what the refusal names
	}{
		{"WAL outside the rollback", sandbox.Complete, "UPDATE jobs SET error = pg_logical_emit_message(false, 'x', repeat('x', 100000000))::text WHERE id = :id", "pg_logical_emit_message"},
		{"the server's sessions, by size", sandbox.Fail, "UPDATE jobs SET error = pg_relation_size('jobs')::text WHERE id = :id", "pg_relation_size"},
		{"the server's version", sandbox.Fail, "UPDATE jobs SET error = version() WHERE id = :id", "version"},
		{"a setting", sandbox.Fail, "UPDATE jobs SET error = current_setting('data_directory') WHERE id = :id", "current_setting"},
		{"other runs' sessions", sandbox.Fail, "UPDATE jobs SET error = (SELECT string_agg(application_name, ',') FROM pg_stat_activity) WHERE id = :id", "pg_stat_activity"},
		{"every schema's name", sandbox.Fail, "UPDATE jobs SET error = (SELECT string_agg(nspname, ',') FROM pg_namespace) WHERE id = :id", "pg_namespace"},
		{"every role's name", sandbox.Fail, "UPDATE jobs SET error = (SELECT string_agg(rolname, ',') FROM pg_roles) WHERE id = :id", "pg_roles"},
		{"locks", sandbox.Fail, "UPDATE jobs SET error = (SELECT count(*)::text FROM pg_locks) WHERE id = :id", "pg_locks"},
		{"a 600 MB constant, folded while the check waits", sandbox.Complete, "UPDATE jobs SET error = repeat('x', 600000000) WHERE id = :id", "repeat"},
	} {
		ans := s.try(checkCmd(t, sandbox.Ours().With(a.kind, a.text)))
		var body struct {
			Error  string
			Detail *sandbox.Detail
		}
		ans.json(t, &body)
		if ans.Status != http.StatusBadRequest || body.Detail == nil || body.Detail.Code != sandbox.CodeForbiddenCall || !strings.Contains(body.Error, a.says) {
			t.Errorf("%s: %d %s, want a 400 forbidden-call naming %s", a.name, ans.Status, ans.Body, a.says)
		}
	}
	var wal int64
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn() - $1::pg_lsn", walBefore).Scan(&wal); err != nil {
		t.Fatal(err)
	}
	if wal > 64<<20 {
		t.Errorf("the refused checks wrote %d MB of WAL", wal>>20)
	}
	t.Logf("WAL written by nine refused checks: %d kB", wal>>10)
}

// The page's check plays again, as a run of its own, a case whose run
// Postgres's statement timeout ended (as the CLI's does: check's
// TestCheck_ACaseEndedByTheStatementTimeoutIsPlayedAgain): here a claim
// that is slow for worker B alone, so it is slow in both plays and says so.
func TestCheck_ACaseEndedByTheStatementTimeoutIsPlayedAgain(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	sol := sandboxtest.SlowClaimFor("worker-b") // slow by CPU for B alone: only the time limit ends it
	res := s.cmd(checkCmd(t, sol))
	rep := s.checkReport(3 * time.Minute)
	again := 0
	for _, c := range rep.Cases {
		if c.Error == nil {
			continue
		}
		if !c.Error.TimedOut() || slices.Contains(res.Runs, c.Run) || !slices.Contains(c.Notes, check.NoteTimedOutTwice) {
			t.Errorf("%s: run %q (the batch's: %v), error %+v, notes %q; want a second run of its own, the timeout, and the note", c.Case, c.Run, res.Runs, c.Error, c.Notes)
		}
		again++
	}
	if again == 0 || rep.Pass {
		t.Fatalf("no case ran past the statement timeout (pass %v)", rep.Pass)
	}
}
