package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
)

// countStatus counts the jobs of a schema in a status.
func (e *env) countStatus(schema string, status engine.Status) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(e.ctx, fmt.Sprintf("SELECT count(*) FROM %q.jobs WHERE status = $1", schema), string(status)).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// runPool runs a pool until stop is closed, and returns Run's error.
func runPool(t *testing.T, p *engine.WorkerPool, stop <-chan struct{}) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	go func() { <-stop; cancel() }()
	return errc
}

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWorkerPool_WorksEveryJobOnce: 3,000 jobs, 200 handlers at once; every
// job ends done with its own handler's result, each handled once.
func TestWorkerPool_WorksEveryJobOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	e.insert(q, 3000)
	var mu sync.Mutex
	seen := map[int64]int{}
	p, err := engine.NewWorkerPool(engine.WorkerPoolConfig{Queue: q, Owner: "pool-1", Concurrency: 200, BatchSize: 100, Lease: 10 * time.Second,
		Handler: func(ctx context.Context, c engine.Claim) ([]byte, error) {
			mu.Lock()
			seen[c.JobID]++
			mu.Unlock()
			return json.Marshal(map[string]any{"job": c.JobID, "epoch": c.Epoch})
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errc := runPool(t, p, stop)
	waitUntil(t, "every job done", 60*time.Second, func() bool { return e.countStatus(e.schemas.Jobs, engine.StatusDone) == 3000 })
	close(stop)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("job %d handled %d times", id, n)
		}
	}
	var wrong int
	if err := e.pool.QueryRow(e.ctx, fmt.Sprintf("SELECT count(*) FROM %q.jobs WHERE (result->>'job')::bigint <> id OR owner <> 'pool-1'", e.schemas.Jobs)).Scan(&wrong); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3000 || wrong != 0 {
		t.Fatalf("%d jobs handled, %d with another's result", len(seen), wrong)
	}
}

