package runner_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/runner"
)

// The outbox delivery: no worker calls the receiver; B's delivery is
// written by its commit and the runner's relay sends it after, on its own
// (the run still has steps to play), and once. The zombie's was never
// written, its commit being fenced, so it is never sent: nothing reaches
// the receiver before B's commit, and B's result is the only one that
// does.
//
// The notification of B's commit is held back 400 ms, as a busy
// listening connection may hold it, so that the relay's delivery, polled
// every 50 ms, would be told first if the run waited for it. (Not
// parallel: the hook sees every run's notifications.)
func TestRun_OutboxRelaysOnlyAfterCommit(t *testing.T) {
	l := newLab(t, runner.Limits{})
	ctx := context.Background()
	defer runner.SetNotifyHook(func(_ *runner.Run, payload string) {
		var c struct {
			New struct{ Status protocol.Status } `json:"new"`
		}
		if json.Unmarshal([]byte(payload), &c) == nil && c.New.Status == protocol.StatusDone {
			time.Sleep(400 * time.Millisecond)
		}
	})()
	r := l.open(experiments.RunConfig{Ordering: experiments.OwnerDoneFirst, Lease: lease, Delivery: experiments.DeliverOutbox}, protocol.ModeStep, 0)
	reachedReceiver := func(e protocol.Event) bool {
		return e.Receiver != nil || (e.Call != nil && e.Call.Result != protocol.DeliveryDeferred)
	}
	relayed := func(e protocol.Event) bool { return e.Actor == protocol.ActorRelay && e.Call != nil }
	steps := r.Scenario().Steps
	commitB := slices.IndexFunc(steps, func(s experiments.Step) bool {
		return s.Action == experiments.ActCommit && s.Worker == experiments.NewOwner
	})
	if commitB < 0 || commitB == len(steps)-1 {
		t.Fatalf("%s has no step after B's commit: %+v", experiments.OwnerDoneFirst, steps)
	}
	for i := range commitB {
		if _, err := r.Step(ctx); err != nil {
			t.Fatalf("step %d: %v\n%s", i+1, err, l.ev.dump())
		}
	}
	// B has "called": its delivery waits in the outbox, and the receiver
	// has heard of nothing.
	if got := l.ev.filter(reachedReceiver); len(got) != 0 {
		t.Fatalf("before any commit the receiver heard %+v", got)
	}
	if _, err := r.Step(ctx); err != nil { // B commits
		t.Fatal(err)
	}
	// The relay sends it while the run waits for its next step.
	sent := l.ev.await(t, "the relay's delivery", 5*time.Second, relayed)
	if sent.Call.Epoch != 2 || sent.Call.Owner != "worker-b" || sent.Call.Result != protocol.DeliveryAccepted {
		t.Errorf("the relay sent %+v, want B's epoch 2, accepted", sent.Call)
	}
	if r.Phase() != protocol.PhaseReady {
		t.Fatalf("the run is %s, want it waiting for its next step", r.Phase())
	}
	for r.Outcome() == nil { // A wakes, its delivery deferred, and commits: fenced
		if _, err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	checkOutcome(t, r.Outcome(), outcomeWant{safe: true, call: experiments.CallNeverSent, commit: experiments.CallRejected,
		epoch: 2, resultFrom: experiments.NewOwner, receiverFrom: experiments.NewOwner, receiverEp: 2})
	if d := l.ev.filter(func(e protocol.Event) bool { return e.Call != nil && e.Call.Result == protocol.DeliveryDeferred }); len(d) != 2 {
		t.Errorf("%d deliveries deferred to the outbox, want A's and B's", len(d))
	}
	evs := l.ev.list()
	if n := len(l.ev.filter(relayed)); n != 1 {
		t.Errorf("the relay sent %d deliveries, want B's once\n%s", n, l.ev.dump())
	}
	// Nothing reached the receiver before B's commit step began, nor
	// before the row told B's commit (done at epoch 2): the log never
	// shows a delivery ahead of the commit it came from.
	commit := indexOf(evs, func(e protocol.Event) bool { return e.Step != nil && e.Step.Index == commitB })
	if first := indexOf(evs, reachedReceiver); commit < 0 || first < commit {
		t.Errorf("the receiver heard of the job at event %d, B's commit step is event %d: the relay sent before the commit", first, commit)
	}
	done := indexOf(evs, func(e protocol.Event) bool {
		return e.Row != nil && e.Row.New.Status == protocol.StatusDone && e.Row.New.Epoch == 2
	})
	if first := indexOf(evs, relayed); done < 0 || first < done {
		t.Errorf("the relay's delivery is event %d, the row's done at epoch 2 is event %d: the log shows the delivery before its commit\n%s", first, done, l.ev.dump())
	}
	l.checkSchema()
}

// A run stopped in the middle, its zombie frozen, ends there: no verdict,
// its workers gone (the frozen one too), its schemas dropped, and every
// later command refused as a conflict.
func TestRun_StopMidRunLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	l := newLab(t, runner.Limits{})
	ctx := context.Background()
	r := l.open(experiments.RunConfig{Ordering: experiments.NewOwnerFirst, Lease: lease}, protocol.ModeStep, 0)
	for range 2 { // A claims, and freezes
		if _, err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !workerOf(r, experiments.Zombie).Frozen {
		t.Fatal("A is not frozen")
	}
	r.Stop(protocol.StopReset)
	select {
	case <-r.Done():
	default:
		t.Fatal("Stop returned and the run is not done")
	}
	if i := r.Info(); i.Phase != protocol.PhaseStopped || i.StopReason != protocol.StopReset || i.Ended == nil || i.Outcome != nil {
		t.Errorf("a stopped run: phase %s, reason %s, ended %v, outcome %v", i.Phase, i.StopReason, i.Ended, i.Outcome)
	}
	noWorkerLeft(t, l.w)
	for _, label := range []string{experiments.Zombie, experiments.NewOwner} {
		ex := l.ev.filter(isProcess(label, protocol.ProcExited))
		if len(ex) != 1 || ex[0].Process.Cause != protocol.CauseRunEnd {
			t.Errorf("worker %s's exits: %+v, want one, at the run's end", label, ex)
		}
	}
	var left int
	if err := pgtest.Pool(t).QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = ANY($1)`,
		[]string{l.schemas.Jobs, l.schemas.Receiver}).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d of the run's schemas are left", left)
	}
	if n := len(l.ev.filter(isVerdict)); n != 0 {
		t.Errorf("a stopped run told %d verdicts", n)
	}
	stopped := l.ev.filter(func(e protocol.Event) bool { return e.Note != nil && e.Note.Code == protocol.NoteStopped })
	if len(stopped) != 1 || stopped[0].Note.Reason != protocol.StopReset {
		t.Errorf("stop notes %+v, want one, for the reset", stopped)
	}
	if _, err := r.Step(ctx); fault.CodeOf(err) != fault.Conflict {
		t.Errorf("a step after the stop: %v, want a conflict", err)
	}
	if _, err := r.Finish(ctx); fault.CodeOf(err) != fault.Conflict {
		t.Errorf("Finish after the stop: %v, want a conflict", err)
	}
	if err := r.ResumeWorker(ctx, experiments.Zombie); fault.CodeOf(err) != fault.Conflict {
		t.Errorf("a resume after the stop: %v, want a conflict", err)
	}
	r.Stop(protocol.StopShutdown) // a second stop changes nothing
	if i := r.Info(); i.StopReason != protocol.StopReset {
		t.Errorf("a second stop made the reason %s", i.StopReason)
	}
	l.checkSchema()
}

// A script cannot go on without its worker: one killed from outside the
// run (no step, no person of the run) ends it as lost, with an error that
// names the worker and the signal, and no verdict.
func TestRun_AWorkerKilledFromOutsideEndsTheRun(t *testing.T) {
	t.Parallel()
	l := newLab(t, runner.Limits{})
	ctx := context.Background()
	r := l.open(experiments.RunConfig{Ordering: experiments.ZombieFirst, Lease: lease}, protocol.ModeStep, 0)
	if _, err := r.Step(ctx); err != nil {
		t.Fatal(err)
	}
	pid := workerOf(r, experiments.NewOwner).Pid
	if pid <= 0 {
		t.Fatalf("worker B has pid %d", pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the run went on without its worker B\n%s", l.ev.dump())
	}
	if i := r.Info(); i.Phase != protocol.PhaseStopped || i.StopReason != protocol.StopWorkerLost || i.Error == nil || i.Error.Code != protocol.ErrWorkerLost {
		t.Errorf("a run that lost its worker: phase %s, reason %s, error %+v", i.Phase, i.StopReason, i.Error)
	}
	errs := l.ev.filter(func(e protocol.Event) bool { return e.Error != nil })
	if len(errs) != 1 || errs[0].Error.Code != protocol.ErrWorkerLost || !strings.Contains(errs[0].Error.Message, "Worker B is gone: it was killed by SIGKILL") {
		t.Errorf("error events %+v, want one: worker B lost to a SIGKILL", errs)
	}
	ex := l.ev.filter(isProcess(experiments.NewOwner, protocol.ProcExited))
	if len(ex) != 1 || ex[0].Process.Cause != protocol.CauseOutside {
		t.Errorf("B's exits: %+v, want one, from outside", ex)
	}
	if _, err := r.Step(ctx); fault.CodeOf(err) != fault.Conflict || !strings.Contains(err.Error(), "worker B is gone") {
		t.Errorf("a step of the lost run: %v, want a conflict that says B is gone", err)
	}
	if n := len(l.ev.filter(isVerdict)); n != 0 {
		t.Errorf("a lost run told %d verdicts", n)
	}
	l.checkSchema()
}
