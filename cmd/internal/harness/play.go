package harness

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// poll is how often the harness looks at the job row and the workers.
const poll = 20 * time.Millisecond

// worker is one worker of a case as the script plays it: its process,
// the call of its it holds at the gate, and, for worker A, what it had
// sent before it was let go.
type worker struct {
	p       *proc
	call    *call // its call to the receiver, held at the gate; nil before it calls
	decided bool  // the receiver has decided its call
	looking bool  // it started with a clock that runs ahead and has claimed nothing
	before  *judge.Sent
}

// play plays the case's script, experiments.ScriptOf of its config (the very steps
// the playground's runner plays on its own workers), on the reader's
// workers from outside: it cannot tell a program when to claim or commit,
// only start it, hold its call to the receiver and the receiver's answer,
// and freeze, thaw or kill it. Each step maps onto those:
//
//   - claim: start the worker and wait until it calls the receiver, which
//     it does once it has claimed; its call is held, undecided. A worker
//     whose clock runs ahead is given a fair window to claim instead: a
//     correct one finds nothing.
//   - freeze, thaw, kill: SIGSTOP, SIGCONT, SIGKILL of its group. A thawed
//     worker that was frozen waiting on its call goes on with it: the
//     receiver decides it.
//   - deliver: the receiver decides the worker's call; its answer is held.
//   - commit: the answer goes back, and the worker must commit and exit.
//     A step whose handler fails answers the call HandlerFailedStatus
//     instead, whatever the receiver decided: the worker must fail the
//     job, and exit.
//   - await-expiry: wait until the lease has run out on the database
//     clock.
//
// It reports whether worker A sent a write once it was let go on: read
// from the database (judge.WritesSent, which counts a statement whose
// transaction was rolled back too), never from the worker's exit status
// (judge.EvaluateInput.ZombieTriedCommit).
func (c *caseRun) play(ctx context.Context) (zombieTriedCommit bool, err error) {
	sc, err := experiments.ScriptOf(c.rc)
	if err != nil {
		return false, err
	}
	ws := map[string]*worker{}
	expired := false
	for _, st := range sc.Steps {
		w := ws[st.Worker]
		if st.Action != experiments.ActClaim && st.Action != experiments.ActAwaitExpiry && w == nil {
			return false, fmt.Errorf("the %s case's script has worker %s %s before it claims", c.cs, st.Worker, st.Action)
		}
		switch st.Action {
		case experiments.ActClaim:
			if w, err = c.claim(ctx, st.Worker, expired); err != nil {
				return false, err
			}
			ws[st.Worker] = w
		case experiments.ActFreeze:
			// A call of its is in flight, held: it freezes waiting on it.
			err = w.p.signal(syscall.SIGSTOP)
		case experiments.ActThaw:
			if err = c.letGo(ctx, w); err == nil {
				err = w.p.signal(syscall.SIGCONT)
			}
			if err == nil && w.call != nil && !w.decided {
				err = c.deliver(ctx, w)
			}
		case experiments.ActDeliver:
			if err = c.letGo(ctx, w); err == nil {
				err = c.deliver(ctx, w)
			}
		case experiments.ActCommit:
			var tried bool
			if tried, err = c.commit(ctx, w, st.Fail); st.Worker == experiments.Zombie {
				zombieTriedCommit = zombieTriedCommit || tried
			}
		case experiments.ActKill:
			w.p.kill()
		case experiments.ActAwaitExpiry:
			err, expired = c.awaitExpiry(ctx), true
		default:
			err = fmt.Errorf("the %s case's script has a step the harness cannot play: %s", c.cs, st.Action)
		}
		if err != nil {
			return zombieTriedCommit, err
		}
	}
	return zombieTriedCommit, nil
}