// TestWorkerPool_StopsGracefully: once Run's context ends, no job is
// claimed any more, the handlers in flight finish and are recorded, and Run
// returns.
func TestWorkerPool_StopsGracefully(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	e.insert(q, 50)
	var started atomic.Int64
	release := make(chan struct{})
	p, err := engine.NewWorkerPool(engine.WorkerPoolConfig{Queue: q, Owner: "pool-1", Concurrency: 5, Lease: 10 * time.Second,
		Handler: func(ctx context.Context, c engine.Claim) ([]byte, error) {
			started.Add(1)
			<-release
			return []byte(`{"ok":true}`), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errc := runPool(t, p, stop)
	waitUntil(t, "five handlers at work", 10*time.Second, func() bool { return started.Load() == 5 })
	close(stop)
	time.Sleep(100 * time.Millisecond) // the pool must not claim while it stops
	close(release)
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its handlers finished")
	}
	if done, pending := e.countStatus(e.schemas.Jobs, engine.StatusDone), e.countStatus(e.schemas.Jobs, engine.StatusPending); done != 5 || pending != 45 || started.Load() != 5 {
		t.Fatalf("after the stop: %d done, %d pending, %d handled; want 5, 45, 5", done, pending, started.Load())
	}
}

// TestWorkerPool_ALostLeaseCancelsTheHandlerAndItsResultIsFenced: a job's
// lease runs out (here made to: the pool's process as if stalled) and
// another worker takes it; the pool's next renewal is fenced, the
// handler's context ends, and its result, when it comes anyway, is refused
// by the fence and reported; the new owner's work stands.
func TestWorkerPool_ALostLeaseCancelsTheHandlerAndItsResultIsFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	id := e.insert(q, 1)[0]
	var fenced []*engine.FencedError
	var mu sync.Mutex
	cancelled := make(chan struct{})
	inHandler := make(chan struct{})
	p, err := engine.NewWorkerPool(engine.WorkerPoolConfig{Queue: q, Owner: "pool-a", Concurrency: 1, Lease: 2 * time.Second, Heartbeat: 100 * time.Millisecond,
		OnFenced: func(fe *engine.FencedError) { mu.Lock(); fenced = append(fenced, fe); mu.Unlock() },
		Handler: func(ctx context.Context, c engine.Claim) ([]byte, error) {
			close(inHandler)
			<-ctx.Done()
			close(cancelled)
			return []byte(`{"from":"the zombie"}`), nil // a result all the same
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errc := runPool(t, p, stop)
	<-inHandler
	// The pool's lease runs out, as if its process had stalled, and B
	// takes the job. The pool's heartbeat (every 100 ms) may renew the
	// lease between the two, as a live holder rightly may before anyone
	// claims it (a loaded CI machine saw B find no job): then again.
	var b []engine.Claim
	for try := 0; len(b) == 0; try++ {
		if try == 20 {
			t.Fatal("B's claim: the pool renewed its lease before every one of 20 claims")
		}
		if _, err := e.pool.Exec(e.ctx, fmt.Sprintf("UPDATE %q.jobs SET lease_until = now() - interval '1 second' WHERE id = $1", e.schemas.Jobs), id); err != nil {
			t.Fatal(err)
		}
		if b, err = q.ClaimBatch(e.ctx, "worker-b", 1, time.Minute); err != nil && !errors.Is(err, engine.ErrNoJob) {
			t.Fatalf("B's claim: %v", err)
		}
	}
	if b[0].JobID != id || b[0].Epoch != 2 {
		t.Fatalf("B's claim: %+v", b)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler of a lost lease was not cancelled")
	}
	waitUntil(t, "the zombie's result fenced", 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(fenced) >= 2 })
	close(stop)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// Both were fenced: the renewal and the handler's late complete, each
	// against B's row. Their reports may come in either order: the
	// renewal's cancels the handler before it is reported, and the
	// complete that follows can be reported first (seen under -race).
	var renew, complete bool
	for _, fe := range fenced {
		renew = renew || fe.Op == "renew" && fe.RowOwner == "worker-b"
		complete = complete || fe.Op == "complete" && fe.RowOwner == "worker-b"
	}
	if !renew || !complete {
		t.Fatalf("fenced: %+v, want the renewal and the complete, each against worker-b's row", fenced)
	}
	j, _ := q.Get(e.ctx, id)
	if j.Status != engine.StatusRunning || j.Owner != "worker-b" || j.Epoch != 2 {
		t.Fatalf("the new owner's job is %+v", j)
	}
}

// TestWorkerPool_AFailureIsRecordedAPanicToo: a handler's error and a
// handler's panic are each the job's failure, retried while it has
// attempts left.
func TestWorkerPool_AFailureIsRecordedAPanicToo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	if _, err := q.Insert(e.ctx, []byte(`{"kind":"error"}`), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Insert(e.ctx, []byte(`{"kind":"panic"}`), 1); err != nil {
		t.Fatal(err)
	}
	p, err := engine.NewWorkerPool(engine.WorkerPoolConfig{Queue: q, Owner: "pool-1", Lease: 10 * time.Second,
		Handler: func(ctx context.Context, c engine.Claim) ([]byte, error) {
			var in struct{ Kind string }
			_ = json.Unmarshal(c.Payload, &in)
			if in.Kind == "panic" {
				panic("the handler broke")
			}
			return nil, errors.New("the billing service said no")
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errc := runPool(t, p, stop)
	waitUntil(t, "both failed", 10*time.Second, func() bool { return e.countStatus(e.schemas.Jobs, engine.StatusFailed) == 2 })
	close(stop)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	var errs []string
	rows, _ := e.pool.Query(e.ctx, fmt.Sprintf("SELECT error FROM %q.jobs ORDER BY id", e.schemas.Jobs))
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		errs = append(errs, s)
	}
	rows.Close()
	if len(errs) != 2 || errs[0] != "the billing service said no" || errs[1] != "the handler panicked: the handler broke" {
		t.Fatalf("the failures: %q", errs)
	}
}

// TestWorkerPool_BadConfigIsRefused.
func TestWorkerPool_BadConfigIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	h := func(context.Context, engine.Claim) ([]byte, error) { return nil, nil }
	for name, cfg := range map[string]engine.WorkerPoolConfig{
		"no queue":         {Owner: "p", Handler: h},
		"no handler":       {Queue: q, Owner: "p"},
		"no owner":         {Queue: q, Handler: h},
		"zero batch":       {Queue: q, Owner: "p", Handler: h, BatchSize: -1},
		"huge batch":       {Queue: q, Owner: "p", Handler: h, BatchSize: engine.MaxBatch + 1},
		"slow heartbeat":   {Queue: q, Owner: "p", Handler: h, Lease: time.Second, Heartbeat: 2 * time.Second},
		"negative poll":    {Queue: q, Owner: "p", Handler: h, PollInterval: -time.Second},
		"too many at once": {Queue: q, Owner: "p", Handler: h, Concurrency: 1 << 20},
		"long linger":      {Queue: q, Owner: "p", Handler: h, Linger: 2 * time.Second},
	} {
		if _, err := engine.NewWorkerPool(cfg); !errors.Is(err, engine.ErrInvalidInput) {
			t.Errorf("%s: %v, want ErrInvalidInput", name, err)
		}
	}
}
