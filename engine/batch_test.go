package engine_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
)

// TestBatch_AZombieInsideABatchIsRefusedTheRestLand: worker A claims three
// jobs in one statement and stalls; its leases run out and worker B takes
// the first; A's batch completion of all three lands two and refuses the
// one B holds, with the reasons its own row gave, and leaves B's alone.
func TestBatch_AZombieInsideABatchIsRefusedTheRestLand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	ids := e.insert(q, 3)
	// A lease a loaded machine cannot outlast between this claim and the
	// next line's (60 ms once ran out in between on CI); awaitExpiry
	// waits it out below.
	as, err := q.ClaimBatch(e.ctx, "worker-a", 10, 2*time.Second)
	if err != nil || len(as) != 3 {
		t.Fatalf("A's batch claim: %v, %v", as, err)
	}
	for i, c := range as {
		if c.JobID != ids[i] || c.Epoch != 1 || c.Owner != "worker-a" || c.Attempt != 1 {
			t.Fatalf("A's claim %d: %+v", i, c)
		}
	}
	if _, err := q.ClaimBatch(e.ctx, "worker-b", 10, time.Minute); !errors.Is(err, engine.ErrNoJob) {
		t.Fatalf("a claim while A's leases are live = %v, want ErrNoJob", err)
	}
	e.awaitExpiry(q, ids[0])
	bs, err := q.ClaimBatch(e.ctx, "worker-b", 1, time.Minute)
	if err != nil || len(bs) != 1 || bs[0].JobID != ids[0] || bs[0].Epoch != 2 {
		t.Fatalf("B's claim: %+v, %v", bs, err)
	}
	var cs []engine.Completion
	for _, c := range as {
		cs = append(cs, engine.Completion{Claim: c, Result: result("A")})
	}
	rs, err := q.CompleteBatch(e.ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	var fe *engine.FencedError
	if !errors.As(rs[0].Err, &fe) || !errors.Is(rs[0].Err, engine.ErrFenced) {
		t.Fatalf("the zombie's completion of job %d: %v, want fenced", ids[0], rs[0].Err)
	}
	if fe.RowOwner != "worker-b" || fe.RowEpoch != 2 || fe.HeldEpoch != 1 || fe.RowStatus != engine.StatusRunning ||
		!slices.Equal(fe.Reasons, []engine.FenceReason{engine.ReasonOwnerChanged, engine.ReasonEpochChanged}) {
		t.Fatalf("the fence: %+v", fe)
	}
	for _, r := range rs[1:] {
		if r.Err != nil {
			t.Fatalf("job %d of the batch: %v, want landed", r.JobID, r.Err)
		}
	}
	if n := len(fenced(rs)); n != 1 {
		t.Fatalf("Fenced found %d", n)
	}
	for i, id := range ids {
		j, err := q.Get(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := engine.StatusDone
		if i == 0 {
			want = engine.StatusRunning // B's, untouched
		}
		if j.Status != want || (i == 0 && (j.Owner != "worker-b" || j.Epoch != 2)) {
			t.Fatalf("job %d is %+v, want %s", id, j, want)
		}
	}
	// B renews and then completes its job; A's renewal of its batch is
	// fenced for that job alone.
	rr, err := q.RenewBatch(e.ctx, as, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(rr[0].Err, engine.ErrFenced) || rr[1].Err == nil || rr[2].Err == nil {
		// jobs 2 and 3 are done: not running, so A's renewal is fenced too
		t.Fatalf("A's renewal after its batch: %v / %v / %v", rr[0].Err, rr[1].Err, rr[2].Err)
	}
	rb, err := q.RenewBatch(e.ctx, bs, time.Minute)
	if err != nil || rb[0].Err != nil || !rb[0].LeaseUntil.After(bs[0].LeaseUntil) {
		t.Fatalf("B's renewal: %+v, %v", rb, err)
	}
	cb, err := q.CompleteBatch(e.ctx, []engine.Completion{{Claim: bs[0], Result: result("B")}})
	if err != nil || cb[0].Err != nil {
		t.Fatalf("B's completion: %+v, %v", cb, err)
	}
}

// TestBatch_FailGoesBackToPendingThenFailed: a failure returns the job to
// pending while it has attempts left, and to failed after, in one
// statement for many jobs.
func TestBatch_FailGoesBackToPendingThenFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	if _, err := q.Insert(e.ctx, []byte(`{"n":1}`), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Insert(e.ctx, []byte(`{"n":2}`), 2); err != nil {
		t.Fatal(err)
	}
	cs, err := q.ClaimBatch(e.ctx, "worker-a", 2, time.Minute)
	if err != nil || len(cs) != 2 {
		t.Fatalf("claims: %v, %v", cs, err)
	}
	rs, err := q.FailBatch(e.ctx, []engine.Failure{{Claim: cs[0], Reason: "boom"}, {Claim: cs[1], Reason: "boom"}})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Err != nil || rs[0].Status != engine.StatusFailed || rs[1].Err != nil || rs[1].Status != engine.StatusPending {
		t.Fatalf("failures: %+v", rs)
	}
}

// TestBatch_TheGuardsHoldAsForOneJob: with the epoch check off and one name
// for both workers, the zombie's batch completion lands, as its one-job
// commit would; with the guards on it does not.
func TestBatch_TheGuardsHoldAsForOneJob(t *testing.T) {
	t.Parallel()
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprint("epoch-check off: ", broken), func(t *testing.T) {
			e := newEnv(t)
			var gs playground.Guards
			if broken {
				gs = gs.Break(playground.EpochCheck)
			}
			q := e.queue(gs)
			id := e.insert(q, 1)[0]
			a, _ := q.ClaimBatch(e.ctx, "pod-1", 1, shortLease)
			e.awaitExpiry(q, id)
			if _, err := q.ClaimBatch(e.ctx, "pod-1", 1, time.Minute); err != nil {
				t.Fatal(err)
			}
			rs, err := q.CompleteBatch(e.ctx, []engine.Completion{{Claim: a[0], Result: result("A")}})
			if err != nil {
				t.Fatal(err)
			}
			if landed := rs[0].Err == nil; landed != broken {
				t.Fatalf("the zombie's completion landed: %v, want %v (%v)", landed, broken, rs[0].Err)
			}
		})
	}
}

