package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// queueWith is a queue on the test's jobs schema over a pool of its own
// whose sessions run with the given settings, such as a lock timeout.
func (e *env) queueWith(settings map[string]string) (*engine.Queue, *pgxpool.Pool) {
	e.t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range settings {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(pool.Close)
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: e.schemas.Jobs, RetryDelayFunc: func(int) time.Duration { return 0 }})
	if err != nil {
		e.t.Fatal(err)
	}
	return q, pool
}

// expireLease runs job id's lease out on the database clock, if the job is
// still at epoch.
func (e *env) expireLease(id, epoch int64) {
	e.t.Helper()
	if _, err := e.pool.Exec(e.ctx, fmt.Sprintf("UPDATE %q.jobs SET lease_until = now() - interval '1 second' WHERE id = $1 AND epoch = $2", e.schemas.Jobs), id, epoch); err != nil {
		e.t.Fatal(err)
	}
}

// takeOver runs job id's lease out and claims it as owner, in one
// transaction, so that nothing else can claim or renew it in between, and
// fails the test unless that claim took job id.
func (e *env) takeOver(id int64, owner string, lease time.Duration) engine.Claim {
	e.t.Helper()
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback(e.ctx)
	if _, err := tx.Exec(e.ctx, fmt.Sprintf("UPDATE %q.jobs SET lease_until = now() - interval '1 second' WHERE id = $1", e.schemas.Jobs), id); err != nil {
		e.t.Fatal(err)
	}
	q, err := engine.NewQueue(tx, engine.QueueConfig{Schema: e.schemas.Jobs})
	if err != nil {
		e.t.Fatal(err)
	}
	cs, err := q.ClaimBatch(e.ctx, owner, 1, lease)
	if err != nil || cs[0].JobID != id {
		e.t.Fatalf("%s could not take job %d over once its lease ran out: %v %v", owner, id, cs, err)
	}
	if err := tx.Commit(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	return cs[0]
}

// holdTable locks the jobs table against every write for d, from another
// session, as a migration or a VACUUM FULL would.
func (e *env) holdTable(d time.Duration, taken chan<- struct{}) {
	e.t.Helper()
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := tx.Exec(e.ctx, "LOCK TABLE "+pgx.Identifier{e.schemas.Jobs, "jobs"}.Sanitize()+" IN SHARE MODE"); err != nil {
		e.t.Fatal(err)
	}
	if taken != nil {
		close(taken)
	}
	time.Sleep(d)
	if err := tx.Commit(e.ctx); err != nil {
		e.t.Fatal(err)
	}
}

// TestWorkerPool_NoFenceWithoutAStall is issue 18's defect 2: with no
// stall at all, OnFenced fired for the pool's own completed jobs, because
// a renewal raced the completion that had just finished them. 20,000 jobs
// and a heartbeat every 5 ms, so renewals meet completions all the time:
// no fence may be told, and every job is done once.
func TestWorkerPool_NoFenceWithoutAStall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	const n = 20_000
	jobs := make([]engine.NewJob, 2000)
	for i := range jobs {
		jobs[i] = engine.NewJob{Payload: []byte(`{}`)}
	}
	for range n / len(jobs) {
		if _, err := q.InsertMany(e.ctx, jobs); err != nil {
			t.Fatal(err)
		}
	}
	var fenced atomic.Int64
	var first atomic.Value
	p, err := engine.NewWorkerPool(engine.WorkerPoolConfig{Queue: q, Owner: engine.UniqueOwner("only-worker"), Concurrency: 500, BatchSize: 200,
		Lease: 5 * time.Second, Heartbeat: 5 * time.Millisecond,
		OnFenced: func(fe *engine.FencedError) {
			if fenced.Add(1) == 1 {
				first.Store(fe.Error())
			}
		},
		Handler: func(ctx context.Context, c engine.Claim) ([]byte, error) {
			time.Sleep(time.Duration(c.JobID%7) * time.Millisecond)
			return nil, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errc := runPool(t, p, stop)
	waitUntil(t, "every job done", 120*time.Second, func() bool { return e.countStatus(e.schemas.Jobs, engine.StatusDone) == n })
	close(stop)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if f := fenced.Load(); f != 0 {
		t.Fatalf("OnFenced was told %d times with no stall and no other claim; the first: %v", f, first.Load())
	}
	var epochs int
	if err := e.pool.QueryRow(e.ctx, fmt.Sprintf("SELECT count(*) FROM %q.jobs WHERE epoch <> 1", e.schemas.Jobs)).Scan(&epochs); err != nil || epochs != 0 {
		t.Fatalf("%d jobs were claimed more than once (%v)", epochs, err)
	}
}

// TestWorkerPool_ACompletionIsRetriedThroughALockTimeout is issue 18's
// defect 3: with lock_timeout 50ms and another session holding the jobs
// table for 450 ms, the completion failed, its result was dropped, and the
// job ran again at epoch 2 — two effects without a stall. Now the
// completion is retried while the lease holds, and lands once.
func TestWorkerPool_ACompletionIsRetriedThroughALockTimeout(t *testing.T) {
	t.Parallel()
	for _, withTx := range []bool{false, true} {
		t.Run(fmt.Sprintf("HandlerTx=%v", withTx), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			q, _ := e.queueWith(map[string]string{"lock_timeout": "50ms"})
			id, err := e.queue(0).Insert(e.ctx, []byte(`{}`), 5) // set-up, outside the lock timeout under test
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			release := make(chan struct{})
			var mu sync.Mutex
			var errs []string
			cfg := engine.WorkerPoolConfig{Queue: q, Owner: engine.UniqueOwner("pool"), Lease: 2 * time.Second, Heartbeat: 200 * time.Millisecond,
				PollInterval: 20 * time.Millisecond,
				OnError:      func(err error) { mu.Lock(); errs = append(errs, err.Error()); mu.Unlock() }}
			work := func(c engine.Claim) []byte {
				runs.Add(1)
				<-release
				b, _ := json.Marshal(map[string]int64{"epoch": c.Epoch})
				return b
			}
			if withTx {
				cfg.HandlerTx = func(ctx context.Context, c engine.Claim) ([]byte, engine.TxFunc, error) {
					return work(c), nil, nil
				}
			} else {
				cfg.Handler = func(ctx context.Context, c engine.Claim) ([]byte, error) { return work(c), nil }
			}
			p, err := engine.NewWorkerPool(cfg)
			if err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			errc := runPool(t, p, stop)
			waitUntil(t, "the handler runs", 5*time.Second, func() bool { return runs.Load() == 1 })
			held, taken := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(held)
				e.holdTable(450*time.Millisecond, taken)
			}()
			// The completion goes out once the lock is taken (a 50 ms sleep
			// once was not long enough on a loaded machine).
			<-taken
			close(release)
			<-held
			waitUntil(t, "the job done", 10*time.Second, func() bool { return e.countStatus(e.schemas.Jobs, engine.StatusDone) == 1 })
			time.Sleep(2500 * time.Millisecond) // longer than the lease: a dropped completion would have run the job again by now
			close(stop)
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			j, _ := q.Get(e.ctx, id)
			if j.Epoch != 1 || runs.Load() != 1 || string(j.Result) != `{"epoch": 1}` {
				t.Fatalf("the job ran %d times and ended %s at epoch %d with %s; want once, at epoch 1", runs.Load(), j.Status, j.Epoch, j.Result)
			}
			mu.Lock()
			defer mu.Unlock()
			if !strings.Contains(strings.Join(errs, "\n"), "records 1 job again") {
				t.Fatalf("OnError was not told of a retry: %q", errs)
			}
		})
	}
}

// TestWorkerPool_HandlerTxWritesCommitExactlyWithTheCompletion is issue
// 18's defect 4: a handler's own writes are fenced with its completion.
// Each job's TxFunc writes an effect row (and one an outbox delivery);
// one job is taken over while its handler runs, one job's write fails.
// Effects exist for exactly the jobs whose completion landed.
func TestWorkerPool_HandlerTxWritesCommitExactlyWithTheCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The job whose write fails waits an hour for its retry: no claim of
	// B's below may find it due (with the default delay, about a second,
	// a loaded machine's B once did).
	q, err := engine.NewQueue(e.pool, engine.QueueConfig{Schema: e.schemas.Jobs, RetryDelayFunc: func(int) time.Duration { return time.Hour }})
	if err != nil {
		t.Fatal(err)
	}
	effects := pgx.Identifier{e.schemas.Jobs, "effects"}.Sanitize()
	if _, err := e.pool.Exec(e.ctx, "CREATE TABLE "+effects+" (job_id bigint PRIMARY KEY, epoch bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	ids := e.insert(q, 20)
	zombie, broken := ids[3], ids[7]
	inZombie := make(chan struct{})
	takenOver := make(chan struct{})
	var fenced atomic.Int64
	p, err := engine.NewWorkerPool(engine.WorkerPoolConfig{Queue: q, Owner: engine.UniqueOwner("pool"), Concurrency: 20, BatchSize: 20,
		Lease: 5 * time.Second, Heartbeat: time.Second,
		OnFenced: func(*engine.FencedError) { fenced.Add(1) },
		HandlerTx: func(ctx context.Context, c engine.Claim) ([]byte, engine.TxFunc, error) {
			if c.JobID == zombie {
				close(inZombie)
				<-takenOver // stalled past its lease, and another claim took the job
			}
			write := func(ctx context.Context, tx pgx.Tx) error {
				if c.JobID == broken {
					if _, err := tx.Exec(ctx, "INSERT INTO "+effects+" VALUES ($1, $2)", c.JobID, c.Epoch); err != nil {
						return err
					}
					return errors.New("the ledger refused it") // after a write of its own, which must go
				}
				if _, err := tx.Exec(ctx, "INSERT INTO "+effects+" VALUES ($1, $2)", c.JobID, c.Epoch); err != nil {
					return err
				}
				return q.Outbox(engine.Delivery{JobID: c.JobID, Epoch: c.Epoch, Owner: c.Owner, Payload: []byte(`{}`)})(ctx, tx)
			}
			return []byte(`{}`), write, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errc := runPool(t, p, stop)
	<-inZombie
	// B takes the job over in one transaction that first runs its lease
	// out: the row stays locked until B holds it, so neither the pool's
	// heartbeat (a renewal is a compare-and-set on owner and epoch, and
	// would revive a lease that ran out) nor the pool's own next claim
	// (which skips locked rows) can come between, however busy the
	// machine (both did, 2 runs in 15, when the lease was run out first
	// and claimed after).
	b := e.takeOver(zombie, "worker-b", time.Minute)
	close(takenOver)
	waitUntil(t, "18 done", 10*time.Second, func() bool { return e.countStatus(e.schemas.Jobs, engine.StatusDone) == 18 })
	close(stop)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	var wrong, outbox int
	if err := e.pool.QueryRow(e.ctx, fmt.Sprintf(`SELECT count(*) FROM %q.jobs j FULL JOIN %s f ON f.job_id = j.id
		WHERE (j.status = 'done') <> (f.job_id IS NOT NULL) OR f.epoch <> j.epoch`, e.schemas.Jobs, effects)).Scan(&wrong); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(e.ctx, fmt.Sprintf(`SELECT count(*) FROM %q.outbox o JOIN %q.jobs j ON j.id = o.job_id AND j.status = 'done' AND j.epoch = o.epoch`, e.schemas.Jobs, e.schemas.Jobs)).Scan(&outbox); err != nil {
		t.Fatal(err)
	}
	if wrong != 0 || outbox != 18 || e.count(e.schemas.Jobs, "outbox") != 18 {
		t.Fatalf("%d jobs whose effect does not match their completion; %d outbox rows of landed completions, %d in all; want 0, 18, 18", wrong, outbox, e.count(e.schemas.Jobs, "outbox"))
	}
	if j, _ := q.Get(e.ctx, zombie); j.Status != engine.StatusRunning || j.Owner != "worker-b" || j.Epoch != b.Epoch {
		t.Fatalf("the taken-over job: %+v", j)
	}
	if j, _ := q.Get(e.ctx, broken); j.Status != engine.StatusPending || !strings.Contains(j.Error, "its write failed: the ledger refused it") {
		t.Fatalf("the job whose write failed: %s, %q", j.Status, j.Error)
	}
	if fenced.Load() == 0 {
		t.Fatal("the zombie's completion was not told to OnFenced")
	}
}

// TestWorkerPool_AHandlerEndsAtItsLease: when no renewal lands (the
// table is held), the handler's context ends once its lease has run out
// by the pool's clock, with ErrLeaseLost as the cause — before another
// claim could take the job and the handler go on as a zombie.
func TestWorkerPool_AHandlerEndsAtItsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q, _ := e.queueWith(map[string]string{"lock_timeout": "20ms"})
	// The set-up's insert goes through the default pool: the 20 ms lock
	// timeout is for the pool's renewals (a CI run's insert once met it).
	if _, err := e.queue(0).Insert(e.ctx, []byte(`{}`), 0); err != nil {
		t.Fatal(err)
	}
	const lease = 400 * time.Millisecond
	started := make(chan time.Time, 1)
	ended := make(chan error, 1)
	p, err := engine.NewWorkerPool(engine.WorkerPoolConfig{Queue: q, Owner: engine.UniqueOwner("pool"), Lease: lease, Heartbeat: 100 * time.Millisecond,
		Handler: func(ctx context.Context, c engine.Claim) ([]byte, error) {
			started <- time.Now()
			<-ctx.Done()
			ended <- context.Cause(ctx)
			return nil, ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errc := runPool(t, p, stop)
	at := <-started
	go e.holdTable(2*lease, nil)
	var cause error
	select {
	case cause = <-ended:
	case <-time.After(5 * lease):
		t.Fatalf("the handler still runs %v after its lease began, and no renewal landed", 5*lease)
	}
	took := time.Since(at)
	close(stop)
	<-errc
	if !errors.Is(cause, engine.ErrLeaseLost) || took < lease-50*time.Millisecond || took > 3*lease {
		t.Fatalf("the handler ended after %v with %v; want about %v, ErrLeaseLost", took, cause, lease)
	}
}

// TestWorkerPool_RetriesWaitTheirBackoff: a panicking handler's attempts
// were spent within moments; now each retry waits out the queue's delay
// (the default: about 1s, then 2s).
func TestWorkerPool_RetriesWaitTheirBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0) // the default RetryDelayFunc
	if _, err := q.Insert(e.ctx, []byte(`{}`), 3); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var at []time.Time
	p, err := engine.NewWorkerPool(engine.WorkerPoolConfig{Queue: q, Owner: engine.UniqueOwner("pool"), Lease: 5 * time.Second, PollInterval: 20 * time.Millisecond,
		Handler: func(ctx context.Context, c engine.Claim) ([]byte, error) {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
			panic("poison")
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errc := runPool(t, p, stop)
	waitUntil(t, "the job failed", 10*time.Second, func() bool { return e.countStatus(e.schemas.Jobs, engine.StatusFailed) == 1 })
	close(stop)
	<-errc
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 3 {
		t.Fatalf("%d attempts, want 3", len(at))
	}
	if d1, d2 := at[1].Sub(at[0]), at[2].Sub(at[1]); d1 < 700*time.Millisecond || d2 < 1400*time.Millisecond || d2 < d1 || d2 > 6*time.Second {
		t.Fatalf("the retries came after %v and %v; want at least 0.75s and 1.5s (about 1s and 2s, ±25%%), the second longer", d1, d2)
	}
}

// TestWorkerPool_ItsOwnSecondClaimOfAJobIsLeftAlone: a run that lost its
// lease returns after the same pool claimed the job again. The old run's
// fenced result must not cancel the new run, nor forget it: the pool told
// the two apart by job id alone (an outsider's program saw the newer run
// cancelled and an attempt burnt).
func TestWorkerPool_ItsOwnSecondClaimOfAJobIsLeftAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	id := e.insert(q, 1)[0]
	first, second := make(chan struct{}), make(chan context.Context, 1)
	releaseFirst, releaseSecond := make(chan struct{}), make(chan struct{})
	var fenced atomic.Int64
	p, err := engine.NewWorkerPool(engine.WorkerPoolConfig{Queue: q, Owner: engine.UniqueOwner("pool"), Concurrency: 4,
		Lease: 5 * time.Second, Heartbeat: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		OnFenced: func(*engine.FencedError) { fenced.Add(1) },
		Handler: func(ctx context.Context, c engine.Claim) ([]byte, error) {
			if c.Epoch == 1 {
				close(first)
				<-releaseFirst // stalled, ignoring its context: a zombie within the pool
			} else {
				second <- ctx
				<-releaseSecond
			}
			return json.Marshal(map[string]int64{"epoch": c.Epoch})
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errc := runPool(t, p, stop)
	<-first
	// The pool claims its own job again, at epoch 2, once its lease has run
	// out; its own heartbeat renews the lease until a claim takes it, so
	// the lease is run out again until one does.
	var ctx2 context.Context
	for giveUp := time.Now().Add(10 * time.Second); ctx2 == nil; {
		if time.Now().After(giveUp) {
			t.Fatal("the pool did not claim its own job again after its lease ran out")
		}
		e.expireLease(id, 1) // not the new claim's
		select {
		case ctx2 = <-second:
		case <-time.After(50 * time.Millisecond):
		}
	}
	close(releaseFirst)
	waitUntil(t, "the old run's result fenced", 5*time.Second, func() bool { return fenced.Load() >= 1 })
	time.Sleep(200 * time.Millisecond) // heartbeats go on
	if err := context.Cause(ctx2); err != nil {
		t.Fatalf("the new run's context ended: %v", err)
	}
	if n := p.InFlight(); n != 1 {
		t.Fatalf("%d jobs in flight, want the new run's 1", n)
	}
	close(releaseSecond)
	waitUntil(t, "the job done", 5*time.Second, func() bool { return e.countStatus(e.schemas.Jobs, engine.StatusDone) == 1 })
	close(stop)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if j, _ := q.Get(e.ctx, id); j.Epoch != 2 || j.Attempts != 2 || string(j.Result) != `{"epoch": 2}` {
		t.Fatalf("the job ended %+v", j)
	}
}

// TestWorkerPool_AFailureWhoseWordsPostgresCannotStoreIsRecorded: a
// handler's error with a NUL and bytes that are not UTF-8 was refused by
// the database, and the failure was lost to the lease; its words are now
// made storable.
func TestWorkerPool_AFailureWhoseWordsPostgresCannotStoreIsRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q, err := engine.NewQueue(e.pool, engine.QueueConfig{Schema: e.schemas.Jobs, RetryDelayFunc: func(int) time.Duration { return time.Hour }})
	if err != nil {
		t.Fatal(err)
	}
	id := e.insert(q, 1)[0]
	p, err := engine.NewWorkerPool(engine.WorkerPoolConfig{Queue: q, Owner: engine.UniqueOwner("pool"), Lease: 10 * time.Second,
		Handler: func(ctx context.Context, c engine.Claim) ([]byte, error) {
			return nil, errors.New("bad \x00 bytes \xff\xfe here")
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errc := runPool(t, p, stop)
	waitUntil(t, "the failure recorded", 5*time.Second, func() bool {
		j, _ := q.Get(e.ctx, id)
		return j.Status == engine.StatusPending && j.Error != ""
	})
	close(stop)
	<-errc
	if j, _ := q.Get(e.ctx, id); j.Error != "bad \uFFFD bytes \uFFFD here" || j.Attempts != 1 {
		t.Fatalf("the failure reads %q after %d attempts", j.Error, j.Attempts)
	}
}

// TestWorkerPool_RefusesWhatCannotWork: a Queue over one connection, and
// a schema at an older version.
func TestWorkerPool_RefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := func(context.Context, engine.Claim) ([]byte, error) { return nil, nil }
	conn, err := pgx.Connect(e.ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(e.ctx)
	cq, err := engine.NewQueue(conn, engine.QueueConfig{Schema: e.schemas.Jobs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.NewWorkerPool(engine.WorkerPoolConfig{Queue: cq, Owner: "p", Handler: h}); !errors.Is(err, engine.ErrInvalidInput) || !strings.Contains(err.Error(), "pgxpool.Pool") {
		t.Fatalf("a pool over one *pgx.Conn: %v", err)
	}
	if _, err := engine.NewQueue(nil, engine.QueueConfig{Schema: e.schemas.Jobs}); !errors.Is(err, engine.ErrInvalidInput) {
		t.Fatalf("a queue over no DB: %v", err)
	}
	old := pgtest.Schema(t)
	if _, err := engine.MigrateQueue(e.ctx, e.pool, old, 1); err != nil {
		t.Fatal(err)
	}
	oq, err := engine.NewQueue(e.pool, engine.QueueConfig{Schema: old})
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.NewWorkerPool(engine.WorkerPoolConfig{Queue: oq, Owner: "p", Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(e.ctx); !errors.Is(err, engine.ErrInvalidInput) || !strings.Contains(err.Error(), "version 1") {
		t.Fatalf("a pool on a schema at version 1: %v", err)
	}
}
