package judge_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// setup makes a lab run's two schemas, which pgtest drops when the test
// ends (or keeps, when it failed).
func setup(t *testing.T) (*pgxpool.Pool, judge.Schemas) {
	t.Helper()
	pool := pgtest.Pool(t)
	s := judge.Schemas{Jobs: pgtest.Schema(t), Receiver: pgtest.Schema(t)}
	if err := judge.Setup(context.Background(), pool, s); err != nil {
		t.Fatal(err)
	}
	return pool, s
}

// ops lists a job's history ops as the trigger recorded them.
func ops(t *testing.T, db engine.DB, schema string, jobID int64) []string {
	t.Helper()
	hs, err := judge.History(context.Background(), db, schema, jobID)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range hs {
		out = append(out, h.Op)
	}
	return out
}

// TestHistory_AnExpiryIsItsOwnOp checks, on a real Postgres, how the
// history trigger tells the two ways a running job ends failed: a claim
// that found the lease run out on the job's last attempt bumps the epoch
// (the engine's poison-job rule), and is recorded as an expire, which the
// lab counts as no claim and no late write, but as the job's end; a
// worker's own failure report keeps the epoch, and is a fail.
func TestHistory_AnExpiryIsItsOwnOp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, s := setup(t)
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: s.Jobs})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(owner string, maxAttempts int) engine.Claim {
		t.Helper()
		if _, err := q.Insert(ctx, []byte(`{}`), maxAttempts); err != nil {
			t.Fatal(err)
		}
		c, err := q.Claim(ctx, owner, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// A failure report on the last attempt, by the engine itself.
	failed := claim("worker-a", 1)
	if st, err := q.Fail(ctx, failed, "on purpose"); err != nil || st != engine.StatusFailed {
		t.Fatalf("fail on the last attempt: %v, %v", st, err)
	}
	if got, want := ops(t, pool, s.Jobs, failed.JobID), []string{"insert", "claim", "fail"}; !slices.Equal(got, want) {
		t.Errorf("a failure report on the last attempt is recorded as %v, want %v", got, want)
	}

	// The poison rule's end, written as the engine's claim writes it: the
	// holder's row, failed, at the next epoch, by another connection.
	expired := claim("worker-a", 1)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET application_name = "+pgx.Identifier{protocol.AppName(experiments.NewOwner)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "UPDATE "+pgx.Identifier{s.Jobs, "jobs"}.Sanitize()+
		" SET status = 'failed', epoch = epoch + 1, lease_until = NULL, updated_at = now() WHERE id = $1", expired.JobID); err != nil {
		t.Fatal(err)
	}
	if got, want := ops(t, pool, s.Jobs, expired.JobID), []string{"insert", "claim", "expire"}; !slices.Equal(got, want) {
		t.Errorf("a running job failed at the next epoch is recorded as %v, want %v", got, want)
	}

	// What the lab reads from it: the expiry ended its job, failed; it is
	// neither a claim nor a zombie's write.
	hs, err := judge.History(ctx, pool, s.Jobs, expired.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if vs := judge.Violations(hs, nil, nil); len(vs) != 0 {
		t.Errorf("an expiry breaks %v", vs)
	}
	tally, err := judge.Tally(ctx, pool, s)
	if err != nil {
		t.Fatal(err)
	}
	if tally.Failed != 2 || tally.LateRow != 0 {
		t.Errorf("the tally counts %d failed and %d late writes, want 2 and 0", tally.Failed, tally.LateRow)
	}
	all, err := judge.HistoryAfter(ctx, pool, s.Jobs, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	span, err := judge.Span(ctx, pool, s)
	if err != nil {
		t.Fatal(err)
	}
	// The first claim is failed's, and the last end is expired's expiry:
	// counted as the end of its job, it ends the span.
	if want := all[len(all)-1].At.Sub(all[1].At); span != want {
		t.Errorf("the span is %v, want %v (from the first claim to the last end)", span, want)
	}
}

// TestHistory_ALostConnectionIsUnavailable checks that the lab's own
// statements say a connection the server ended as engine.ErrUnavailable,
// as the engine's do: the runner drops a run's schemas again after an
// outage only for that error, and the load lab tells a restart from its
// own failure by it.
func TestHistory_ALostConnectionIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, s := setup(t)
	for name, read := range map[string]func(db engine.DB) error{
		"history": func(db engine.DB) error { _, err := judge.History(ctx, db, s.Jobs, 1); return err },
		"tally":   func(db engine.DB) error { _, err := judge.Tally(ctx, db, s); return err },
	} {
		conn, err := pgx.Connect(ctx, pgtest.DSN(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", conn.PgConn().PID()); err != nil {
			t.Fatal(err)
		}
		err = read(conn)
		if !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("a %s read on a connection the server ended: %v, want engine.ErrUnavailable", name, err)
		}
		_ = conn.Close(ctx)
	}
}

// count returns how many rows a table of a schema has.
func count(t *testing.T, db engine.DB, schema, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{schema, table}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSetup_IsIdempotentAndSafeConcurrently: six setups of one run's
// schemas at once, a setup on a live schema keeps its jobs, and a reset
// empties them.
func TestSetup_IsIdempotentAndSafeConcurrently(t *testing.T) {
	t.Parallel()
	pool, s := setup(t)
	ctx := context.Background()
	errs := make(chan error, 6)
	for range 6 {
		go func() { errs <- judge.Setup(ctx, pool, s) }()
	}
	for range 6 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent setup: %v", err)
		}
	}
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: s.Jobs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Insert(ctx, []byte(`{}`), 0); err != nil {
		t.Fatal(err)
	}
	if err := judge.Setup(ctx, pool, s); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, s.Jobs, "jobs"); n != 1 {
		t.Fatalf("setup on a live schema lost data: %d jobs, want 1", n)
	}
	if err := judge.Reset(ctx, pool, s); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, s.Jobs, "jobs"); n != 0 {
		t.Fatalf("reset left %d jobs", n)
	}
}

