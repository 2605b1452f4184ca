package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/runner"
)

// Free play: no script, two workers at work on their own, a person adds a
// job and acts on whichever worker took it.

// openFree opens a free-play run whose workers work on a job for work,
// and adds one job; it returns the job and the worker that claimed it.
func openFree(t *testing.T, work time.Duration) (*lab, *runner.Run, int64, string) {
	t.Helper()
	l := newLab(t, runner.Limits{Work: work, Poll: 20 * time.Millisecond})
	r := l.open(experiments.RunConfig{Ordering: experiments.FreePlay, Lease: lease}, "", 0)
	if r.Mode() != protocol.ModeFree || r.Phase() != protocol.PhasePlaying || len(r.Workers()) != 2 {
		t.Fatalf("a free-play run started as %s, %s, with workers %+v", r.Mode(), r.Phase(), r.Workers())
	}
	if _, err := r.Step(context.Background()); fault.CodeOf(err) != fault.Conflict {
		t.Errorf("a step of free play: %v, want a conflict", err)
	}
	job, err := r.AddJob(context.Background(), []byte(`{"task":"free"}`))
	if err != nil {
		t.Fatal(err)
	}
	c := l.ev.await(t, "a claim of the job", 10*time.Second, func(e protocol.Event) bool {
		return e.Row != nil && e.Row.Op == protocol.RowClaim && e.Row.JobID == job
	})
	if c.Row.New.Epoch != 1 || (c.Row.Writer != "A" && c.Row.Writer != "B") {
		t.Fatalf("the job's first claim: %+v", c.Row)
	}
	// The worker's own report of its claim comes down its pipe, the row's
	// through NOTIFY: the run knows who holds the job once the first is in.
	l.ev.await(t, "the claimer's report of its claim", 10*time.Second, func(e protocol.Event) bool {
		return e.Actor == c.Row.Writer && e.SQL != nil && e.SQL.Op == protocol.OpClaim && e.SQL.Result == protocol.ResultOK && e.SQL.JobID == job
	})
	return l, r, job, c.Row.Writer
}

func other(label string) string {
	if label == "A" {
		return "B"
	}
	return "A"
}

// reclaimed waits until the other worker has claimed job at epoch 2 and
// completed it, and returns the lease told run out before that claim.
func reclaimed(t *testing.T, l *lab, job int64, holder string) *protocol.LeaseEvent {
	t.Helper()
	le := l.ev.await(t, "the holder's lease running out", 10*time.Second, func(e protocol.Event) bool {
		return e.Lease != nil && e.Lease.Change == protocol.LeaseExpired && e.Lease.JobID == job
	}).Lease
	if le.Epoch != 1 || le.Holder != holder || le.DBNow.Before(le.LeaseUntil) {
		t.Errorf("the lease told run out: %+v, want %s's at epoch 1, on the database clock\n%s", le, holder, l.ev.dump())
	}
	l.ev.await(t, "the other worker's claim at epoch 2", 10*time.Second, func(e protocol.Event) bool {
		return e.Row != nil && e.Row.Op == protocol.RowClaim && e.Row.JobID == job && e.Row.New.Epoch == 2 && e.Row.Writer == other(holder)
	})
	l.ev.await(t, "the other worker's completion", 10*time.Second, func(e protocol.Event) bool {
		return e.Row != nil && e.Row.Op == protocol.RowComplete && e.Row.JobID == job && e.Row.Writer == other(holder)
	})
	return le
}

// checkReport holds a free-play verdict: one job, done at epoch 2 by the
// new holder, in the row and at the receiver, and safe.
func checkReport(t *testing.T, rep protocol.Report, job int64, by string) {
	t.Helper()
	if !rep.Safe || rep.Done != 1 || len(rep.Jobs) != 1 {
		t.Fatalf("report %+v, want one job done, safe", rep)
	}
	j := rep.Jobs[0]
	if j.JobID != job || j.Status != protocol.StatusDone || j.Epoch != 2 || j.ResultFrom != by || j.ReceiverFrom != by || j.Claims != 2 {
		t.Errorf("the job's report %+v, want done at epoch 2 after 2 claims, %s's result in the row and at the receiver", j, by)
	}
}