// TestBatch_BadInputChangesNothing: an empty batch, too many, a job twice,
// a bad claim or result, a job that is not there.
func TestBatch_BadInputChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue(0)
	id := e.insert(q, 1)[0]
	cs, err := q.ClaimBatch(e.ctx, "worker-a", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c := cs[0]
	for name, call := range map[string]func() error{
		"claim 0":      func() error { _, err := q.ClaimBatch(e.ctx, "worker-a", 0, time.Minute); return err },
		"claim 10001":  func() error { _, err := q.ClaimBatch(e.ctx, "worker-a", engine.MaxBatch+1, time.Minute); return err },
		"claim no one": func() error { _, err := q.ClaimBatch(e.ctx, "", 1, time.Minute); return err },
		"empty":        func() error { _, err := q.CompleteBatch(e.ctx, nil); return err },
		"twice": func() error {
			_, err := q.CompleteBatch(e.ctx, []engine.Completion{{Claim: c, Result: result("A")}, {Claim: c, Result: result("A")}})
			return err
		},
		"bad result": func() error {
			_, err := q.CompleteBatch(e.ctx, []engine.Completion{{Claim: c, Result: []byte("{")}})
			return err
		},
		"nul result": func() error {
			_, err := q.CompleteBatch(e.ctx, []engine.Completion{{Claim: c, Result: []byte(`{"a":"\u0000"}`)}})
			return err
		},
		"bad epoch": func() error {
			bad := c
			bad.Epoch = -1
			_, err := q.RenewBatch(e.ctx, []engine.Claim{bad}, time.Minute)
			return err
		},
		"empty fail":  func() error { _, err := q.FailBatch(e.ctx, []engine.Failure{{Claim: c, Reason: " "}}); return err },
		"short lease": func() error { _, err := q.RenewBatch(e.ctx, []engine.Claim{c}, time.Nanosecond); return err },
	} {
		if err := call(); !errors.Is(err, engine.ErrInvalidInput) {
			t.Errorf("%s: %v, want ErrInvalidInput", name, err)
		}
	}
	j, _ := q.Get(e.ctx, id)
	if j.Status != engine.StatusRunning || j.Epoch != 1 {
		t.Fatalf("after the refusals the job is %+v", j)
	}
	gone := c
	gone.JobID = id + 1000
	rs, err := q.CompleteBatch(e.ctx, []engine.Completion{{Claim: c, Result: result("A")}, {Claim: gone, Result: result("A")}})
	if err != nil || rs[0].Err != nil || !errors.Is(rs[1].Err, engine.ErrJobNotFound) {
		t.Fatalf("a batch with a job that is not there: %+v, %v", rs, err)
	}
}

// TestSetupQueue_NoHistoryNoTrigger: a queue set up alone has no history
// trigger, so nothing is written beside its jobs.
func TestSetupQueue_NoHistoryNoTrigger(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	schema := e.schemas.Jobs + "_q"
	if err := engine.SetupQueue(e.ctx, e.pool, schema); err != nil {
		t.Fatal(err)
	}
	defer engine.DropQueue(e.ctx, e.pool, schema) //nolint:errcheck
	var triggers int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND NOT t.tgisinternal`, schema).Scan(&triggers); err != nil {
		t.Fatal(err)
	}
	if triggers != 0 {
		t.Fatalf("a queue set up alone has %d triggers", triggers)
	}
	q, _ := engine.NewQueue(e.pool, engine.QueueConfig{Schema: schema})
	if _, err := q.Insert(e.ctx, []byte(`{}`), 0); err != nil {
		t.Fatal(err)
	}
	cs, err := q.ClaimBatch(e.ctx, "w", 5, time.Minute)
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %v, %v", cs, err)
	}
	if rs, err := q.CompleteBatch(e.ctx, []engine.Completion{{Claim: cs[0], Result: []byte(`{}`)}}); err != nil || rs[0].Err != nil {
		t.Fatalf("complete: %+v, %v", rs, err)
	}
}

// fenced returns the batch results whose write the fence refused.
func fenced(rs []engine.BatchResult) []*engine.FencedError {
	var out []*engine.FencedError
	for _, r := range rs {
		var fe *engine.FencedError
		if errors.As(r.Err, &fe) {
			out = append(out, fe)
		}
	}
	return out
}
