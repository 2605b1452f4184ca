package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// The probes of a worker program: the questions of its statements that no
// run's ordering asks, played on the program itself, from outside, in a
// case of their own each (fresh schemas, role, receiver, workers). They
// are the SQL check's probes (server/run/check's), asked of a program: two
// claimers at once, a job whose lease ran out, the holder's own fail,
// another job in the table. Each says what it found broken, in the words
// of the requirement, or nothing; what the program cannot do at all (start,
// claim, call the receiver) the runs name, and a probe leaves it to them.

const (
	// lockWaited is how long a worker may wait on a row lock another
	// claimer holds before its claim is named: at once, with room for a
	// loaded machine. (The role's lock_timeout, 1 s, ends such a wait.)
	lockWaited = 300 * time.Millisecond
	// emptyClaims is how many claims that matched no row a worker may send
	// while the only job's lease has run out before its claim is named.
	emptyClaims = 3
)

// Probe plays every probe of the program, in turn, and returns what they
// found broken (experiments.Probes.Statements), in the article's order,
// with the probes it played (Probes.Played). Once one shows the worker
// doing nothing (it never claims, or never calls the receiver), the rest
// are not played, nor are the cases after (Play says so in each). It returns an error only
// when the check cannot go on: the database, or ctx.
func (p *Player) Probe(ctx context.Context) (experiments.Probes, error) {
	var probes experiments.Probes
	for _, probe := range []struct {
		c    experiments.CheckCase
		play func(context.Context, *caseRun) (*experiments.CheckBroken, error)
	}{
		{experiments.CaseClaimers, probeClaimers},
		{experiments.CaseExpired, probeExpired},
		{experiments.CaseHolderFails, probeHolderFails},
		{experiments.CaseOtherJob, probeOtherJob},
	} {
		b, err := p.probe(ctx, probe.c, probe.play)
		if err != nil {
			return experiments.Probes{}, fmt.Errorf("probe %s: %w", probe.c, err)
		}
		if b != nil {
			probes.Statements = append(probes.Statements, *b)
		}
		probes.Played = append(probes.Played, probe.c)
		if p.idle.Load() != nil {
			break // a worker that does nothing: the runs name it, at once
		}
	}
	return probes, nil
}

// probe plays one probe in a case of its own. A worker that broke the
// contract (a caseError) is the runs' to name.
func (p *Player) probe(ctx context.Context, cs experiments.CheckCase, play func(context.Context, *caseRun) (*experiments.CheckBroken, error)) (*experiments.CheckBroken, error) {
	rc := experiments.RunConfig{Ordering: experiments.NewOwnerFirst, Lease: p.cfg.Lease, Custom: true}
	if err := rc.Validate(); err != nil {
		return nil, err
	}
	c, closeCase, err := openCase(ctx, &p.cfg, cs, rc)
	if err != nil {
		return nil, err
	}
	defer closeCase()
	b, err := play(ctx, c)
	var ce *caseError
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.As(err, &ce):
		c.log.Info("probe left to the runs", "code", ce.code, "err", ce.msg)
		p.sawIdle(cs, ce)
		return nil, nil
	case err != nil:
		return nil, err
	}
	if ierr := c.gate.infraErr(); ierr != nil {
		return nil, nil // the receiver's rule failed: the runs name it
	}
	return b, nil
}

func brokenBy(q experiments.Requirement, c experiments.CheckCase, format string, a ...any) *experiments.CheckBroken {
	return &experiments.CheckBroken{Requirement: q, Case: c, Words: c.Title() + ": " + fmt.Sprintf(format, a...)}
}

