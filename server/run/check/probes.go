package check

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The statement probes: the reader's claim, complete and fail run as the
// check's role, as a worker would run them, on the two jobs of Validate's
// table, which the server's own connection sets to each probe's state
// first. None is a run: each asks one question of the statements that no
// run's ordering asks, and says what it found broken in the words of the
// requirement, or nothing.

// probeStatements runs every statement probe, in turn, and returns what
// they found broken, in order.
func probeStatements(ctx context.Context, pool *pgxpool.Pool, s judge.Schemas, role *sandbox.Role, st *sandbox.Statements) ([]experiments.CheckBroken, error) {
	conn, err := role.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck // a connection of its own
	p := &prober{pool: pool, conn: conn, st: st, schema: s.Jobs}
	var found []experiments.CheckBroken
	b, err := probeClaimers(ctx, role, st.Claim)
	if err != nil {
		return nil, err
	}
	if b != nil {
		found = append(found, *b)
	}
	for _, probe := range []func(context.Context) (*experiments.CheckBroken, error){p.expired, p.holderFails, p.otherJob} {
		b, err := probe(ctx)
		if err != nil {
			return nil, err
		}
		if b != nil {
			found = append(found, *b)
		}
	}
	return found, nil
}

// prober runs the reader's statements as the role (conn) and sets and
// reads the jobs table as the server (pool).
type prober struct {
	pool   *pgxpool.Pool
	conn   *pgx.Conn
	st     *sandbox.Statements
	schema string // the jobs'
}

// Leases a probe can give a job.
const (
	leaseNone    = 0
	leaseExpired = -time.Minute
	leaseLive    = time.Minute
)

// set puts job id in a state, as the server.
func (p *prober) set(ctx context.Context, id int64, status engine.Status, owner string, epoch int64, lease time.Duration, attempts, maxAttempts int) error {
	err := judge.SetJob(ctx, p.pool, p.schema, id, judge.JobState{Status: status, Owner: owner, Epoch: epoch, Lease: lease, Attempts: attempts, MaxAttempts: maxAttempts})
	if err != nil {
		return fmt.Errorf("check the statements: set up a probe: %w", err)
	}
	return nil
}

func (p *prober) rows(ctx context.Context) (map[int64]judge.JobRow, error) {
	rows, err := judge.JobRows(ctx, p.pool, p.schema)
	if err != nil {
		return nil, fmt.Errorf("check the statements: %w", err)
	}
	return rows, nil
}

// exec runs one of the reader's statements as the role. A refusal is
// returned as its message, for the probe's words; any other error is the
// database's.
func (p *prober) exec(ctx context.Context, k sandbox.Kind, args map[string]any) (*sandbox.Result, string, error) {
	r, err := sandbox.Exec(ctx, p.conn, p.st.Of(k), args)
	var refused *sandbox.Error
	switch {
	case errors.As(err, &refused):
		return nil, refused.Message, nil
	case err != nil:
		return nil, "", err
	}
	return r, "", nil
}

func (p *prober) claim(ctx context.Context, owner string) (id, epoch int64, refused string, err error) {
	r, refused, err := p.exec(ctx, sandbox.Claim, map[string]any{"owner": owner, "lease": DefaultLease, "now": time.Now()})
	if err != nil || refused != "" {
		return 0, 0, refused, err
	}
	id, _ = claimedID(r)
	epoch, _ = column(r, "epoch")
	return id, epoch, "", nil
}

func (p *prober) commit(ctx context.Context, k sandbox.Kind, id int64, owner string, epoch int64) (landed bool, refused string, err error) {
	args := map[string]any{"id": id, "owner": owner, "epoch": epoch}
	if k == sandbox.Fail {
		args["error"] = "the handler failed"
	} else {
		body, _ := json.Marshal(protocol.Result{Worker: experiments.Zombie, Owner: owner, JobID: id, Epoch: epoch, Output: "a probe's result"})
		args["result"] = string(body)
	}
	r, refused, err := p.exec(ctx, k, args)
	if err != nil || refused != "" {
		return false, refused, err
	}
	return r.Landed(), "", nil
}

func brokenBy(q experiments.Requirement, c experiments.CheckCase, format string, a ...any) *experiments.CheckBroken {
	return &experiments.CheckBroken{Requirement: q, Case: c, Words: c.Title() + ": " + fmt.Sprintf(format, a...)}
}

