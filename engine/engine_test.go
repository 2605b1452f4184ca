package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) {
	pgtest.ExportURL = true // the examples connect to $DATABASE_URL, as a program would
	pgtest.Main(m)
}

// env is one test's private pair of schemas, set up.
type env struct {
	t       *testing.T
	ctx     context.Context
	pool    *pgxpool.Pool
	schemas judge.Schemas
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), pool: pgtest.Pool(t),
		schemas: judge.Schemas{Jobs: pgtest.Schema(t), Receiver: pgtest.Schema(t)}}
	if err := judge.Setup(e.ctx, e.pool, e.schemas); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) queue(gs playground.Guards) *engine.Queue {
	e.t.Helper()
	q, err := playground.NewQueue(e.pool, engine.QueueConfig{Schema: e.schemas.Jobs}, playground.QueueHooks{Broken: gs})
	if err != nil {
		e.t.Fatal(err)
	}
	return q
}

func (e *env) receiver(gs playground.Guards) *engine.Receiver {
	e.t.Helper()
	r, err := playground.NewReceiver(e.pool, engine.ReceiverConfig{Schema: e.schemas.Receiver}, playground.ReceiverHooks{Broken: gs})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) insert(q *engine.Queue, n int) []int64 {
	e.t.Helper()
	var ids []int64
	for i := range n {
		id, err := q.Insert(e.ctx, []byte(fmt.Sprintf(`{"n":%d}`, i)), 0)
		if err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// count returns how many rows a table of the jobs or receiver schema has.
func (e *env) count(schema, table string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(e.ctx, fmt.Sprintf("SELECT count(*) FROM %s.%s", pgx.Identifier{schema}.Sanitize(), table)).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// awaitExpiry waits until the job's lease has run out on the database clock.
func (e *env) awaitExpiry(q *engine.Queue, id int64) {
	e.t.Helper()
	for {
		j, err := q.Get(e.ctx, id)
		if err != nil {
			e.t.Fatal(err)
		}
		if j.LeaseUntil == nil || !j.LeaseUntil.After(j.DBTime) {
			return
		}
		time.Sleep(j.LeaseUntil.Sub(j.DBTime) + time.Millisecond)
	}
}

// zombieAndOwner sets the article's scene on a fresh job of q: worker-a
// claims it under a short lease, the lease runs out on the database clock,
// and worker-b reclaims it. It returns the job and both claims.
func (e *env) zombieAndOwner(q *engine.Queue) (id int64, a, b engine.Claim) {
	e.t.Helper()
	id = e.insert(q, 1)[0]
	a, err := q.Claim(e.ctx, "worker-a", shortLease)
	if err != nil {
		e.t.Fatal(err)
	}
	e.awaitExpiry(q, id)
	if b, err = q.Claim(e.ctx, "worker-b", time.Minute); err != nil {
		e.t.Fatal(err)
	}
	return id, a, b
}

func result(worker string) []byte {
	b, _ := json.Marshal(protocol.Result{Worker: worker, Output: "done by " + worker})
	return b
}

const shortLease = 60 * time.Millisecond

func TestSchemaName_BadNamesAreRefusedAndCreateNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	bad := []string{"", "Fencing", "1abc", "a-b", "a b", `x";drop schema public;--`, "pg_catalog", "public",
		strings.Repeat("a", 49), "fencing.demo", "ünï"}
	for _, name := range bad {
		for what, err := range map[string]error{
			"SetupQueue":    engine.SetupQueue(ctx, pool, name),
			"SetupReceiver": engine.SetupReceiver(ctx, pool, name),
			"DropQueue":     engine.DropQueue(ctx, pool, name),
		} {
			if !errors.Is(err, engine.ErrInvalidInput) {
				t.Errorf("%s(%q) = %v, want ErrInvalidInput", what, name, err)
			}
		}
		if _, err := engine.MigrateQueue(ctx, pool, name, 1); !errors.Is(err, engine.ErrInvalidInput) {
			t.Errorf("MigrateQueue(%q) = %v, want ErrInvalidInput", name, err)
		}
		if _, err := engine.NewQueue(pool, engine.QueueConfig{Schema: name}); !errors.Is(err, engine.ErrInvalidInput) {
			t.Errorf("NewQueue(%q) = %v, want ErrInvalidInput", name, err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'fencing%' OR nspname LIKE 'x%' OR nspname LIKE 'a%'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("a refused setup created %d schemas", n)
	}
}

func TestJobClaim_TakesOnePendingJobAndBumpsTheEpoch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	ids := e.insert(q, 2)
	c, err := q.Claim(e.ctx, "worker-a", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c.JobID != ids[0] || c.Owner != "worker-a" || c.Epoch != 1 || c.Attempt != 1 {
		t.Fatalf("claim = %+v, want job %d, worker-a, epoch 1, attempt 1", c, ids[0])
	}
	if d := c.LeaseUntil.Sub(c.DBTime); d < 29*time.Second || d > 31*time.Second {
		t.Fatalf("lease runs %v past the database time, want 30s", d)
	}
	c2, err := q.Claim(e.ctx, "worker-b", 30*time.Second)
	if err != nil || c2.JobID != ids[1] {
		t.Fatalf("second claim = %+v, %v; want job %d", c2, err, ids[1])
	}
	if _, err := q.Claim(e.ctx, "worker-c", 30*time.Second); !errors.Is(err, engine.ErrNoJob) {
		t.Fatalf("claim with every lease live = %v, want ErrNoJob", err)
	}
}

func TestJobClaim_ReclaimsOnlyAfterTheLeaseRunsOutOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	id := e.insert(q, 1)[0]
	a, err := q.Claim(e.ctx, "worker-a", 400*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Claim(e.ctx, "worker-b", time.Second); !errors.Is(err, engine.ErrNoJob) {
		t.Fatalf("claim during a live lease = %v, want ErrNoJob", err)
	}
	e.awaitExpiry(q, id)
	b, err := q.Claim(e.ctx, "worker-b", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if b.JobID != id || b.Epoch != a.Epoch+1 || b.Owner != "worker-b" || b.Attempt != 2 {
		t.Fatalf("reclaim = %+v, want job %d at epoch %d for worker-b, attempt 2", b, id, a.Epoch+1)
	}
}

func TestJobComplete_ZombieIsFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	id, a, b := e.zombieAndOwner(q)

	_, err := q.Complete(e.ctx, a, result("A"))
	if !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("zombie's complete = %v, want ErrFenced", err)
	}
	var fe *engine.FencedError
	if !errors.As(err, &fe) {
		t.Fatalf("zombie's complete error %T is not a *FencedError", err)
	}
	if fe.JobID != id || fe.HeldEpoch != 1 || fe.RowEpoch != 2 || fe.RowOwner != "worker-b" || fe.RowStatus != engine.StatusRunning {
		t.Fatalf("fenced error = %+v", fe)
	}
	if _, err := q.Renew(e.ctx, a, time.Minute); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("zombie's heartbeat = %v, want ErrFenced like its commit", err)
	}
	if _, err := q.Fail(e.ctx, a, "boom"); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("zombie's fail = %v, want ErrFenced", err)
	}
	j, _ := q.Get(e.ctx, id)
	if j.Status != engine.StatusRunning || j.Result != nil || j.Epoch != 2 {
		t.Fatalf("the zombie's writes changed the row: %+v", j)
	}

	if _, err := q.Renew(e.ctx, b, time.Minute); err != nil {
		t.Fatalf("the owner's renewal: %v", err)
	}
	if _, err := q.Complete(e.ctx, b, result("B")); err != nil {
		t.Fatalf("the owner's complete: %v", err)
	}
	j, _ = q.Get(e.ctx, id)
	if j.Status != engine.StatusDone || protocol.ResultFrom(j.Result) != "B" || j.LeaseUntil != nil {
		t.Fatalf("after the owner's complete: %+v", j)
	}
	// A second complete by the owner writes nothing either: the job is done,
	// by the owner itself, which is no fence (no other claim took it).
	_, err = q.Complete(e.ctx, b, result("B"))
	var fin *engine.FinishedError
	if !errors.As(err, &fin) || errors.Is(err, engine.ErrFenced) || fin.Status != engine.StatusDone || fin.Epoch != 2 {
		t.Fatalf("the owner's second complete = %v, want ErrFinished (done at epoch 2) and not ErrFenced", err)
	}
	if _, err := q.Renew(e.ctx, b, time.Minute); !errors.Is(err, engine.ErrFinished) {
		t.Fatalf("the owner's renewal after its own commit = %v, want ErrFinished", err)
	}
	// The zombie's late commit on the done job is still a fence.
	if _, err := q.Complete(e.ctx, a, result("A")); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("the zombie's complete of the done job = %v, want ErrFenced", err)
	}
}

func TestJobFail_RetriesAfterItsDelayThenFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const wait = 300 * time.Millisecond
	var asked []int
	q, err := engine.NewQueue(e.pool, engine.QueueConfig{Schema: e.schemas.Jobs, RetryDelayFunc: func(attempt int) time.Duration {
		asked = append(asked, attempt)
		return wait
	}})
	if err != nil {
		t.Fatal(err)
	}
	id, err := q.Insert(e.ctx, []byte(`{"x":1}`), 2)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := q.Claim(e.ctx, "w", time.Minute)
	if st, err := q.Fail(e.ctx, c, "first try failed"); err != nil || st != engine.StatusPending {
		t.Fatalf("first fail = %v, %v; want pending", st, err)
	}
	// The delay is read against the fail's own time (updated_at, the same
	// statement's now()), not against a later read's: on a loaded machine
	// the read may come after the delay has passed.
	j, _ := q.Get(e.ctx, id)
	if got := j.RunAt.Sub(j.UpdatedAt); got != wait || len(asked) != 1 || asked[0] != 1 {
		t.Fatalf("the retry runs %v after the fail (asked for attempts %v), want %v after attempt 1", got, asked, wait)
	}
	// A claim before run_at on the database clock finds nothing; one that
	// a loaded machine sends after it takes the retry, and is judged by
	// its own time.
	c, err = q.Claim(e.ctx, "w", time.Minute)
	switch {
	case errors.Is(err, engine.ErrNoJob):
		time.Sleep(time.Until(time.Now().Add(j.RunAt.Sub(j.DBTime))) + 20*time.Millisecond)
		c, err = q.Claim(e.ctx, "w", time.Minute)
	case err == nil && c.DBTime.Before(j.RunAt):
		t.Fatalf("a claim at %v, during the retry's delay (until %v), took the job", c.DBTime, j.RunAt)
	}
	if err != nil || c.JobID != id || c.Epoch != 2 {
		t.Fatalf("retry claim = %+v, %v", c, err)
	}
	if st, err := q.Fail(e.ctx, c, "second try failed"); err != nil || st != engine.StatusFailed {
		t.Fatalf("second fail = %v, %v; want failed", st, err)
	}
	if j, _ := q.Get(e.ctx, id); j.RunAt.After(j.DBTime) {
		t.Fatalf("a failed job waits for a retry that will never come: run_at %v is after now %v", j.RunAt, j.DBTime)
	}
	if _, err := q.Claim(e.ctx, "w", time.Minute); !errors.Is(err, engine.ErrNoJob) {
		t.Fatalf("a failed job was claimable: %v", err)
	}
}

func TestBadInput_ClearErrorsAndNothingChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	r := e.receiver(0)
	id := e.insert(q, 1)[0]
	c, _ := q.Claim(e.ctx, "worker-a", time.Minute)

	cases := []struct {
		name string
		err  error
		want error
	}{}
	add := func(name string, err error, want error) {
		cases = append(cases, struct {
			name string
			err  error
			want error
		}{name, err, want})
	}
	_, err := q.Insert(e.ctx, nil, 0)
	add("empty payload", err, engine.ErrInvalidInput)
	_, err = q.Insert(e.ctx, []byte("   "), 0)
	add("blank payload", err, engine.ErrInvalidInput)
	_, err = q.Insert(e.ctx, []byte(`{"a":`), 0)
	add("broken JSON", err, engine.ErrInvalidInput)
	_, err = q.Insert(e.ctx, []byte(`null`), 0)
	add("null payload", err, engine.ErrInvalidInput)
	_, err = q.Insert(e.ctx, []byte(`"`+strings.Repeat("x", engine.MaxPayloadBytes)+`"`), 0)
	add("oversized payload", err, engine.ErrInvalidInput)
	_, err = q.Insert(e.ctx, []byte(`{}`), -1)
	add("negative attempts", err, engine.ErrInvalidInput)
	_, err = q.Insert(e.ctx, []byte(`{}`), 1000)
	add("absurd attempts", err, engine.ErrInvalidInput)
	for _, l := range []time.Duration{0, -time.Second, time.Nanosecond, 48 * time.Hour} {
		_, err = q.Claim(e.ctx, "worker-b", l)
		add(fmt.Sprintf("claim lease %v", l), err, engine.ErrInvalidInput)
		_, err = q.Renew(e.ctx, c, l)
		add(fmt.Sprintf("renew lease %v", l), err, engine.ErrInvalidInput)
	}
	_, err = q.Claim(e.ctx, "", time.Minute)
	add("empty owner", err, engine.ErrInvalidInput)
	_, err = q.Claim(e.ctx, "bad\x00owner", time.Minute)
	add("unprintable owner", err, engine.ErrInvalidInput)
	_, err = q.Claim(e.ctx, strings.Repeat("o", 200), time.Minute)
	add("long owner", err, engine.ErrInvalidInput)
	unknown := c
	unknown.JobID = id + 1000
	_, err = q.Complete(e.ctx, unknown, result("A"))
	add("complete unknown job", err, engine.ErrJobNotFound)
	_, err = q.Renew(e.ctx, unknown, time.Minute)
	add("renew unknown job", err, engine.ErrJobNotFound)
	_, err = q.Fail(e.ctx, unknown, "x")
	add("fail unknown job", err, engine.ErrJobNotFound)
	zero := c
	zero.JobID = 0
	_, err = q.Complete(e.ctx, zero, result("A"))
	add("complete job 0", err, engine.ErrInvalidInput)
	_, err = q.Complete(e.ctx, c, nil)
	add("complete with empty result", err, engine.ErrInvalidInput)
	_, err = q.Fail(e.ctx, c, "")
	add("fail without a reason", err, engine.ErrInvalidInput)
	_, err = q.Get(e.ctx, -5)
	add("get job -5", err, engine.ErrInvalidInput)
	_, err = q.Get(e.ctx, id+1000)
	add("get unknown job", err, engine.ErrJobNotFound)
	for _, d := range []engine.Delivery{
		{JobID: 0, Epoch: 1, Owner: "a", Payload: []byte(`{}`)},
		{JobID: 1, Epoch: -1, Owner: "a", Payload: []byte(`{}`)},
		{JobID: 1, Epoch: 1, Owner: "", Payload: []byte(`{}`)},
		{JobID: 1, Epoch: 1, Owner: "a"},
		{JobID: 1, Epoch: 1, Owner: "a", Payload: []byte(`{`)},
		{JobID: 1, Epoch: 1, Owner: "a", Payload: []byte(`"` + strings.Repeat("y", engine.MaxPayloadBytes) + `"`)},
	} {
		_, err = r.Deliver(e.ctx, d)
		add(fmt.Sprintf("deliver %+v", d), err, engine.ErrInvalidInput)
	}
	_, err = r.Get(e.ctx, 77)
	add("receiver holds nothing", err, engine.ErrJobNotFound)
	// Valid JSON that Postgres cannot store: the database's refusal, by
	// SQLSTATE, is the caller's bad input, never an internal error.
	for _, raw := range []string{`{"a":"\u0000"}`, `{"a":"\ud800"}`, `{"a":"x\udc00y"}`} {
		_, err = q.Insert(e.ctx, []byte(raw), 0)
		add("insert "+raw, err, engine.ErrInvalidInput)
		_, err = q.Complete(e.ctx, c, []byte(raw))
		add("complete with "+raw, err, engine.ErrInvalidInput)
		_, err = r.Deliver(e.ctx, engine.Delivery{JobID: id, Epoch: 1, Owner: "a", Payload: []byte(raw)})
		add("deliver "+raw, err, engine.ErrInvalidInput)
	}

	for _, tc := range cases {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, tc.err, tc.want)
			continue
		}
		if msg := tc.err.Error(); strings.Contains(msg, "\n") || len(msg) > 300 {
			t.Errorf("%s: message is not one clear line: %q", tc.name, msg)
		}
	}
	if n := e.count(e.schemas.Jobs, "jobs"); n != 1 {
		t.Errorf("bad input changed the jobs table: %d rows, want 1", n)
	}
	if n := e.count(e.schemas.Receiver, "decisions"); n != 0 {
		t.Errorf("bad deliveries were logged: %d decisions", n)
	}
	j, _ := q.Get(e.ctx, id)
	if j.Status != engine.StatusRunning || j.Epoch != 1 || j.Owner != "worker-a" {
		t.Errorf("bad input changed the claimed job: %+v", j)
	}
}

func deliver(t *testing.T, r *engine.Receiver, job, epoch int64, who string) (engine.Receipt, error) {
	t.Helper()
	return r.Deliver(context.Background(), engine.Delivery{JobID: job, Epoch: epoch, Owner: "worker-" + who, Payload: result(who)})
}