// insertJobs adds n pending jobs to the case's table and returns their ids.
func (c *caseRun) insertJobs(ctx context.Context, n int) ([]int64, error) {
	var ids []int64
	for range n {
		id, err := c.q.Insert(ctx, []byte(`{"task":"check","case":"`+string(c.cs)+`"}`), 0)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	c.jobID = ids[0] // the one a worker's claim is looked for in
	return ids, nil
}

// probeClaimers: two pending jobs, and another claimer midway through
// its claim of the first, holding its row lock (the harness's own
// transaction, FOR UPDATE). Worker A must get the second job at once. A
// claim without SKIP LOCKED waits on the lock, which the harness sees in
// pg_stat_activity.
func probeClaimers(ctx context.Context, c *caseRun) (*experiments.CheckBroken, error) {
	ids, err := c.insertJobs(ctx, 2)
	if err != nil {
		return nil, err
	}
	tx, err := c.cfg.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // it changes nothing
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+c.table()+" WHERE id = $1 FOR UPDATE", ids[0]); err != nil {
		return nil, err
	}
	w, err := c.start(experiments.Zombie)
	if err != nil {
		return nil, err
	}
	broken := func(format string, a ...any) *experiments.CheckBroken {
		return brokenBy(experiments.ReqSkipLocked, experiments.CaseClaimers, format, a...)
	}
	deadline := time.Now().Add(c.cfg.Timeout)
	var waiting time.Time // when A was first seen waiting on a lock
	for time.Now().Before(deadline) {
		cl, err := c.gate.next(experiments.Zombie)
		if err != nil {
			return nil, err
		}
		if cl != nil {
			if cl.d.JobID != ids[1] {
				return broken("worker A called the receiver for job %d while another claimer held it mid-claim: your claim hands one job to two workers (FOR UPDATE SKIP LOCKED)", cl.d.JobID), nil
			}
			return nil, nil
		}
		var n int
		// The case's role is its own: another case's worker A, waiting on
		// a lock of its own table, is not this one.
		if err := c.cfg.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		  WHERE usename = $1 AND application_name = $2 AND datname = current_database() AND wait_event_type = 'Lock'`,
			c.role.Name(), protocol.AppName(experiments.Zombie)).Scan(&n); err != nil {
			return nil, err
		}
		switch {
		case n == 0:
			waiting = time.Time{}
		case waiting.IsZero():
			waiting = time.Now()
		case time.Since(waiting) >= lockWaited:
			return broken("worker A's claim waited on the lock of job %d, which another claimer held midway through its claim, while job %d was pending: "+
				"two claimers at once must each get their own job at once; your claim does not skip the locked row (FOR UPDATE SKIP LOCKED)", ids[0], ids[1]), nil
		}
		if w.exited() {
			return nil, nil // the runs name a worker that gives up
		}
		if err := sleep(ctx, poll); err != nil {
			return nil, err
		}
	}
	// No call, and no wait on the lock seen: a worker that did nothing is
	// not a claim that waits.
	rows, err := judge.JobRows(ctx, c.cfg.Pool, c.s.Jobs)
	if err != nil {
		return nil, err
	}
	sent, err := judge.WritesSent(ctx, c.cfg.Pool, c.s.Jobs)
	if err != nil {
		return nil, err
	}
	switch r := rows[ids[1]]; {
	case r.Status == string(engine.StatusRunning) && r.Owner == c.rc.Owner(experiments.Zombie):
		return nil, &caseError{code: protocol.ErrWorkerNoDelivery, idle: true, msg: fmt.Sprintf("worker A did not call the receiver within %v: it claimed job %d (epoch %d) but made no call to FENCELAB_RECEIVER_URL%s",
			c.cfg.Timeout, ids[1], r.Epoch, w.lastWords())}
	case sent.A == 0 && waiting.IsZero():
		return nil, &caseError{code: protocol.ErrWorkerNoClaim, idle: true, msg: fmt.Sprintf("worker A did not call the receiver within %v: it never claimed a job (the jobs table shows no write by it, and it waited on no lock)%s",
			c.cfg.Timeout, w.lastWords())}
	}
	return broken("worker A claimed no job within %v while another claimer held job %d midway through its claim and job %d was pending: your claim does not skip the locked row (FOR UPDATE SKIP LOCKED)",
		c.cfg.Timeout, ids[0], ids[1]), nil
}

// probeExpired: the one job runs under a lease that ran out a minute ago
// on the database clock, its holder gone. Worker A must take it: a claim
// that keeps matching no row is named once it has sent emptyClaims.
func probeExpired(ctx context.Context, c *caseRun) (*experiments.CheckBroken, error) {
	ids, err := c.insertJobs(ctx, 1)
	if err != nil {
		return nil, err
	}
	if err := judge.SetJob(ctx, c.cfg.Pool, c.s.Jobs, ids[0], judge.JobState{Status: engine.StatusRunning, Owner: "worker-c", Epoch: 1, Lease: -time.Minute, Attempts: 1, MaxAttempts: 3}); err != nil {
		return nil, err
	}
	w, err := c.start(experiments.Zombie)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(c.cfg.Timeout)
	empty := 0
	for time.Now().Before(deadline) {
		if cl, err := c.gate.next(experiments.Zombie); err != nil || cl != nil {
			return nil, err // it claimed the job and called
		}
		if empty, err = c.emptyClaims(ctx, experiments.Zombie); err != nil {
			return nil, err
		}
		if empty >= emptyClaims {
			break
		}
		if w.exited() {
			return nil, nil
		}
		if err := sleep(ctx, poll); err != nil {
			return nil, err
		}
	}
	return brokenBy(experiments.ReqTakesExpired, experiments.CaseExpired, "worker A's claim matched no row %d times while the one job's lease had run out a minute before on the database clock: "+
		"your claim never takes a job whose lease ran out, so a crashed worker's job waits for ever (claim a running job whose lease_until < now() too)", empty), nil
}

// probeHolderFails: a job of two attempts. Worker A claims it and the
// receiver answers that its handler failed: A's fail must send the job
// back for a retry. Then worker B claims it, its last attempt, and is
// answered the same: its fail must end the job failed.
func probeHolderFails(ctx context.Context, c *caseRun) (*experiments.CheckBroken, error) {
	ids, err := c.insertJobs(ctx, 1)
	if err != nil {
		return nil, err
	}
	if err := judge.SetJob(ctx, c.cfg.Pool, c.s.Jobs, ids[0], judge.JobState{Status: engine.StatusPending, MaxAttempts: 2}); err != nil {
		return nil, err
	}
	// The retry, the last attempt, and running the fail on the receiver's
	// "handler failed" (WORKERS.md's) are fencelab's, beyond the article
	// (ReqFailRetries: a note).
	broken := func(format string, a ...any) *experiments.CheckBroken {
		return brokenBy(experiments.ReqFailRetries, experiments.CaseHolderFails, format, a...)
	}
	for i, label := range []string{experiments.Zombie, experiments.NewOwner} {
		if err := c.runOnce(ctx, label, true); err != nil {
			return nil, err
		}
		rows, err := judge.JobRows(ctx, c.cfg.Pool, c.s.Jobs)
		if err != nil {
			return nil, err
		}
		r := rows[ids[0]]
		switch {
		case r.Status == string(engine.StatusDone):
			return broken("worker %s completed the job although the receiver answered that its handler failed (HTTP %d): on that answer a worker runs its fail (WORKERS.md)", label, HandlerFailedStatus), nil
		case r.Status == string(engine.StatusRunning): // the article's: a fail that never lands for its holder
			return brokenBy(experiments.ReqFailFence, experiments.CaseHolderFails, "worker %s's own fail, with the epoch its claim returned (%d), changed no row: your fail refuses the job's own holder", label, r.Epoch), nil
		case i == 0 && r.Status != string(engine.StatusPending):
			return broken("after its first failure, with 1 of 2 attempts left, the job is %s: fencelab asks that a fail send it back for a retry (status 'pending')", r.Status), nil
		case i == 1 && r.Status != string(engine.StatusFailed):
			return broken("on its last attempt (2 of 2, its attempts column says %d) your fail left the job %s: fencelab asks that a job that always fails end failed, not come back for ever (CASE WHEN attempts >= max_attempts THEN 'failed' …, with a claim that counts attempts)", r.Attempts, r.Status), nil
		}
	}
	return nil, nil
}

// probeOtherJob: the worker holds another job too, at the epoch its claim
// of the first will return, under a live lease: it claims the first and
// completes it (worker A), then, the first set back as it was, claims it
// and is told its handler failed, so it fails it (worker B). Neither may
// change the other job's row, though its owner and epoch are the worker's
// own, and no epoch may go down.
func probeOtherJob(ctx context.Context, c *caseRun) (*experiments.CheckBroken, error) {
	ids, err := c.insertJobs(ctx, 2)
	if err != nil {
		return nil, err
	}
	for _, label := range []string{experiments.Zombie, experiments.NewOwner} {
		if err := judge.SetJob(ctx, c.cfg.Pool, c.s.Jobs, ids[0], judge.JobState{Status: engine.StatusPending, MaxAttempts: 3}); err != nil {
			return nil, err
		}
		held := judge.JobState{Status: engine.StatusRunning, Owner: c.rc.Owner(label), Epoch: 1, Lease: time.Hour, Attempts: 1, MaxAttempts: 3}
		if err := judge.SetJob(ctx, c.cfg.Pool, c.s.Jobs, ids[1], held); err != nil {
			return nil, err
		}
		before, err := judge.JobRows(ctx, c.cfg.Pool, c.s.Jobs)
		if err != nil {
			return nil, err
		}
		fails := label == experiments.NewOwner
		if err := c.runOnce(ctx, label, fails); err != nil {
			return nil, err
		}
		after, err := judge.JobRows(ctx, c.cfg.Pool, c.s.Jobs)
		if err != nil {
			return nil, err
		}
		what := "worker A's claim or complete"
		if fails {
			what = "worker B's claim or fail"
		}
		if d := before[ids[1]].Diff(after[ids[1]]); d != "" {
			return brokenBy(experiments.ReqOwnRow, experiments.CaseOtherJob, "%s changed job %d, which it also holds at epoch 1 (%s): each statement must change its own job's row alone (WHERE id = :id)", what, ids[1], d), nil
		}
		if down := judge.EpochWentDown(before, after); down != "" {
			return brokenBy(experiments.ReqOwnRow, experiments.CaseOtherJob, "%s sent %s: an epoch never goes down, or an old token is new again", what, down), nil
		}
	}
	return nil, nil
}

// runOnce starts the worker and lets it run one job to its end: it
// claims and calls, the receiver decides the call and answers it (that
// its handler failed, when handlerFails), and it commits and exits.
func (c *caseRun) runOnce(ctx context.Context, label string, handlerFails bool) error {
	p, err := c.start(label)
	if err != nil {
		return err
	}
	cl, err := c.awaitCall(ctx, p, "")
	if err != nil {
		return err
	}
	if err := cl.decide(ctx); err != nil {
		return err
	}
	if handlerFails {
		cl.failHandler()
	} else {
		cl.letAnswer()
	}
	c.gate.openFor(label)
	return c.awaitExit(ctx, p)
}

// table is the case's jobs table, quoted.
func (c *caseRun) table() string { return pgx.Identifier{c.s.Jobs, "jobs"}.Sanitize() }