// expired: the one claimable job runs under a lease that ran out a
// minute ago, its holder gone; the other is done. The claim must take it.
func (p *prober) expired(ctx context.Context) (*experiments.CheckBroken, error) {
	if err := p.set(ctx, 1, engine.StatusRunning, "worker-c", 1, leaseExpired, 1, 3); err != nil {
		return nil, err
	}
	if err := p.set(ctx, 2, engine.StatusDone, "worker-c", 1, leaseNone, 1, 3); err != nil {
		return nil, err
	}
	id, _, refused, err := p.claim(ctx, "worker-b")
	switch {
	case err != nil:
		return nil, err
	case refused != "":
		return brokenBy(experiments.ReqTakesExpired, experiments.CaseExpired, "worker B's claim failed: %s", refused), nil
	case id == 0:
		return brokenBy(experiments.ReqTakesExpired, experiments.CaseExpired, "worker B's claim took nothing while job 1's lease had run out a minute before on the database clock: "+
			"your claim never takes a job whose lease ran out, so a crashed worker's job waits for ever (claim a running job whose lease_until < now() too)"), nil
	}
	return nil, nil
}

// holderFails: a job of two attempts, claimed and failed by its holder,
// twice. The first failure sends it back for a retry; the second, on its
// last attempt, ends it failed.
func (p *prober) holderFails(ctx context.Context) (*experiments.CheckBroken, error) {
	if err := p.set(ctx, 1, engine.StatusPending, "", 0, leaseNone, 0, 2); err != nil {
		return nil, err
	}
	if err := p.set(ctx, 2, engine.StatusDone, "worker-c", 1, leaseNone, 1, 3); err != nil {
		return nil, err
	}
	// The retry and the last attempt are fencelab's, beyond the article
	// (ReqFailRetries: a note); a fail that refuses its own holder, or a
	// statement that fails, breaks the article's.
	broken := func(format string, a ...any) *experiments.CheckBroken {
		return brokenBy(experiments.ReqFailRetries, experiments.CaseHolderFails, format, a...)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		id, epoch, refused, err := p.claim(ctx, "worker-a")
		switch {
		case err != nil:
			return nil, err
		case refused != "":
			return brokenBy(experiments.ReqRuns, experiments.CaseHolderFails, "the claim of attempt %d failed: %s", attempt, refused), nil
		case id == 0 && attempt == 1:
			return nil, nil // a claim that takes nothing: the runs name it
		case id == 0:
			return broken("after the holder's first failure no claim took the job again: fencelab asks that a fail send a job with attempts left back for a retry (status 'pending')"), nil
		}
		landed, refused, err := p.commit(ctx, sandbox.Fail, id, "worker-a", epoch)
		switch {
		case err != nil:
			return nil, err
		case refused != "":
			return brokenBy(experiments.ReqRuns, experiments.CaseHolderFails, "the holder's fail failed: %s", refused), nil
		case !landed:
			return brokenBy(experiments.ReqFailFence, experiments.CaseHolderFails, "the holder's own fail, with the epoch its claim returned (%d), changed no row: your fail refuses the job's own holder", epoch), nil
		}
		rows, err := p.rows(ctx)
		if err != nil {
			return nil, err
		}
		r := rows[id]
		switch {
		case attempt == 1 && r.Status != "pending":
			return broken("after its first failure, with 1 of 2 attempts left, the job is %s: fencelab asks that a fail send it back for a retry (status 'pending')", r.Status), nil
		case attempt == 2 && r.Status != "failed":
			return broken("on its last attempt (2 of 2, its attempts column says %d) your fail left the job %s: fencelab asks that a job that always fails end failed, not come back for ever (CASE WHEN attempts >= max_attempts THEN 'failed' …, with a claim that counts attempts)", r.Attempts, r.Status), nil
		}
	}
	return nil, nil
}

// otherJob: worker A holds job 2 at epoch 1, under a live lease, and
// claims job 1 too, which gets epoch 1 as well; it completes job 1, and
// then, job 1 set back as it was, claims and fails it. No statement may
// change job 2's row, though its owner and epoch are job 1's, and no
// epoch may go down.
func (p *prober) otherJob(ctx context.Context) (*experiments.CheckBroken, error) {
	var before map[int64]judge.JobRow
	reset := func() error {
		if err := p.set(ctx, 1, engine.StatusPending, "", 0, leaseNone, 0, 3); err != nil {
			return err
		}
		if err := p.set(ctx, 2, engine.StatusRunning, "worker-a", 1, leaseLive, 1, 3); err != nil {
			return err
		}
		var err error
		before, err = p.rows(ctx)
		return err
	}
	broken := func(format string, a ...any) *experiments.CheckBroken {
		return brokenBy(experiments.ReqOwnRow, experiments.CaseOtherJob, format, a...)
	}
	// after reads the table after a statement and names what it did to
	// another job or to an epoch.
	after := func(what string) (*experiments.CheckBroken, error) {
		now, err := p.rows(ctx)
		if err != nil {
			return nil, err
		}
		if d := before[2].Diff(now[2]); d != "" {
			return broken("%s changed job 2, which worker A also holds at epoch 1 (%s): each statement must change its own job's row alone (WHERE id = :id)", what, d), nil
		}
		if down := judge.EpochWentDown(before, now); down != "" {
			return broken("%s sent %s: an epoch never goes down, or an old token is new again", what, down), nil
		}
		before = now
		return nil, nil
	}
	for _, k := range []sandbox.Kind{sandbox.Complete, sandbox.Fail} {
		if err := reset(); err != nil {
			return nil, err
		}
		id, epoch, refused, err := p.claim(ctx, "worker-a")
		switch {
		case err != nil:
			return nil, err
		case refused != "" || id != 1:
			return nil, nil // the runs and the other probes name a claim that fails or takes a live job
		}
		if b, err := after("your claim"); b != nil || err != nil {
			return b, err
		}
		if _, refused, err := p.commit(ctx, k, id, "worker-a", epoch); err != nil || refused != "" {
			return nil, err
		}
		if b, err := after("your " + k.String()); b != nil || err != nil {
			return b, err
		}
	}
	return nil, nil
}

