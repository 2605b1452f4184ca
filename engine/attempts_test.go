package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// TestClaim_APoisonJobEndsWhenItsAttemptsAreUsedUp is issue 18's defect 1
// as it was found: a job that crashes every worker that claims it (here:
// claimed and never completed, its lease left to run out) was claimed
// forever. Now it is claimed max_attempts times, then the next claim ends
// it as failed, with the reason, and bumps its epoch so its last holder's
// late commit is fenced.
func TestClaim_APoisonJobEndsWhenItsAttemptsAreUsedUp(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		for _, max := range []int{1, 3} {
			t.Run(fmt.Sprintf("batch=%v max_attempts=%d", batch, max), func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				q := e.queue(0)
				id, err := q.Insert(e.ctx, []byte(`{}`), max)
				if err != nil {
					t.Fatal(err)
				}
				claim := func(owner string) (engine.Claim, error) {
					if !batch {
						return q.Claim(e.ctx, owner, 50*time.Millisecond)
					}
					cs, err := q.ClaimBatch(e.ctx, owner, 10, 50*time.Millisecond)
					if err != nil {
						return engine.Claim{}, err
					}
					return cs[0], nil
				}
				var claims []engine.Claim
				for i := range 6 {
					c, err := claim(fmt.Sprintf("owner-%d", i))
					switch {
					case err == nil:
						claims = append(claims, c)
					case !errors.Is(err, engine.ErrNoJob):
						t.Fatal(err)
					}
					time.Sleep(80 * time.Millisecond)
				}
				if len(claims) != max {
					t.Fatalf("%d of 6 claims took the job, want max_attempts = %d", len(claims), max)
				}
				// The sixth claim found nothing, but it ended the job.
				j, err := q.Get(e.ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				want := fmt.Sprintf("its lease ran out on attempt %d of %d", max, max)
				if j.Status != engine.StatusFailed || j.Attempts != max || j.Epoch != int64(max)+1 || j.Error != want || j.LeaseUntil != nil {
					t.Fatalf("the poison job ended %+v, want failed, attempts %d, epoch %d, error %q", j, max, max+1, want)
				}
				last := claims[len(claims)-1]
				if _, err := q.Complete(e.ctx, last, []byte(`{}`)); !errors.Is(err, engine.ErrFenced) {
					t.Fatalf("the last holder's late complete = %v, want ErrFenced", err)
				}
			})
		}
	}
}