func TestReceiver_KeepsTheNewestEpochRefusesOlderAcceptsSame(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.receiver(0)
	rc, err := deliver(t, r, 1, 1, "A")
	if err != nil || rc.Decision != engine.AcceptedFirst || rc.HeldEpoch != 1 || rc.Superseded != nil {
		t.Fatalf("first delivery = %+v, %v", rc, err)
	}
	rc, err = deliver(t, r, 1, 2, "B")
	if err != nil || rc.Decision != engine.AcceptedNewer || rc.Superseded == nil || *rc.Superseded != 1 || rc.SupersededOwner != "worker-A" {
		t.Fatalf("newer delivery = %+v, %v; want accepted-newer superseding 1", rc, err)
	}
	rc, err = deliver(t, r, 1, 2, "B")
	if err != nil || rc.Decision != engine.AcceptedSame || rc.Accepted != 3 {
		t.Fatalf("same-epoch retry = %+v, %v; want accepted-same", rc, err)
	}
	rc, err = deliver(t, r, 1, 1, "A")
	var se *engine.StaleError
	if !errors.As(err, &se) || !errors.Is(err, engine.ErrStale) || se.HeldEpoch != 2 || se.Epoch != 1 || rc.Decision != engine.RefusedStale {
		t.Fatalf("stale delivery = %+v, %v; want refused with held epoch 2", rc, err)
	}
	held, err := r.Get(e.ctx, 1)
	if err != nil || held.Epoch != 2 || protocol.ResultFrom(held.Payload) != "B" {
		t.Fatalf("held = %+v, %v; want B's payload at epoch 2", held, err)
	}
	ds, err := r.Decisions(e.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []engine.Decision
	for _, d := range ds {
		got = append(got, d.Decision)
	}
	want := []engine.Decision{engine.AcceptedFirst, engine.AcceptedNewer, engine.AcceptedSame, engine.RefusedStale}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("decision log = %v, want %v", got, want)
	}

	// With the guard off, the receiver goes backwards.
	off := e.receiver(playground.Guards(0).Break(playground.ReceiverCheck))
	rc, err = deliver(t, off, 1, 1, "A")
	if err != nil || rc.Decision != engine.AcceptedOlder {
		t.Fatalf("stale delivery with receiver-check off = %+v, %v; want accepted-older", rc, err)
	}
}

func TestReceiver_ConcurrentMixedEpochsEndAtTheNewestAndNeverGoBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.receiver(0)
	const jobs, perJob = 4, 60
	errs := make(chan error, jobs*perJob)
	for j := int64(1); j <= jobs; j++ {
		for i := range perJob {
			epoch := int64((i*37)%perJob + 1) // every epoch 1..perJob once, shuffled
			go func() {
				_, err := r.Deliver(e.ctx, engine.Delivery{JobID: j, Epoch: epoch, Owner: fmt.Sprint("w", epoch), Payload: []byte(fmt.Sprintf(`{"epoch":%d}`, epoch))})
				if errors.Is(err, engine.ErrStale) {
					err = nil
				}
				errs <- err
			}()
		}
	}
	for range jobs * perJob {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for j := int64(1); j <= jobs; j++ {
		held, err := r.Get(e.ctx, j)
		if err != nil || held.Epoch != perJob {
			t.Fatalf("job %d ends at %+v, %v; want epoch %d", j, held, err, perJob)
		}
		ds, _ := r.Decisions(e.ctx, j)
		var prev int64
		for _, d := range ds {
			if d.HeldEpoch == nil || *d.HeldEpoch < prev {
				t.Fatalf("job %d: the held epoch went backwards at decision %d: %+v", j, d.Seq, d)
			}
			prev = *d.HeldEpoch
			if d.Decision == engine.AcceptedOlder {
				t.Fatalf("job %d: accepted an older epoch with the guard on: %+v", j, d)
			}
		}
		if len(ds) != perJob {
			t.Fatalf("job %d: %d decisions logged, want %d", j, len(ds), perJob)
		}
	}
}

func TestGuards_OwnerAndEpochChecks(t *testing.T) {
	t.Parallel()
	// With only the epoch check off, the owner check still stops a zombie
	// with another name — but not one with the same name.
	for _, tc := range []struct {
		broken      playground.Guards
		sameName    bool
		wantFenced  bool
		description string
	}{
		{0, false, true, "all guards"},
		{0, true, true, "all guards, same identity"},
		{playground.Guards(0).Break(playground.EpochCheck), false, true, "epoch-check off: owner check hides it"},
		{playground.Guards(0).Break(playground.EpochCheck), true, false, "epoch-check off, same identity: zombie lands"},
		{playground.Guards(0).Break(playground.OwnerCheck), false, true, "owner-check off: epoch check holds"},
		{playground.Guards(0).Break(playground.OwnerCheck).Break(playground.EpochCheck), false, false, "both off: zombie lands"},
	} {
		t.Run(tc.description, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			q := e.queue(tc.broken)
			id := e.insert(q, 1)[0]
			a, _ := q.Claim(e.ctx, "worker-a", shortLease)
			e.awaitExpiry(q, id)
			name := "worker-b"
			if tc.sameName {
				name = "worker-a"
			}
			if _, err := q.Claim(e.ctx, name, time.Minute); err != nil {
				t.Fatal(err)
			}
			_, err := q.Complete(e.ctx, a, result("A"))
			if fenced := errors.Is(err, engine.ErrFenced); fenced != tc.wantFenced {
				t.Fatalf("zombie complete: %v, want fenced=%v", err, tc.wantFenced)
			}
		})
	}
}

func TestGuards_StatusCheckStopsACompleteOnADoneJob(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		e := newEnv(t)
		gs := playground.Guards(0).Break(playground.EpochIncrement) // both claims share epoch 0, same name
		if !on {
			gs = gs.Break(playground.StatusCheck)
		}
		q := e.queue(gs)
		id := e.insert(q, 1)[0]
		a, _ := q.Claim(e.ctx, "worker-a", shortLease)
		e.awaitExpiry(q, id)
		b, _ := q.Claim(e.ctx, "worker-a", time.Minute)
		if a.Epoch != b.Epoch {
			t.Fatalf("epoch-increment off, yet epochs %d and %d", a.Epoch, b.Epoch)
		}
		if _, err := q.Complete(e.ctx, b, result("B")); err != nil {
			t.Fatal(err)
		}
		_, err := q.Complete(e.ctx, a, result("A"))
		if fenced := errors.Is(err, engine.ErrFenced); fenced != on {
			t.Fatalf("status-check %v: zombie complete on a done job: %v", on, err)
		}
	}
}

func TestGuards_DBClockDecidesWhetherASkewedClockMatters(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		e := newEnv(t)
		var gs playground.Guards
		if !on {
			gs = gs.Break(playground.DBClock)
		}
		q := e.queue(gs)
		e.insert(q, 1)
		if _, err := q.Claim(e.ctx, "worker-a", time.Minute); err != nil {
			t.Fatal(err)
		}
		skewed, _ := playground.NewQueue(e.pool, engine.QueueConfig{Schema: e.schemas.Jobs}, playground.QueueHooks{Broken: gs, Now: func() time.Time { return time.Now().Add(time.Hour) }})
		_, err := skewed.Claim(e.ctx, "worker-b", time.Minute)
		if on && !errors.Is(err, engine.ErrNoJob) {
			t.Fatalf("db-clock on: a worker whose clock runs an hour ahead took a live lease: %v", err)
		}
		if !on && err != nil {
			t.Fatalf("db-clock off: the skewed worker should take the live lease, got %v", err)
		}
	}
}

