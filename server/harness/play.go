package harness

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/lab"
)

// poll is how often the harness looks at the job row and the workers.
const poll = 20 * time.Millisecond

// play plays the case's ordering (lab.Script) from outside the workers
// and reports whether worker A sent its commit once it was let go: read
// from the database (lab.WritesSent, which counts a statement whose
// transaction was rolled back too), never from the worker's exit status
// (lab.EvaluateInput.ZombieTriedCommit).
func (c *caseRun) play(ctx context.Context) (zombieTriedCommit bool, err error) {
	switch c.rc.Ordering {
	case lab.NewOwnerFirst:
		return c.playTakeover(ctx, false)
	case lab.ZombieFirst:
		return c.playTakeover(ctx, true)
	case lab.CrashBeforeCommit:
		return c.playCrash(ctx)
	case lab.ClockSkew:
		return c.playClockAhead(ctx)
	}
	return false, fmt.Errorf("the check has no script for the %s ordering", c.rc.Ordering)
}

// playTakeover plays the article's two orderings. A claims and calls the
// receiver; its call is held, undecided, and A is frozen (SIGSTOP) as it
// waits for the answer. Its lease runs out on the database clock; B
// starts, claims and calls. New owner first: B's call is decided first and
// its answer held, so B is still working when A is thawed (SIGCONT), its
// call decided and answered, and A commits and exits; then B gets its
// answer, commits and exits. Zombie first: A's call is decided and
// answered first and A commits and exits, all while B's call waits; then
// B's is decided and answered, and B commits.
func (c *caseRun) playTakeover(ctx context.Context, zombieFirst bool) (bool, error) {
	a, err := c.start(lab.Zombie)
	if err != nil {
		return false, err
	}
	ca, err := c.awaitCall(ctx, a, "")
	if err != nil {
		return false, err
	}
	if err := a.signal(syscall.SIGSTOP); err != nil {
		return false, err
	}
	if err := c.awaitExpiry(ctx); err != nil {
		return false, err
	}
	b, err := c.start(lab.NewOwner)
	if err != nil {
		return false, err
	}
	cb, err := c.awaitCall(ctx, b, " after worker A's lease ran out on the database clock")
	if err != nil {
		return false, err
	}
	if !zombieFirst {
		if err := cb.decide(ctx); err != nil {
			return false, err
		}
	}
	// A is frozen: what it has sent so far is its claim's.
	before, err := lab.WritesSent(ctx, c.cfg.Pool, c.s.Jobs)
	if err != nil {
		return false, err
	}
	if err := a.signal(syscall.SIGCONT); err != nil {
		return false, err
	}
	if err := ca.decide(ctx); err != nil {
		return false, err
	}
	ca.letAnswer()
	c.gate.openFor(lab.Zombie)
	if err := c.awaitExit(ctx, a); err != nil {
		return false, err
	}
	tried, err := c.sentSince(ctx, before)
	if err != nil {
		return false, err
	}
	if err := cb.decide(ctx); err != nil {
		return tried, err
	}
	cb.letAnswer()
	c.gate.openFor(lab.NewOwner)
	return tried, c.awaitExit(ctx, b)
}

// sentSince reports whether worker A sent an UPDATE on jobs since the
// count before.
func (c *caseRun) sentSince(ctx context.Context, before lab.Sent) (bool, error) {
	after, err := lab.WritesSent(ctx, c.cfg.Pool, c.s.Jobs)
	if err != nil {
		return false, err
	}
	return after.A > before.A, nil
}

// playCrash: A claims and calls the receiver, which takes the call; before
// A hears the answer, its whole process group is SIGKILLed. The lease runs
// out; B claims, calls and commits.
func (c *caseRun) playCrash(ctx context.Context) (bool, error) {
	a, err := c.start(lab.Zombie)
	if err != nil {
		return false, err
	}
	ca, err := c.awaitCall(ctx, a, "")
	if err != nil {
		return false, err
	}
	if err := ca.decide(ctx); err != nil {
		return false, err
	}
	a.kill()
	if err := c.awaitExpiry(ctx); err != nil {
		return false, err
	}
	b, err := c.start(lab.NewOwner)
	if err != nil {
		return false, err
	}
	cb, err := c.awaitCall(ctx, b, " after worker A's lease ran out on the database clock")
	if err != nil {
		return false, err
	}
	if err := cb.decide(ctx); err != nil {
		return false, err
	}
	cb.letAnswer()
	c.gate.openFor(lab.NewOwner)
	return false, c.awaitExit(ctx, b)
}