// column is an integer column of a result's first row.
func column(r *sandbox.Result, name string) (int64, bool) {
	if r == nil || len(r.Rows) == 0 {
		return 0, false
	}
	for i, c := range r.Columns {
		if c == name && i < len(r.Rows[0]) {
			switch v := r.Rows[0][i].(type) { // the claim may return any integer type
			case int64:
				return v, true
			case int32:
				return int64(v), true
			case int16:
				return int64(v), true
			}
			return 0, false
		}
	}
	return 0, false
}

// claimersWait is how long the second of two claimers at once may take
// to get its job: "at once", with room for a loaded machine. The role's
// lock_timeout (1 s) ends a claim that waits on the first one's lock
// first.
const claimersWait = 3 * time.Second

// probeClaimers runs the claim as two claimers at once on two pending
// jobs, as the role: worker A's claim in a transaction held open, then
// worker B's, on a connection of its own, while A's locks are held. B
// must get a job at once, and not A's. A claim without SKIP LOCKED waits
// on A's lock (until the role's lock_timeout ends it); one that finds
// nothing, or A's job, is named too. The transaction is rolled back.
func probeClaimers(ctx context.Context, role *sandbox.Role, claim *sandbox.Vetted) (*experiments.CheckBroken, error) {
	broken := func(format string, a ...any) *experiments.CheckBroken {
		return &experiments.CheckBroken{Requirement: experiments.ReqSkipLocked, Case: experiments.CaseClaimers,
			Words: experiments.CaseClaimers.Title() + ": " + fmt.Sprintf(format, a...)}
	}
	connA, err := role.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer connA.Close(context.WithoutCancel(ctx)) //nolint:errcheck // a connection of its own
	connB, err := role.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer connB.Close(context.WithoutCancel(ctx)) //nolint:errcheck // a connection of its own
	txA, err := connA.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("two claimers: %w", err)
	}
	defer txA.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // the probe changes nothing
	args := func(owner string) map[string]any {
		return map[string]any{"owner": owner, "lease": DefaultLease, "now": time.Now()}
	}
	a, err := sandbox.Exec(ctx, connA, claim, args("worker-a"))
	var refused *sandbox.Error
	switch {
	case errors.As(err, &refused):
		return broken("worker A's claim failed: %s", refused.Message), nil
	case err != nil:
		return nil, err
	}
	idA, okA := claimedID(a)
	if !okA {
		return broken("worker A's claim took no job while two were pending"), nil
	}
	bctx, cancel := context.WithTimeout(ctx, claimersWait)
	defer cancel()
	began := time.Now()
	b, err := sandbox.Exec(bctx, connB, claim, args("worker-b"))
	took := time.Since(began).Round(time.Millisecond)
	switch {
	case errors.As(err, &refused) || (err != nil && bctx.Err() != nil):
		return broken("worker B's claim waited on worker A's lock (%v, until it gave up) while another job was pending: "+
			"two claimers at once must each get their own job at once; your claim does not skip the locked row (FOR UPDATE SKIP LOCKED)", took), nil
	case err != nil:
		return nil, err
	}
	idB, okB := claimedID(b)
	switch {
	case !okB:
		return broken("worker B's claim took no job while worker A held one and another was pending: your claim does not skip the locked row (FOR UPDATE SKIP LOCKED)"), nil
	case idB == idA:
		return broken("both claimers got job %d: your claim hands one job to two workers (lock the row it picks: FOR UPDATE SKIP LOCKED)", idA), nil
	}
	return nil, nil
}

// claimedID is the id of the job a claim returned.
func claimedID(r *sandbox.Result) (int64, bool) { return column(r, "id") }