// TestGuards_SkipLockedKeepsClaimersFromBlocking holds a claimed row locked
// in an open transaction and claims beside it: with SKIP LOCKED the second
// claimer takes the next job at once; without, it waits for the lock.
func TestGuards_SkipLockedKeepsClaimersFromBlocking(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		e := newEnv(t)
		var gs playground.Guards
		if !on {
			gs = gs.Break(playground.SkipLocked)
		}
		ids := e.insert(e.queue(gs), 2)
		tx, err := e.pool.Begin(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		held, _ := playground.NewQueue(tx, engine.QueueConfig{Schema: e.schemas.Jobs}, playground.QueueHooks{Broken: gs})
		first, err := held.Claim(e.ctx, "worker-a", time.Minute)
		if err != nil || first.JobID != ids[0] {
			t.Fatalf("first claim: %+v, %v", first, err)
		}
		conn, err := e.pool.Acquire(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(e.ctx, "SET lock_timeout = '300ms'"); err != nil {
			t.Fatal(err)
		}
		q, _ := playground.NewQueue(conn, engine.QueueConfig{Schema: e.schemas.Jobs}, playground.QueueHooks{Broken: gs})
		second, err := q.Claim(e.ctx, "worker-b", time.Minute)
		var pgErr *pgconn.PgError
		if on && (err != nil || second.JobID != ids[1]) {
			t.Errorf("skip-locked on: second claim = %+v, %v; want job %d at once", second, err, ids[1])
		}
		if !on && !(errors.As(err, &pgErr) && pgErr.Code == "55P03") {
			t.Errorf("skip-locked off: second claim = %+v, %v; want it to wait on the lock (55P03 lock_not_available)", second, err)
		}
		_, _ = conn.Exec(e.ctx, "RESET lock_timeout")
		conn.Release()
		_ = tx.Rollback(e.ctx)
	}
}

// TestJobClaim_NeverScansFinishedJobs counts the buffers the claim touches
// with 1,000 and with 100,000 finished jobs beside one pending job, and with
// 5,000 running jobs whose leases still hold (the jobs other claimers are
// working, which come before the pending one in run_at order): they must be
// the same, because the claim reads an index of pending rows and one of
// running rows by lease end, never walking past either.
func TestJobClaim_NeverScansFinishedJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	buffers := func(finished, running int) int {
		t.Helper()
		tbl := pgx.Identifier{e.schemas.Jobs, "jobs"}.Sanitize()
		if _, err := e.pool.Exec(e.ctx, "TRUNCATE "+tbl); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(e.ctx, fmt.Sprintf(`INSERT INTO %s (payload, status, owner, epoch, attempts, result)
			SELECT '{}', 'done', 'w', 1, 1, '{}' FROM generate_series(1, %d)`, tbl, finished)); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(e.ctx, fmt.Sprintf(`INSERT INTO %s (payload, status, owner, epoch, attempts, lease_until, run_at)
			SELECT '{}', 'running', 'other', 1, 1, now() + interval '1 hour', now() - interval '1 minute' FROM generate_series(1, %d)`, tbl, running)); err != nil {
			t.Fatal(err)
		}
		e.insert(q, 1)
		if _, err := e.pool.Exec(e.ctx, "ANALYZE "+tbl); err != nil {
			t.Fatal(err)
		}
		st := engine.ClaimStatement(e.schemas.Jobs)
		tx, err := e.pool.Begin(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(e.ctx)
		var plan []byte
		if err := tx.QueryRow(e.ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+st.SQL, st.Args...).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		for _, index := range []string{"jobs_pending", "jobs_leased"} {
			if !strings.Contains(string(plan), `"Index Name": "`+index+`"`) {
				t.Fatalf("the claim does not use the index %s:\n%s", index, plan)
			}
		}
		if !strings.Contains(string(plan), `"Actual Rows": 1`) {
			t.Fatalf("the claim took no job:\n%s", plan)
		}
		var p []struct {
			Plan struct {
				SharedHit  int `json:"Shared Hit Blocks"`
				SharedRead int `json:"Shared Read Blocks"`
			} `json:"Plan"`
		}
		if err := json.Unmarshal(plan, &p); err != nil {
			t.Fatal(err)
		}
		return p[0].Plan.SharedHit + p[0].Plan.SharedRead
	}
	small, large, held := buffers(1000, 0), buffers(100000, 0), buffers(1000, 5000)
	t.Logf("buffers touched by a claim: %d with 1,000 finished jobs, %d with 100,000, %d with 1,000 and 5,000 running", small, large, held)
	// One more btree level in the primary key is allowed; a scan of the
	// finished or the running rows would cost hundreds of buffers more.
	if large > small+3 {
		t.Fatalf("a claim touches %d buffers with 100,000 finished jobs but %d with 1,000: it scans finished rows", large, small)
	}
	if held > small+3 {
		t.Fatalf("a claim touches %d buffers with 5,000 running jobs ahead of the pending one, but %d with none: it walks the running rows", held, small)
	}
}

// TestConcurrentClaimers_StallsAndReclaims runs many claimers over many jobs
// with short leases, some stalling past theirs: every job ends done, each
// claim holds a newer epoch than the one before, no write from a lost lease
// lands, and the receiver ends on each job's last owner.
func TestConcurrentClaimers_StallsAndReclaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	r := e.receiver(0)
	const jobs, claimers = 120, 8
	const lease = 40 * time.Millisecond
	// Stalls and a loaded machine's late renewals may take a job from its
	// claimers many times: its attempts must not run out, which would end
	// it failed (the poison rule) where this test wants every job done.
	many := make([]engine.NewJob, jobs)
	for i := range many {
		many[i] = engine.NewJob{Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), MaxAttempts: engine.MaxAttemptsCap}
	}
	if _, err := q.InsertMany(e.ctx, many); err != nil {
		t.Fatal(err)
	}
	var fenced, stale atomicCount
	errs := make(chan error, claimers)
	deadline := time.Now().Add(time.Minute)
	for i := range claimers {
		owner := fmt.Sprint("w", i)
		// Each claimer has its own connection, named as a worker's is, so
		// the history records who wrote what, as it does for processes.
		cfg, _ := pgxpool.ParseConfig(pgtest.DSN(t))
		cfg.MaxConns = 1
		cfg.ConnConfig.RuntimeParams["application_name"] = protocol.AppName(owner)
		pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		q, _ := engine.NewQueue(pool, engine.QueueConfig{Schema: e.schemas.Jobs})
		go func() {
			n := 0
			for {
				c, err := q.Claim(e.ctx, owner, lease)
				if errors.Is(err, engine.ErrNoJob) {
					// Nothing claimable: done only if every job is finished
					// (a failed one fails the test below, rather than hang it).
					var left int
					if err := e.pool.QueryRow(e.ctx, fmt.Sprintf("SELECT count(*) FROM %s.jobs WHERE status NOT IN ('done', 'failed')",
						pgx.Identifier{e.schemas.Jobs}.Sanitize())).Scan(&left); err != nil {
						errs <- err
						return
					}
					if left == 0 {
						errs <- nil
						return
					}
					if time.Now().After(deadline) {
						errs <- fmt.Errorf("%d jobs still unfinished after a minute", left)
						return
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				n++
				if (c.JobID+int64(n))%4 == 0 && c.Attempt == 1 {
					time.Sleep(2 * lease) // a stall past the lease: no renewals
				}
				// Work in slices of a third of the lease, renewing after each,
				// for a length that varies by job: a woken zombie may commit
				// while the new owner is still at work, or after it is done.
				for range (c.JobID*7 + int64(i)) % 7 {
					time.Sleep(lease / 3)
					if _, err := q.Renew(e.ctx, c, lease); err != nil && !errors.Is(err, engine.ErrFenced) {
						errs <- err
						return
					}
				}
				payload, _ := json.Marshal(protocol.Result{Worker: owner})
				if _, err := r.Deliver(e.ctx, engine.Delivery{JobID: c.JobID, Epoch: c.Epoch, Owner: owner, Payload: payload}); errors.Is(err, engine.ErrStale) {
					stale.add()
				} else if err != nil {
					errs <- err
					return
				}
				if _, err := q.Complete(e.ctx, c, payload); errors.Is(err, engine.ErrFenced) {
					fenced.add()
				} else if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range claimers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	all, err := q.List(e.ctx, jobs+1)
	if err != nil {
		t.Fatal(err)
	}
	reclaimed := 0
	for _, j := range all {
		if j.Status != engine.StatusDone {
			t.Errorf("job %d ends %s", j.ID, j.Status)
		}
		if j.Attempts > 1 {
			reclaimed++
		}
		h, _ := judge.History(e.ctx, e.pool, e.schemas.Jobs, j.ID)
		ds, _ := r.Decisions(e.ctx, j.ID)
		held, err := r.Get(e.ctx, j.ID)
		if err != nil {
			t.Errorf("job %d: %v", j.ID, err)
			continue
		}
		if vs := judge.Violations(h, ds, &held); len(vs) > 0 {
			t.Errorf("job %d broke invariants: %+v", j.ID, vs)
		}
	}
	t.Logf("%d jobs, %d reclaimed after a stall, %d late commits fenced, %d late deliveries refused", len(all), reclaimed, fenced.get(), stale.get())
	if reclaimed == 0 || fenced.get() == 0 {
		t.Fatalf("the test did not exercise what it guards: %d reclaims, %d fenced commits", reclaimed, fenced.get())
	}
}

type atomicCount struct {
	mu sync.Mutex
	n  int
}

func (a *atomicCount) add() { a.mu.Lock(); a.n++; a.mu.Unlock() }
func (a *atomicCount) get() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// TestExpectedOutcome_IsTheArticlesTable pins the specification the page
// and the tests mark runs against to DESIGN.md's outcome table.
func TestSetupReceiver_AloneAndIdempotent(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	name := pgtest.Schema(t)
	for range 2 {
		if err := engine.SetupReceiver(ctx, pool, name); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := engine.NewReceiver(pool, engine.ReceiverConfig{Schema: name})
	if _, err := deliver(t, r, 1, 1, "A"); err != nil {
		t.Fatal(err)
	}
	if err := engine.ResetReceiver(ctx, pool, name); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx, 1); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("after a reset the receiver still holds job 1: %v", err)
	}
	for _, bad := range []string{"", "Bad", "pg_x"} {
		if err := engine.SetupReceiver(ctx, pool, bad); !errors.Is(err, engine.ErrInvalidInput) {
			t.Errorf("SetupReceiver(%q) = %v", bad, err)
		}
	}
}

// TestJobComplete_FencedReasonsAreTheRowAsTheWriteSawIt shows that the
// reasons of a fenced write describe the row at the moment of the write,
// read by the compare-and-set statement itself: a change that lands right
// after the refused write does not leak into its reasons.
func TestJobComplete_FencedReasonsAreTheRowAsTheWriteSawIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	owner := e.queue(0)
	id := e.insert(owner, 1)[0]
	a, _ := owner.Claim(e.ctx, "worker-a", shortLease)
	e.awaitExpiry(owner, id)
	b, err := owner.Claim(e.ctx, "worker-b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The zombie's queue reports each statement as it returns: the moment
	// its compare-and-set has been judged, the new owner commits.
	var once sync.Once
	zombie, err := playground.NewQueue(e.pool, engine.QueueConfig{Schema: e.schemas.Jobs}, playground.QueueHooks{Trace: func(tr playground.Trace) {
		if tr.Name == "JobComplete" {
			once.Do(func() {
				if _, err := owner.Complete(context.Background(), b, result("B")); err != nil {
					t.Errorf("the new owner's commit: %v", err)
				}
			})
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = zombie.Complete(e.ctx, a, result("A"))
	var fe *engine.FencedError
	if !errors.As(err, &fe) {
		t.Fatalf("zombie's complete = %v, want a *FencedError", err)
	}
	want := []engine.FenceReason{engine.ReasonOwnerChanged, engine.ReasonEpochChanged}
	if fe.RowStatus != engine.StatusRunning || fe.RowEpoch != 2 || fe.RowOwner != "worker-b" || fmt.Sprint(fe.Reasons) != fmt.Sprint(want) {
		t.Fatalf("fenced = %+v; want the row as the write saw it: running, epoch 2, worker-b, reasons %v", fe, want)
	}
	if j, _ := owner.Get(e.ctx, id); j.Status != engine.StatusDone {
		t.Fatalf("the new owner's commit did not land: %+v", j)
	}
	// Now the job is done: a late write meets all three reasons.
	_, err = zombie.Fail(e.ctx, a, "late")
	if !errors.As(err, &fe) || fmt.Sprint(fe.Reasons) != fmt.Sprint([]engine.FenceReason{engine.ReasonNotRunning, engine.ReasonOwnerChanged, engine.ReasonEpochChanged}) {
		t.Fatalf("fail on a done job = %v (%+v)", err, fe)
	}
	// With the epoch check off, the epoch is no reason.
	lax := e.queue(playground.Guards(0).Break(playground.EpochCheck))
	_, err = lax.Renew(e.ctx, a, time.Minute)
	if !errors.As(err, &fe) || fmt.Sprint(fe.Reasons) != fmt.Sprint([]engine.FenceReason{engine.ReasonNotRunning, engine.ReasonOwnerChanged}) {
		t.Fatalf("renew with epoch-check off = %v (%+v)", err, fe)
	}
}

// TestErrors_DatabaseDownIsUnavailableAndSaysNoSecret shows that a
// database that cannot be reached gives ErrUnavailable, with a message that
// names neither the user, the password nor the address of the connection.
func TestErrors_DatabaseDownIsUnavailableAndSaysNoSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig("postgres://secretuser:secretpass@127.0.0.1:1/secretdb?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: "nowhere"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.Claim(ctx, "worker-a", time.Second)
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("claim on a dead database = %v, want ErrUnavailable", err)
	}
	for _, secret := range []string{"secretuser", "secretpass", "secretdb", "127.0.0.1"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error %q shows %q", err, secret)
		}
	}
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		t.Errorf("the driver's error is not kept underneath: %T", err)
	}

	// A live server that refuses the role: its FATAL names the role and the
	// driver's text the database and the socket; none of it shows.
	rcfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	rcfg.ConnConfig.User, rcfg.ConnConfig.Database = "nosuch_secretuser", "secretdb"
	refused, err := pgxpool.NewWithConfig(ctx, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	rq, err := engine.NewQueue(refused, engine.QueueConfig{Schema: "nowhere"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = rq.Claim(ctx, "worker-a", time.Second)
	// 28000 on trust, 28P01 where the server asks for a password (the
	// private cluster does).
	if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "SQLSTATE 28000") && !strings.Contains(err.Error(), "SQLSTATE 28P01") {
		t.Fatalf("claim as an unknown role = %v, want ErrUnavailable with its SQLSTATE", err)
	}
	for _, secret := range []string{"secretuser", "secretdb", rcfg.ConnConfig.Host} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error %q shows %q", err, secret)
		}
	}
}

// TestOutbox_AFencedCommitSendsNothing: a delivery written with the commit
// exists only if the commit landed; the zombie's never does.
func TestOutbox_AFencedCommitSendsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	_, a, b := e.zombieAndOwner(q)
	msg := func(c engine.Claim, who string) engine.Delivery {
		return engine.Delivery{JobID: c.JobID, Epoch: c.Epoch, Owner: c.Owner, Payload: result(who)}
	}
	if _, err := q.CompleteOutbox(e.ctx, a, result("A"), msg(a, "A")); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("the zombie's commit with the outbox = %v, want ErrFenced", err)
	}
	if ms, err := q.OutboxPending(e.ctx, 10); err != nil || len(ms) != 0 {
		t.Fatalf("after the fenced commit the outbox holds %+v, %v; want nothing", ms, err)
	}
	if _, err := q.CompleteOutbox(e.ctx, b, result("B"), msg(a, "A")); !errors.Is(err, engine.ErrInvalidInput) {
		t.Fatalf("a delivery for another epoch = %v, want ErrInvalidInput", err)
	}
	if _, err := q.CompleteOutbox(e.ctx, b, result("B"), msg(b, "B")); err != nil {
		t.Fatalf("the owner's commit with the outbox: %v", err)
	}
	ms, err := q.OutboxPending(e.ctx, 10)
	if err != nil || len(ms) != 1 || ms[0].Delivery.Epoch != 2 || protocol.ResultFrom(ms[0].Delivery.Payload) != "B" {
		t.Fatalf("the outbox holds %+v, %v; want B's delivery at epoch 2", ms, err)
	}
	if err := q.OutboxSent(e.ctx, ms[0].ID); err != nil {
		t.Fatal(err)
	}
	if ms, _ := q.OutboxPending(e.ctx, 10); len(ms) != 0 {
		t.Fatalf("a sent delivery is still pending: %+v", ms)
	}
}

// TestReceiver_KeyedAppliesTheFirstAndDeduplicates: a third party that
// knows no epochs applies the first delivery of a key, whoever sent it,
// and answers every later one as a duplicate.
func TestReceiver_KeyedAppliesTheFirstAndDeduplicates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, err := playground.NewReceiver(e.pool, engine.ReceiverConfig{Schema: e.schemas.Receiver}, playground.ReceiverHooks{Keyed: true})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := deliver(t, r, 9, 1, "A")
	if err != nil || rc.Decision != engine.AcceptedFirst {
		t.Fatalf("first delivery: %+v, %v", rc, err)
	}
	rc, err = deliver(t, r, 9, 2, "B")
	if err != nil || rc.Decision != engine.Duplicate || rc.HeldEpoch != 1 || rc.Decision.Accepted() {
		t.Fatalf("a newer epoch for the same key: %+v, %v; want a duplicate that changes nothing", rc, err)
	}
	held, _ := r.Get(e.ctx, 9)
	if held.Epoch != 1 || protocol.ResultFrom(held.Payload) != "A" {
		t.Fatalf("the keyed receiver holds %+v; want the first delivery, A's", held)
	}
	ds, _ := r.Decisions(e.ctx, 9)
	if len(ds) != 2 || ds[1].Decision != engine.Duplicate {
		t.Fatalf("decisions %+v", ds)
	}
}

// TestClaimable_CountsALockedRowASkipLockedClaimPassesOver: while another
// session holds the only claimable row locked, a claim finds nothing and
// Claimable still counts it.
func TestClaimable_CountsALockedRowASkipLockedClaimPassesOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	id := e.insert(q, 1)[0]
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(e.ctx) //nolint:errcheck
	if _, err := tx.Exec(e.ctx, fmt.Sprintf("SELECT 1 FROM %q.jobs WHERE id = $1 FOR UPDATE", e.schemas.Jobs), id); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Claim(e.ctx, "worker-a", time.Minute); !errors.Is(err, engine.ErrNoJob) {
		t.Fatalf("a claim while the row is locked = %v, want ErrNoJob", err)
	}
	if n, err := playground.Claimable(e.ctx, q); err != nil || n != 1 {
		t.Fatalf("Claimable while the row is locked = %d, %v; want 1", n, err)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := q.Claim(e.ctx, "worker-a", time.Minute); err != nil || c.JobID != id {
		t.Fatalf("the claim once the lock is gone: %+v, %v", c, err)
	}
	if n, err := playground.Claimable(e.ctx, q); err != nil || n != 0 {
		t.Fatalf("Claimable with the job claimed = %d, %v; want 0", n, err)
	}
}

// TestClaim_PendingAndLapsedJobsInRunAtOrder: the claim reads pending jobs
// and jobs whose lease ran out apart, and still takes them together in
// run_at order; a row one part locked and the claim did not take is
// claimable by the next claim, and a lapsed job on its last attempt is
// never taken.
func TestClaim_PendingAndLapsedJobsInRunAtOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	tbl := pgx.Identifier{e.schemas.Jobs, "jobs"}.Sanitize()
	// By run_at: lapsed a (4 min ago), pending b (3), lapsed c (2), pending
	// d (1), a lapsed job on its last attempt (5: spent, never claimed), a
	// running job whose lease holds (6), and a pending job not due yet.
	var ids = map[string]int64{}
	for _, j := range []struct{ name, status, lease, runAt string }{
		{"a", "running", "now() - interval '1 second'", "now() - interval '4 minutes'"},
		{"b", "pending", "NULL", "now() - interval '3 minutes'"},
		{"c", "running", "now() - interval '1 second'", "now() - interval '2 minutes'"},
		{"d", "pending", "NULL", "now() - interval '1 minute'"},
		{"spent", "running", "now() - interval '1 second'", "now() - interval '5 minutes'"},
		{"held", "running", "now() + interval '1 hour'", "now() - interval '6 minutes'"},
		{"later", "pending", "NULL", "now() + interval '1 hour'"},
	} {
		attempts := 1
		if j.name == "spent" {
			attempts = 3
		}
		var id int64
		if err := e.pool.QueryRow(e.ctx, fmt.Sprintf(`INSERT INTO %s (payload, status, owner, epoch, attempts, lease_until, run_at)
			VALUES ('{}', $1::text, CASE WHEN $1::text = 'running' THEN 'gone' END, $2::int, $2::int, %s, %s) RETURNING id`, tbl, j.lease, j.runAt),
			j.status, attempts).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[j.name] = id
	}
	one, err := q.Claim(e.ctx, "w1", time.Minute)
	if err != nil || one.JobID != ids["a"] {
		t.Fatalf("one-job claim = %d, %v; want the lapsed job a (%d), the first by run_at", one.JobID, err, ids["a"])
	}
	two, err := q.ClaimBatch(e.ctx, "w2", 2, time.Minute)
	if err != nil || len(two) != 2 || two[0].JobID != ids["b"] || two[1].JobID != ids["c"] {
		t.Fatalf("batch of 2 = %+v, %v; want b (%d) then c (%d)", two, err, ids["b"], ids["c"])
	}
	rest, err := q.ClaimBatch(e.ctx, "w3", 10, time.Minute)
	if err != nil || len(rest) != 1 || rest[0].JobID != ids["d"] {
		t.Fatalf("batch of 10 = %+v, %v; want d (%d) alone", rest, err, ids["d"])
	}
	if _, err := q.Claim(e.ctx, "w4", time.Minute); !errors.Is(err, engine.ErrNoJob) {
		t.Fatalf("a fourth claim: %v, want ErrNoJob", err)
	}
	j, err := q.Get(e.ctx, ids["spent"])
	if err != nil || j.Status != engine.StatusFailed {
		t.Fatalf("the lapsed job on its last attempt: %+v, %v; want failed", j, err)
	}
}