// playClockAhead: A claims and calls the receiver; its call is held. B
// starts with a clock that runs twice the lease ahead
// (FENCELAB_CLOCK_SKEW_MS) and is given a fair chance to claim the job
// while A's lease is still live on the database clock: until it claims, or
// clockAheadWindow has passed since it started, ending leaseMargin before
// the lease does. A correct B finds nothing. Then A's call is decided and
// answered, and A commits and exits. A B that took the job is then let
// call and commit; one that did not is stopped: finding nothing is no
// error.
func (c *caseRun) playClockAhead(ctx context.Context) (bool, error) {
	a, err := c.start(lab.Zombie)
	if err != nil {
		return false, err
	}
	ca, err := c.awaitCall(ctx, a, "")
	if err != nil {
		return false, err
	}
	job, err := c.q.Get(ctx, c.jobID)
	if err != nil {
		return false, err
	}
	b, err := c.start(lab.NewOwner)
	if err != nil {
		return false, err
	}
	end := b.started.Add(clockAheadWindow)
	if job.Status == engine.StatusRunning && job.LeaseUntil != nil {
		if live := time.Now().Add(job.LeaseUntil.Sub(job.DBTime) - leaseMargin); live.Before(end) {
			end = live
		}
	}
	for time.Now().Before(end) && !b.exited() {
		claimed, _, err := c.claimedBy(ctx, lab.NewOwner)
		if err != nil {
			return false, err
		}
		if claimed != nil {
			break
		}
		if err := sleep(ctx, poll); err != nil {
			return false, err
		}
	}
	if b.exited() {
		c.noteExit(b, "while it looked for a job")
	}
	// A waits for its answer: what it has sent so far is its claim's.
	before, err := lab.WritesSent(ctx, c.cfg.Pool, c.s.Jobs)
	if err != nil {
		return false, err
	}
	if err := ca.decide(ctx); err != nil {
		return false, err
	}
	ca.letAnswer()
	c.gate.openFor(lab.Zombie)
	if err := c.awaitExit(ctx, a); err != nil {
		return false, err
	}
	tried, err := c.sentSince(ctx, before)
	if err != nil {
		return false, err
	}
	claimed, _, err := c.claimedBy(ctx, lab.NewOwner)
	if err != nil {
		return tried, err
	}
	if claimed == nil {
		b.kill()
		return tried, nil
	}
	c.gate.openFor(lab.NewOwner)
	return tried, c.awaitExit(ctx, b)
}