// claim starts a worker and waits until it has claimed and called the
// receiver. One whose clock runs ahead (FENCELAB_CLOCK_SKEW_MS) is given
// a fair chance to claim the job while A's lease is still live on the
// database clock: from its first connection to the database, until it
// claims or lookWindow has passed, ending leaseMargin before the lease
// does. A correct one finds nothing, and is left looking. One that was
// not connected for lookWindow/2 inside the lease proves nothing: claim
// returns a *lateLook, and the case is played again with a longer lease.
func (c *caseRun) claim(ctx context.Context, label string, afterExpiry bool) (*worker, error) {
	if c.rc.WorkerSkew(label) == 0 {
		p, err := c.start(label)
		if err != nil {
			return nil, err
		}
		when := ""
		if afterExpiry {
			when = " after worker A's lease ran out on the database clock"
		}
		cl, err := c.awaitCall(ctx, p, when)
		return &worker{p: p, call: cl}, err
	}
	job, err := c.q.Get(ctx, c.jobID)
	if err != nil {
		return nil, err
	}
	got := time.Now()
	before, err := c.connections(ctx, []int32{})
	if err != nil {
		return nil, err
	}
	p, err := c.start(label)
	if err != nil {
		return nil, err
	}
	live := p.started.Add(c.rc.Lease) // no lease to run out: a lease's length of looking
	if job.Status == engine.StatusRunning && job.LeaseUntil != nil {
		live = got.Add(job.LeaseUntil.Sub(job.DBTime) - leaseMargin)
	}
	end := live
	var connected time.Time
	w := &worker{p: p, looking: true}
	for time.Now().Before(end) && !p.exited() {
		claimed, _, err := c.claimedBy(ctx, label)
		if err != nil {
			return nil, err
		}
		if claimed != nil {
			w.looking = false
			break
		}
		if connected.IsZero() {
			n, err := c.connections(ctx, before)
			if err != nil {
				return nil, err
			}
			if len(n) > 0 {
				connected = time.Now()
				if t := connected.Add(lookWindow); t.Before(end) {
					end = t
				}
			}
		}
		if err := sleep(ctx, poll); err != nil {
			return nil, err
		}
	}
	if p.exited() {
		c.noteExit(p, "while it looked for a job")
		return w, nil
	}
	if w.looking && (connected.IsZero() || live.Sub(connected) < lookWindow/2) {
		l := &lateLook{started: max(0, p.started.Sub(live)+c.rc.Lease-leaseMargin), upTo: time.Since(p.started)} // 0: no lease was running
		if l.connected = !connected.IsZero(); l.connected {
			l.upTo = connected.Sub(p.started)
		}
		return w, l
	}
	return w, nil
}

// lateLook is a clock-skew case in which worker B connected to the
// database too late to look for the job inside A's lease: it proves
// nothing either way. started is how far into A's lease B was started,
// upTo how long B took to connect (or, when it never did, how long it
// was watched).
type lateLook struct {
	started, upTo time.Duration
	connected     bool
}

func (l *lateLook) Error() string {
	did := fmt.Sprintf("connected to the database only %v later", l.upTo.Round(time.Millisecond))
	if !l.connected {
		did = fmt.Sprintf("had not connected to the database %v later", l.upTo.Round(time.Millisecond))
	}
	return fmt.Sprintf("worker B, started %v into worker A's lease, %s, too late to look for the job while A's lease was live", l.started.Round(time.Millisecond), did)
}

// lease is the lease a case needs to give B lookWindow inside A's
// lease, by what this play measured, at least twice the last one, in
// tenths of a second.
func (l *lateLook) lease(last time.Duration) time.Duration {
	return (max(2*last, l.started+2*l.upTo+lookWindow+2*leaseMargin) + 99*time.Millisecond).Truncate(100 * time.Millisecond)
}