// A worker killed while it holds a job leaves its lease to run out on the
// database clock; the other worker then claims the job at epoch 2 and
// completes it. The kill is the person's (not the run's loss: free play
// goes on), the verdict asked meanwhile is safe and lets the run go on,
// and a worker added after still starts.
func TestRun_FreePlayKillFreesTheLease(t *testing.T) {
	t.Parallel()
	l, r, job, holder := openFree(t, 1500*time.Millisecond)
	ctx := context.Background()
	if err := r.KillWorker(ctx, holder); err != nil {
		t.Fatal(err)
	}
	exited := l.ev.filter(isProcess(holder, protocol.ProcExited))
	if len(exited) != 1 || exited[0].Process.Cause != protocol.CauseDriver {
		t.Fatalf("KillWorker returned; the exit events: %+v, want one, caused by the driver", exited)
	}
	if w := workerOf(r, holder); !w.Exited {
		t.Errorf("a killed worker is %+v", w)
	}
	reclaimed(t, l, job, holder)
	rep, err := r.Verdict(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, rep, job, other(holder))
	if p := r.Phase(); p != protocol.PhasePlaying {
		t.Fatalf("after a verdict the run is %s, want it playing on", p)
	}
	if err := r.KillWorker(ctx, holder); fault.CodeOf(err) != fault.Conflict {
		t.Errorf("a second kill of %s: %v, want a conflict", holder, err)
	}
	c, err := r.AddWorker(ctx, runner.WorkerOptions{})
	if err != nil || c != "C" {
		t.Fatalf("AddWorker: %q, %v; want C", c, err)
	}
	l.ev.await(t, "worker C up", 10*time.Second, isProcess("C", protocol.ProcReady))
	res, err := r.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Done || res.Report == nil || r.Report() == nil || r.Phase() != protocol.PhaseFinished {
		t.Fatalf("finish: %+v, phase %s", res, r.Phase())
	}
	checkReport(t, *res.Report, job, other(holder))
	if n := len(l.ev.filter(isVerdict)); n != 2 {
		t.Errorf("%d verdicts told, want the one asked and the last", n)
	}
	l.checkSchema()
}

// The free-play zombie: the holder frozen by hand (SIGSTOP) loses its
// lease on the database clock, the other worker takes the job over at
// epoch 2, and the holder, thawed, carries on and commits with epoch 1:
// fenced. The verdict is safe, the new holder's result in the row and at
// the receiver.
func TestRun_FreePlayPausedHolderIsFenced(t *testing.T) {
	t.Parallel()
	l, r, job, holder := openFree(t, 2*time.Second)
	ctx := context.Background()
	if err := r.PauseWorker(ctx, holder); err != nil {
		t.Fatal(err)
	}
	if w := workerOf(r, holder); !w.Frozen || w.State != protocol.StateStopped {
		t.Fatalf("a paused worker is %+v, want frozen and stopped", w)
	}
	if err := r.PauseWorker(ctx, holder); fault.CodeOf(err) != fault.Conflict {
		t.Errorf("pausing a paused worker: %v, want a conflict", err)
	}
	l.ev.await(t, "the other worker's claim at epoch 2", 10*time.Second, func(e protocol.Event) bool {
		return e.Row != nil && e.Row.Op == protocol.RowClaim && e.Row.JobID == job && e.Row.New.Epoch == 2
	})
	if err := r.ResumeWorker(ctx, holder); err != nil {
		t.Fatal(err)
	}
	if w := workerOf(r, holder); w.Frozen {
		t.Fatalf("a resumed worker is %+v", w)
	}
	commit := l.ev.await(t, "the zombie's commit", 10*time.Second, func(e protocol.Event) bool {
		return e.Actor == holder && e.SQL != nil && e.SQL.Op == protocol.OpComplete
	})
	if commit.SQL.Result != protocol.ResultFenced || *commit.SQL.Epoch != 1 {
		t.Errorf("the zombie's commit at epoch %d was %s, want fenced at 1", *commit.SQL.Epoch, commit.SQL.Result)
	}
	reclaimed(t, l, job, holder)
	res, err := r.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, *res.Report, job, other(holder))
	l.checkSchema()
}