// TestSetup_BadNamesAreRefusedAndCreateNothing.
func TestSetup_BadNamesAreRefusedAndCreateNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	for _, name := range []string{"", "Fencing", "1abc", "a-b", `x";drop schema public;--`, "pg_catalog", "public", "fencing.demo", "ünï"} {
		if err := judge.Setup(ctx, pool, judge.Schemas{Jobs: name, Receiver: "fine_receiver_x"}); !errors.Is(err, engine.ErrInvalidInput) {
			t.Errorf("Setup(%q) = %v, want ErrInvalidInput", name, err)
		}
	}
	if err := judge.Setup(ctx, pool, judge.Schemas{Jobs: "same_x", Receiver: "same_x"}); !errors.Is(err, engine.ErrInvalidInput) {
		t.Errorf("identical schemas: %v, want ErrInvalidInput", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname IN ('fine_receiver_x', 'same_x')").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("a refused setup created %d schemas", n)
	}
}

// TestHistoryAfter_ReadsWhatAListenerMissed: every job's changes after a
// history seq, in order, a page at a time; bad bounds are bad input.
func TestHistoryAfter_ReadsWhatAListenerMissed(t *testing.T) {
	t.Parallel()
	pool, s := setup(t)
	ctx := context.Background()
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: s.Jobs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Insert(ctx, []byte(`{}`), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Claim(ctx, "worker-a", 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	b, err := q.Claim(ctx, "worker-b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Complete(ctx, b, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	all, err := judge.HistoryAfter(ctx, pool, s.Jobs, 0, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, h := range all {
		if h.Seq != int64(i+1) {
			t.Fatalf("history seqs %v: not 1, 2, 3…", all)
		}
		got = append(got, h.Op)
	}
	if !slices.Equal(got, []string{"insert", "claim", "claim", "complete"}) || all[2].NewEpoch != 2 {
		t.Fatalf("history after 0 is %v: %+v", got, all)
	}
	page, err := judge.HistoryAfter(ctx, pool, s.Jobs, 2, 1)
	if err != nil || len(page) != 1 || page[0].Seq != 3 {
		t.Fatalf("history after 2, one record: %+v, %v", page, err)
	}
	for _, bad := range [][2]int64{{-1, 10}, {0, 0}, {0, 10_001}} {
		if _, err := judge.HistoryAfter(ctx, pool, s.Jobs, bad[0], int(bad[1])); !errors.Is(err, engine.ErrInvalidInput) {
			t.Errorf("history after %d, limit %d: %v, want ErrInvalidInput", bad[0], bad[1], err)
		}
	}
}

// TestWrites_EveryUpdateIsRecordedWhatItMatchedAndARolledBackOneIsCounted
// holds the statement-level record to what the check judges from: a
// committed UPDATE is in Writes with the rows it matched, 0 included; one
// whose transaction is rolled back (a worker that raises when its fenced
// commit matched nothing) is in no table, but its worker's count of
// statements sent still went up; another connection's statements count
// for no worker.
func TestWrites_EveryUpdateIsRecordedWhatItMatchedAndARolledBackOneIsCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, s := setup(t)
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: s.Jobs})
	if err != nil {
		t.Fatal(err)
	}
	id, err := q.Insert(ctx, []byte(`{}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = protocol.AppName(experiments.Zombie)
	cfg.RuntimeParams["search_path"] = s.Jobs
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "UPDATE jobs SET attempts = attempts + 1 WHERE id = $1", id); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "UPDATE jobs SET status = 'done' WHERE id = $1 AND epoch = 99", id); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE jobs SET status = 'done' WHERE id = $1 AND epoch = 98", id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Another connection, named as no worker (a connection of the shared
	// pool may carry a name another test gave it).
	ocfg := pool.Config().ConnConfig.Copy()
	ocfg.RuntimeParams["application_name"] = "someone else"
	other, err := pgx.ConnectConfig(ctx, ocfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, "UPDATE "+pgx.Identifier{s.Jobs}.Sanitize()+".jobs SET attempts = attempts WHERE true"); err != nil {
		t.Fatal(err)
	}
	ws, err := judge.Writes(ctx, pool, s.Jobs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range ws {
		got = append(got, fmt.Sprintf("%s:%d:%v", w.App, w.Matched, w.JobIDs))
	}
	want := []string{
		fmt.Sprintf("fencelab worker A:1:[%d]", id),
		"fencelab worker A:0:[]",
		fmt.Sprintf("someone else:1:[%d]", id),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("writes:\n got %q\nwant %q", got, want)
	}
	sent, err := judge.WritesSent(ctx, pool, s.Jobs)
	if err != nil {
		t.Fatal(err)
	}
	if sent != (judge.Sent{A: 3, B: 0}) {
		t.Fatalf("sent = %+v, want A 3 (the rolled-back one too), B 0", sent)
	}
}