// TestPlace_InTheClaimsOrder: a pending job's place is its rank among the
// pending jobs in the claim's own order (run_at, then id), 1 for the next;
// a claimed, done or failed job has none (0); a job that is not there is
// ErrJobNotFound, and an id that cannot be one is bad input.
func TestPlace_InTheClaimsOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	ids := e.insert(q, 3)
	later, err := q.InsertMany(e.ctx, []engine.NewJob{{Payload: []byte(`{}`), RunAt: time.Now().Add(-time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	place := func(id int64) int {
		t.Helper()
		p, err := q.Place(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The job inserted last but due an hour ago comes first, as the claim takes it.
	if got := []int{place(later[0]), place(ids[0]), place(ids[1]), place(ids[2])}; !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Fatalf("places %v, want [1 2 3 4]", got)
	}
	c, err := q.Claim(e.ctx, "worker-a", time.Minute)
	if err != nil || c.JobID != later[0] {
		t.Fatalf("the claim took %d (%v), want %d", c.JobID, err, later[0])
	}
	if got := []int{place(later[0]), place(ids[0]), place(ids[2])}; !slices.Equal(got, []int{0, 1, 3}) {
		t.Errorf("places once the first is claimed %v, want [0 1 3]", got)
	}
	if _, err := q.Complete(e.ctx, c, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if p := place(later[0]); p != 0 {
		t.Errorf("a done job's place %d, want 0", p)
	}
	if _, err := q.Place(e.ctx, 1<<40); !errors.Is(err, engine.ErrJobNotFound) {
		t.Errorf("the place of no job: %v, want ErrJobNotFound", err)
	}
	if _, err := q.Place(e.ctx, 0); !errors.Is(err, engine.ErrInvalidInput) {
		t.Errorf("the place of job 0: %v, want ErrInvalidInput", err)
	}
}