// TestClaim_AFailedLastAttemptEndsTheJobToo: the other way attempts are
// used up, for the batch path (the one-job path is in
// TestJobFail_RetriesAfterItsDelayThenFails).
func TestClaim_AFailedLastAttemptEndsTheJobToo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q, err := engine.NewQueue(e.pool, engine.QueueConfig{Schema: e.schemas.Jobs, RetryDelayFunc: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Insert(e.ctx, []byte(`{}`), 2); err != nil {
		t.Fatal(err)
	}
	for i, want := range []engine.Status{engine.StatusPending, engine.StatusFailed} {
		cs, err := q.ClaimBatch(e.ctx, "w", 5, time.Minute)
		if err != nil {
			t.Fatalf("claim %d: %v", i+1, err)
		}
		rs, err := q.FailBatch(e.ctx, []engine.Failure{{Claim: cs[0], Reason: "it broke"}})
		if err != nil || rs[0].Err != nil || rs[0].Status != want {
			t.Fatalf("fail %d = %+v, %v; want %s", i+1, rs, err, want)
		}
	}
	if _, err := q.ClaimBatch(e.ctx, "w", 5, time.Minute); !errors.Is(err, engine.ErrNoJob) {
		t.Fatalf("a claim after the last attempt failed = %v, want ErrNoJob", err)
	}
}

// TestInsertMany_RunAtAndAllOrNone: a job inserted to run later is not
// claimed before its time; a bulk insert is all of its jobs or none.
func TestInsertMany_RunAtAndAllOrNone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	// Far enough ahead that the insert and the two claims below end
	// before it even on a loaded machine (400 ms did not, on a CI run).
	later := time.Now().Add(3 * time.Second)
	ids, err := q.InsertMany(e.ctx, []engine.NewJob{
		{Payload: []byte(`{"n":1}`), RunAt: later},
		{Payload: []byte(`{"n":2}`), MaxAttempts: 7},
	})
	if err != nil || len(ids) != 2 || ids[1] != ids[0]+1 {
		t.Fatalf("insert many = %v, %v", ids, err)
	}
	c, err := q.Claim(e.ctx, "w", time.Minute)
	if err != nil || c.JobID != ids[1] {
		t.Fatalf("the first claim = %+v, %v; want job %d, the one due now", c, err, ids[1])
	}
	if j, _ := q.Get(e.ctx, ids[1]); j.MaxAttempts != 7 {
		t.Fatalf("max attempts = %d, want 7", j.MaxAttempts)
	}
	if _, err := q.Claim(e.ctx, "w", time.Minute); !errors.Is(err, engine.ErrNoJob) {
		t.Fatalf("a claim before run_at = %v, want ErrNoJob", err)
	}
	if n, err := playground.Claimable(e.ctx, q); err != nil || n != 0 {
		t.Fatalf("claimable before run_at = %d, %v; want 0", n, err)
	}
	if time.Now().After(later) {
		t.Fatalf("the claims before run_at ended after it: the test proved nothing; give it more time")
	}
	time.Sleep(time.Until(later) + 20*time.Millisecond)
	if c, err := q.Claim(e.ctx, "w", time.Minute); err != nil || c.JobID != ids[0] {
		t.Fatalf("a claim after run_at = %+v, %v; want job %d", c, err, ids[0])
	}

	before := e.count(e.schemas.Jobs, "jobs")
	for name, jobs := range map[string][]engine.NewJob{
		"none":               {},
		"a bad payload":      {{Payload: []byte(`{}`)}, {Payload: []byte(`{`)}},
		"a NUL":              {{Payload: []byte(`{}`)}, {Payload: []byte(`{"a":"\u0000"}`)}},
		"a lone surrogate":   {{Payload: []byte(`{"a":"\ud800"}`)}},
		"too many attempts":  {{Payload: []byte(`{}`), MaxAttempts: engine.MaxAttemptsCap + 1}},
		"negative attempts":  {{Payload: []byte(`{}`), MaxAttempts: -1}},
		"more than MaxBatch": make([]engine.NewJob, engine.MaxBatch+1),
	} {
		if _, err := q.InsertMany(e.ctx, jobs); !errors.Is(err, engine.ErrInvalidInput) {
			t.Errorf("%s: %v, want ErrInvalidInput", name, err)
		}
	}
	if after := e.count(e.schemas.Jobs, "jobs"); after != before {
		t.Fatalf("refused inserts left %d jobs behind", after-before)
	}
}