// connections lists the backends of the case's role, less those in
// except: the case's role is its own, so these are its workers'.
func (c *caseRun) connections(ctx context.Context, except []int32) ([]int32, error) {
	rows, err := c.cfg.Pool.Query(ctx, `SELECT pid FROM pg_stat_activity
	  WHERE usename = $1 AND datname = current_database() AND NOT pid = ANY($2)`, c.role.Name(), except)
	if err != nil {
		return nil, fmt.Errorf("read the workers' connections: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("read the workers' connections: %w", err)
	}
	return pids, nil
}

// look asks the job's history again whether a worker that was left
// looking has claimed the job since.
func (c *caseRun) look(ctx context.Context, w *worker) error {
	if !w.looking {
		return nil
	}
	claimed, _, err := c.claimedBy(ctx, w.p.label)
	w.looking = claimed == nil
	return err
}

// letGo notes, for worker A, what it has sent so far (its claim's), the
// first time the script lets it go on: thawed, or its call decided.
func (c *caseRun) letGo(ctx context.Context, w *worker) error {
	if w.p.label != experiments.Zombie || w.before != nil {
		return nil
	}
	sent, err := judge.WritesSent(ctx, c.cfg.Pool, c.s.Jobs)
	if err != nil {
		return err
	}
	w.before = &sent
	return nil
}

// deliver lets the receiver decide the worker's call; its answer is still
// held. A worker that is still looking holds no job and makes no call; one
// that claimed after its window began is waited for.
func (c *caseRun) deliver(ctx context.Context, w *worker) error {
	if err := c.look(ctx, w); err != nil || w.looking || w.decided {
		return err
	}
	if w.call == nil {
		cl, err := c.awaitCall(ctx, w.p, "")
		if err != nil {
			return err
		}
		w.call = cl
	}
	w.decided = true
	return w.call.decide(ctx)
}

// commit lets the worker's answer go back (a failed handler's, when
// handlerFails), and every later call of its through, and waits for it to
// commit and exit. A worker that is still looking is stopped: finding
// nothing is no error. It reports whether worker A sent a write since it
// was let go.
func (c *caseRun) commit(ctx context.Context, w *worker, handlerFails bool) (bool, error) {
	if err := c.look(ctx, w); err != nil {
		return false, err
	}
	if w.looking {
		w.p.kill()
		return false, nil
	}
	if err := c.letGo(ctx, w); err != nil {
		return false, err
	}
	if err := c.deliver(ctx, w); err != nil {
		return false, err
	}
	if handlerFails {
		w.call.failHandler()
	} else {
		w.call.letAnswer()
	}
	c.gate.openFor(w.p.label)
	if err := c.awaitExit(ctx, w.p); err != nil {
		return false, err
	}
	if w.before == nil {
		return false, nil
	}
	after, err := judge.WritesSent(ctx, c.cfg.Pool, c.s.Jobs)
	if err != nil {
		return false, err
	}
	return after.A > w.before.A, nil
}

// awaitCall waits, at most the config's timeout, for the worker's first
// call to the receiver, which the gate holds undecided. When it does not
// come, the error says how far the worker got: whether the jobs row shows
// its claim. when says, for the error, what the worker was started after.
//
// A worker started after A's lease ran out that keeps sending claims
// that match no row is not waited for: once it has sent emptyClaims, the
// case ends, naming the claim (experiments.ReqTakesExpired).
func (c *caseRun) awaitCall(ctx context.Context, p *proc, when string) (*call, error) {
	deadline := time.NewTimer(c.cfg.Timeout)
	defer deadline.Stop()
	var look <-chan time.Time
	if when != "" {
		t := time.NewTicker(5 * poll)
		defer t.Stop()
		look = t.C
	}
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
			return nil, &caseError{code: protocol.ErrWorkerExit, msg: fmt.Sprintf("worker %s %s before it called the receiver: %s%s", p.label, p.exitWords(), did, p.lastWords())}
		case <-look:
			if n, err := c.emptyClaims(ctx, p.label); err != nil || n < emptyClaims {
				if err != nil {
					return nil, err
				}
				continue
			}
			if cl, err := c.gate.next(p.label); err != nil || cl != nil {
				return cl, err
			}
			return nil, &caseError{code: protocol.ErrClaimExpired, msg: fmt.Sprintf("worker %s's claim matched no row %d times%s: "+
				"a claim must also take a running job whose lease has run out (lease_until < now())", p.label, emptyClaims, when)}
		case <-deadline.C:
			did, err := c.howFar(ctx, p.label, when)
			if err != nil {
				return nil, err
			}
			code := protocol.ErrWorkerNoDelivery
			if strings.HasPrefix(did, "it never claimed") {
				code = protocol.ErrWorkerNoClaim
			}
			// Started on a claimable job, or with one claimed: a worker that
			// did nothing there does nothing in any case.
			idle := when == "" || code == protocol.ErrWorkerNoDelivery
			return nil, &caseError{code: code, idle: idle, msg: fmt.Sprintf("worker %s did not call the receiver within %v: %s%s", p.label, c.cfg.Timeout, did, p.lastWords())}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// emptyClaims counts the worker's UPDATEs on jobs that matched no row:
// its claims that found nothing.
func (c *caseRun) emptyClaims(ctx context.Context, label string) (int, error) {
	ws, err := judge.Writes(ctx, c.cfg.Pool, c.s.Jobs)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, w := range ws {
		if w.App == protocol.AppName(label) && w.Matched == 0 {
			n++
		}
	}
	return n, nil
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
			when, others[0], protocol.AppName(label)), nil
	}
	if when != "" {
		return fmt.Sprintf("it never claimed the job%s (the jobs row shows no claim by it): a claim must also take a running job whose lease has run out", when), nil
	}
	return "it never claimed the job (the jobs row shows no claim by it)", nil
}

// claimedBy finds the worker's claim in the job's history: the first
// change its connection (application_name protocol.AppName(label)) made that
// left the job running. others lists the application_names of workers'
// connections the harness does not know, which changed the row.
func (c *caseRun) claimedBy(ctx context.Context, label string) (*protocol.HistoryRecord, []string, error) {
	hs, err := judge.History(ctx, c.cfg.Pool, c.s.Jobs, c.jobID)
	if err != nil {
		return nil, nil, fmt.Errorf("read the job's history: %w", err)
	}
	var others []string
	for i := range hs {
		h := &hs[i]
		if h.Op == "insert" {
			continue
		}
		if protocol.WriterOf(*h) == label && h.NewStatus == string(engine.StatusRunning) {
			return h, nil, nil
		}
		if w := protocol.WriterOf(*h); w != experiments.Zombie && w != experiments.NewOwner {
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
		return &caseError{code: protocol.ErrWorkerNoExit, msg: fmt.Sprintf("worker %s did not exit within %v after the receiver answered it: the contract is to commit, then exit%s",
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
			return &caseError{code: protocol.ErrLeaseClock, msg: fmt.Sprintf("worker A's lease did not run out on the database clock within %v: it runs until %s, set by the claim",
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