// awaitCall waits, at most the config's timeout, for the worker's first
// call to the receiver, which the gate holds undecided. When it does not
// come, the error says how far the worker got: whether the jobs row shows
// its claim. when says, for the error, what the worker was started after.
func (c *caseRun) awaitCall(ctx context.Context, p *proc, when string) (*call, error) {
	deadline := time.NewTimer(c.cfg.Timeout)
	defer deadline.Stop()
	for {
		cl, err := c.gate.next(p.label)
		if err != nil || cl != nil {
			return cl, err
		}
		select {
		case <-c.gate.arrived[p.label]:
			continue
		case <-p.done:
			if cl, err := c.gate.next(p.label); err != nil || cl != nil {
				return cl, err
			}
			did, err := c.howFar(ctx, p.label, when)
			if err != nil {
				return nil, err
			}
			return nil, &caseError{code: CodeExit, msg: fmt.Sprintf("worker %s %s before it called the receiver: %s%s", p.label, p.exitWords(), did, p.lastWords())}
		case <-deadline.C:
			did, err := c.howFar(ctx, p.label, when)
			if err != nil {
				return nil, err
			}
			code := CodeNoDelivery
			if strings.HasPrefix(did, "it never claimed") {
				code = CodeNoClaim
			}
			return nil, &caseError{code: code, msg: fmt.Sprintf("worker %s did not call the receiver within %v: %s%s", p.label, c.cfg.Timeout, did, p.lastWords())}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// howFar says, from the job's history, whether the worker claimed the job.
func (c *caseRun) howFar(ctx context.Context, label, when string) (string, error) {
	h, others, err := c.claimedBy(ctx, label)
	switch {
	case err != nil:
		return "", err
	case h != nil:
		return fmt.Sprintf("it claimed the job (epoch %d) but made no call to FENCELAB_RECEIVER_URL", h.NewEpoch), nil
	case len(others) > 0:
		return fmt.Sprintf("it never claimed the job%s under its own name: the jobs row was changed by a connection named %q, not %q (keep the PGAPPNAME fencelab sets)",
			when, others[0], lab.AppName(label)), nil
	}
	if when != "" {
		return fmt.Sprintf("it never claimed the job%s (the jobs row shows no claim by it): a claim must also take a running job whose lease has run out", when), nil
	}
	return "it never claimed the job (the jobs row shows no claim by it)", nil
}

// claimedBy finds the worker's claim in the job's history: the first
// change its connection (application_name lab.AppName(label)) made that
// left the job running. others lists the application_names of workers'
// connections the harness does not know, which changed the row.
func (c *caseRun) claimedBy(ctx context.Context, label string) (*lab.HistoryRecord, []string, error) {
	hs, err := lab.History(ctx, c.cfg.Pool, c.s.Jobs, c.jobID)
	if err != nil {
		return nil, nil, fmt.Errorf("read the job's history: %w", err)
	}
	var others []string
	for i := range hs {
		h := &hs[i]
		if h.Op == "insert" {
			continue
		}
		if lab.WriterOf(*h) == label && h.NewStatus == string(engine.StatusRunning) {
			return h, nil, nil
		}
		if w := lab.WriterOf(*h); w != lab.Zombie && w != lab.NewOwner {
			others = append(others, h.App)
		}
	}
	return nil, others, nil
}

// awaitExit waits, at most the config's timeout, for the worker to exit
// after the receiver answered it. How it exited is noted, never judged: a
// worker that raises when its fenced commit matched no row, as the article
// says, exits 1, and what it did is read from the database.
func (c *caseRun) awaitExit(ctx context.Context, p *proc) error {
	select {
	case <-p.done:
	case <-time.After(c.cfg.Timeout):
		return &caseError{code: CodeNoExit, msg: fmt.Sprintf("worker %s did not exit within %v after the receiver answered it: the contract is to commit, then exit%s",
			p.label, c.cfg.Timeout, p.lastWords())}
	case <-ctx.Done():
		return ctx.Err()
	}
	p.out.finish(time.Second) // its last words, before they are quoted
	c.noteExit(p, "after the receiver answered it")
	return nil
}

// noteExit notes how a worker ended, for the case's report.
func (c *caseRun) noteExit(p *proc, when string) {
	c.notes = append(c.notes, fmt.Sprintf("worker %s %s %s", p.label, p.exitWords(), when))
}

// awaitExpiry waits until the job's lease has run out on the database
// clock: it reads lease_until and now() from Postgres, sleeps the
// difference, and reads again. A job that is not running has no lease to
// wait for.
func (c *caseRun) awaitExpiry(ctx context.Context) error {
	deadline := time.Now().Add(c.rc.Lease + c.cfg.Timeout)
	for {
		j, err := c.q.Get(ctx, c.jobID)
		if err != nil {
			return err
		}
		if j.Status != engine.StatusRunning || j.LeaseUntil == nil || !j.LeaseUntil.After(j.DBTime) {
			return nil
		}
		wait := j.LeaseUntil.Sub(j.DBTime) + 2*time.Millisecond
		if time.Now().Add(wait).After(deadline) {
			return &caseError{code: CodeLease, msg: fmt.Sprintf("worker A's lease did not run out on the database clock within %v: it runs until %s, set by the claim",
				c.rc.Lease+c.cfg.Timeout, j.LeaseUntil.UTC().Format(time.RFC3339Nano))}
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