// TestInsertTx_TheJobsExistOnlyIfTheTransactionCommits.
func TestInsertTx_TheJobsExistOnlyIfTheTransactionCommits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	for _, commit := range []bool{false, true} {
		tx, err := e.pool.Begin(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.InsertTx(e.ctx, tx, []engine.NewJob{{Payload: []byte(`{"a":1}`)}, {Payload: []byte(`{"a":2}`)}}); err != nil {
			t.Fatal(err)
		}
		// Another connection sees nothing before the commit.
		if n := e.count(e.schemas.Jobs, "jobs"); n != 0 && !commit {
			t.Fatalf("%d jobs visible before the commit", n)
		}
		if commit {
			err = tx.Commit(e.ctx)
		} else {
			err = tx.Rollback(e.ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if commit {
			want = 2
		}
		if n := e.count(e.schemas.Jobs, "jobs"); n != want {
			t.Fatalf("commit=%v: %d jobs, want %d", commit, n, want)
		}
	}
	if _, err := q.InsertTx(e.ctx, nil, []engine.NewJob{{Payload: []byte(`{}`)}}); !errors.Is(err, engine.ErrInvalidInput) {
		t.Fatalf("no transaction: %v", err)
	}
}

// TestMigrateQueue_UpDownAndAnOldSchema: SetupQueue brings a schema to the
// latest version, MigrateQueue takes it down and up again one step at a
// time, a schema made before versions were kept is taken over with its
// jobs, and a schema newer than the engine is refused.
func TestMigrateQueue_UpDownAndAnOldSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	version := func() int {
		t.Helper()
		v, err := engine.QueueVersion(ctx, pool, schema)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	column := func(name string) bool {
		var ok bool
		if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'jobs' AND column_name = $2)", schema, name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if v := version(); v != 0 {
		t.Fatalf("a missing schema is at version %d, want 0", v)
	}
	// Six setups at once take turns.
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() { errs <- engine.SetupQueue(ctx, pool, schema) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if v := version(); v != engine.LatestVersion || !column("run_at") {
		t.Fatalf("after setup: version %d, run_at %v", v, column("run_at"))
	}
	// Migration 3 swaps the claim's index of pending and running rows for
	// one of pending rows alone, and back.
	index := func(name string) bool {
		var ok bool
		if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_indexes WHERE schemaname = $1 AND indexname = $2)", schema, name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !index("jobs_pending") || index("jobs_claimable") || !index("jobs_leased") {
		t.Fatalf("at version 3: jobs_pending %v, jobs_claimable %v, jobs_leased %v", index("jobs_pending"), index("jobs_claimable"), index("jobs_leased"))
	}
	if _, err := engine.MigrateQueue(ctx, pool, schema, 2); err != nil || index("jobs_pending") || !index("jobs_claimable") {
		t.Fatalf("down to 2: %v; jobs_pending %v, jobs_claimable %v", err, index("jobs_pending"), index("jobs_claimable"))
	}
	if err := engine.SetupQueue(ctx, pool, schema); err != nil || !index("jobs_pending") || index("jobs_claimable") {
		t.Fatalf("up to 3 again: %v; jobs_pending %v, jobs_claimable %v", err, index("jobs_pending"), index("jobs_claimable"))
	}
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Insert(ctx, []byte(`{"kept":true}`), 0); err != nil {
		t.Fatal(err)
	}
	if from, err := engine.MigrateQueue(ctx, pool, schema, 1); err != nil || from != engine.LatestVersion || version() != 1 || column("run_at") {
		t.Fatalf("down to 1: from %d, %v; now %d, run_at %v", from, err, version(), column("run_at"))
	}
	if _, err := engine.MigrateQueue(ctx, pool, schema, 0); err != nil || version() != 0 || column("id") {
		t.Fatalf("down to 0: %v; now %d, jobs table %v", err, version(), column("id"))
	}
	if err := engine.SetupQueue(ctx, pool, schema); err != nil || version() != engine.LatestVersion {
		t.Fatalf("up again: %v, %d", err, version())
	}

	// A schema as the engine made it before versions: migration 1's tables,
	// no version table. Its jobs are kept.
	if _, err := engine.MigrateQueue(ctx, pool, schema, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "DROP TABLE "+pgx.Identifier{schema, "schema_migrations"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "jobs"}.Sanitize()+" (payload) VALUES ('{\"old\":true}')"); err != nil {
		t.Fatal(err)
	}
	if err := engine.SetupQueue(ctx, pool, schema); err != nil || version() != engine.LatestVersion {
		t.Fatalf("taking over an old schema: %v, version %d", err, version())
	}
	if c, err := q.Claim(ctx, "w", time.Minute); err != nil || !strings.Contains(string(c.Payload), "old") {
		t.Fatalf("the old schema's job: %+v, %v", c, err)
	}

	// Refusals change nothing.
	for _, v := range []int{-1, engine.LatestVersion + 1} {
		if _, err := engine.MigrateQueue(ctx, pool, schema, v); !errors.Is(err, engine.ErrInvalidInput) {
			t.Errorf("version %d: %v, want ErrInvalidInput", v, err)
		}
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "schema_migrations"}.Sanitize()+" (version, name) VALUES (99, 'from the future')"); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.MigrateQueue(ctx, pool, schema, 1); !errors.Is(err, engine.ErrInvalidInput) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("a schema from a newer engine: %v", err)
	}
	if !column("run_at") {
		t.Fatal("the refused migration changed the schema")
	}
}

// TestComplete_FinishedOnlyWhenNoOtherClaimCouldHaveWritten: the holder's
// second write to its own finished job is ErrFinished, not a fence; but
// with the epoch check broken, a zombie of the same name can land its
// commit and leave the owner's name and epoch behind, so the owner's own
// commit after it is a fence, as it always was.
func TestComplete_FinishedOnlyWhenNoOtherClaimCouldHaveWritten(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(playground.Guards(0).Break(playground.EpochCheck))
	id := e.insert(q, 1)[0]
	a, err := q.Claim(e.ctx, "pod-7", shortLease)
	if err != nil {
		t.Fatal(err)
	}
	e.awaitExpiry(q, id)
	b, err := q.Claim(e.ctx, "pod-7", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Complete(e.ctx, a, result("A")); err != nil {
		t.Fatalf("the zombie's commit with the epoch check broken: %v, want it to land", err)
	}
	if _, err := q.Complete(e.ctx, b, result("B")); !errors.Is(err, engine.ErrFenced) || errors.Is(err, engine.ErrFinished) {
		t.Fatalf("the owner's commit after the zombie's = %v, want ErrFenced", err)
	}
}
