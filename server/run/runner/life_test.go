package runner_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/runner"
)

const lease = 400 * time.Millisecond

// The article's zombie-first run, every guard on, played one step at a
// time as a teacher plays it: the run waits at each step, the zombie
// freezes in the middle of its next step, its lease runs out on the
// database clock, the new owner claims at epoch 2, the zombie's receiver
// call is taken and then superseded, its commit is fenced, and the last
// step gives the verdict: safe, epoch 2, B's result in the row and at the
// receiver.
func TestRun_ZombieFirstStepByStepEndsSafe(t *testing.T) {
	t.Parallel()
	l := newLab(t, runner.Limits{})
	r := l.open(experiments.RunConfig{Ordering: experiments.ZombieFirst, Lease: lease}, protocol.ModeStep, 0)
	ctx := context.Background()
	if p := r.Phase(); p != protocol.PhaseReady {
		t.Fatalf("a step run that has started is %s, want ready", p)
	}
	steps := r.Scenario().Steps
	for i, want := range steps {
		if got := r.StepIndex(); got != i {
			t.Fatalf("before step %d the run is at step %d", i, got)
		}
		res, err := r.Step(ctx)
		if err != nil {
			t.Fatalf("step %d (%s %s): %v\n%s", i+1, want.Action, want.Worker, err, l.ev.dump())
		}
		if res.Step == nil || res.Step.Action != want.Action || res.Step.Worker != want.Worker {
			t.Fatalf("step %d played %+v, want %s %s", i+1, res.Step, want.Action, want.Worker)
		}
		last := i == len(steps)-1
		if res.Done != last {
			t.Fatalf("step %d: done %v, want %v", i+1, res.Done, last)
		}
		if !last && r.Phase() != protocol.PhaseReady {
			t.Fatalf("after step %d the run is %s, want ready", i+1, r.Phase())
		}
		switch want.Action {
		case experiments.ActAwaitExpiry:
			// The lease has run out on the database clock, not before.
			le := l.ev.await(t, "lease expired", time.Second, isLease(protocol.LeaseExpired))
			if le.Lease.DBNow.Before(le.Lease.LeaseUntil) || le.Lease.Clock != protocol.ClockDatabase {
				t.Errorf("lease told expired at %v on the %s clock, but it ran until %v", le.Lease.DBNow, le.Lease.Clock, le.Lease.LeaseUntil)
			}
			if le.Lease.Epoch != 1 || le.Lease.Holder != experiments.Zombie {
				t.Errorf("the expired lease is epoch %d held by %q, want epoch 1 held by A", le.Lease.Epoch, le.Lease.Holder)
			}
		case experiments.ActFreeze:
			if !workerOf(r, experiments.Zombie).Frozen {
				t.Errorf("after the freeze step worker A is not frozen: %+v", workerOf(r, experiments.Zombie))
			}
		}
	}
	o := r.Outcome()
	checkOutcome(t, o, outcomeWant{safe: true, call: experiments.CallAcceptedThenSuperseded, commit: experiments.CallRejected,
		epoch: 2, resultFrom: experiments.NewOwner, receiverFrom: experiments.NewOwner, receiverEp: 2})
	if o.Final.Status != protocol.StatusDone || len(o.Violations) != 0 || len(o.ZombieFence) == 0 {
		t.Errorf("final %+v, violations %v, zombie fenced by %v: want done, none, and at least the epoch check", o.Final, o.Violations, o.ZombieFence)
	}
	if p := r.Phase(); p != protocol.PhaseFinished {
		t.Errorf("after its last step the run is %s, want finished", p)
	}
	select {
	case <-r.Done():
	default:
		t.Error("a finished run is not done")
	}

	evs := l.ev.list()
	// The verdict is the outcome, told once.
	vs := l.ev.filter(isVerdict)
	if len(vs) != 1 || vs[0].Verdict.Outcome == nil || !vs[0].Verdict.Safe || vs[0].Verdict.Outcome.Final != o.Final {
		t.Errorf("verdict events %+v, want one, safe, with the outcome", vs)
	}
	// Postgres's own account: A claimed at 1, B at 2, B completed; A's
	// commit changed no row.
	var rows []string
	for _, e := range l.ev.filter(func(e protocol.Event) bool { return e.Row != nil && e.Row.Op != protocol.RowRenew }) {
		rows = append(rows, string(e.Row.Op)+"/"+e.Row.Writer+"/"+strconv.FormatInt(e.Row.New.Epoch, 10))
	}
	if want := []string{"insert//0", "claim/A/1", "claim/B/2", "complete/B/2"}; !slices.Equal(rows, want) {
		t.Errorf("row changes %v, want %v", rows, want)
	}
	// A's commit statement was fenced, and told as such.
	fenced := l.ev.filter(func(e protocol.Event) bool {
		return e.Actor == experiments.Zombie && e.SQL != nil && e.SQL.Op == protocol.OpComplete
	})
	if len(fenced) != 1 || fenced[0].SQL.Result != protocol.ResultFenced {
		t.Errorf("A's commits %+v, want one, fenced", fenced)
	}
	// The run's timeline never goes back in time.
	for i := 1; i < len(evs); i++ {
		if evs[i].At.Before(evs[i-1].At) {
			t.Errorf("event %d (%s) at %v is before event %d at %v", evs[i].Seq, evs[i].Kind, evs[i].At, evs[i-1].Seq, evs[i-1].At)
		}
	}
	// Another step of a finished run is refused, and says so.
	if _, err := r.Step(ctx); err == nil {
		t.Error("a step of a finished run was played")
	}
	l.checkSchema()
}

func workerOf(r *runner.Run, label string) protocol.Worker {
	for _, w := range r.Workers() {
		if w.Label == label {
			return w
		}
	}
	return protocol.Worker{}
}

// The guards decide the verdict, and the runner hands the ones a run
// breaks to its workers: new-owner-first with every guard on is the
// article's safe row; with the epoch increment off both claims hold epoch
// 0, the receiver takes the zombie's late call as a retry and ends with
// its result: unsafe, because of that guard.
func TestRun_EpochIncrementOffIsUnsafe(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		broken playground.Guards
		want   outcomeWant
	}{
		{"all guards on", 0, outcomeWant{safe: true, call: experiments.CallRejected, commit: experiments.CallRejected,
			epoch: 2, resultFrom: experiments.NewOwner, receiverFrom: experiments.NewOwner, receiverEp: 2}},
		{"epoch-increment off", playground.Guards(0).Break(playground.EpochIncrement), outcomeWant{safe: false, call: experiments.CallAccepted,
			commit: experiments.CallRejected, epoch: 0, resultFrom: experiments.NewOwner, receiverFrom: experiments.Zombie, receiverEp: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLab(t, runner.Limits{})
			r := l.open(experiments.RunConfig{Ordering: experiments.NewOwnerFirst, Lease: lease, Broken: tc.broken}, protocol.ModeStep, 0)
			res, err := r.Finish(context.Background())
			if err != nil {
				t.Fatalf("finish: %v\n%s", err, l.ev.dump())
			}
			if !res.Done || res.Outcome != r.Outcome() {
				t.Fatalf("finish: %+v, want done with the run's outcome", res)
			}
			checkOutcome(t, res.Outcome, tc.want)
			if got := res.Outcome.Broken; !slices.Equal(got, tc.broken.Names()) {
				t.Errorf("the outcome says %v are broken, want %v", got, tc.broken.Names())
			}
			if !tc.want.safe && !slices.Contains(res.Outcome.Because, playground.EpochIncrement.String()) {
				t.Errorf("unsafe because of %v, want %s among them", res.Outcome.Because, playground.EpochIncrement)
			}
			if r.StepIndex() != len(r.Scenario().Steps) || r.Phase() != protocol.PhaseFinished {
				t.Errorf("after Finish the run is at step %d of %d, %s", r.StepIndex(), len(r.Scenario().Steps), r.Phase())
			}
			l.checkSchema()
		})
	}
}

// An auto run plays its steps on its own at its pace: the first at once,
// the next only when the pace has passed; a pause holds it between steps
// whatever the pace; Play lets it go on to the verdict with no further
// command.
func TestRun_AutoModePlaysAtItsPaceAndPauses(t *testing.T) {
	t.Parallel()
	l := newLab(t, runner.Limits{})
	ctx := context.Background()
	r := l.open(experiments.RunConfig{Ordering: experiments.NewOwnerFirst, Lease: lease}, protocol.ModeAuto, time.Hour)
	if p := r.Phase(); p != protocol.PhasePlaying {
		t.Fatalf("an auto run that has started is %s, want playing", p)
	}
	// The first step waits for no pace.
	eventually(t, "the first step played", 10*time.Second, func() bool {
		return r.StepIndex() > 1 || r.Phase().Ended() || workerOf(r, experiments.Zombie).WaitingAt == protocol.CheckpointDeliver
	})
	// The second waits an hour: it has not begun a while later.
	hold := func(why string) {
		t.Helper()
		time.Sleep(400 * time.Millisecond) // nothing must happen: there is no state to wait on
		if n := len(l.ev.filter(func(e protocol.Event) bool { return e.Step != nil })); n != 1 || r.StepIndex() != 1 {
			t.Fatalf("%s, yet %d steps began (step index %d)\n%s", why, n, r.StepIndex(), l.ev.dump())
		}
	}
	hold("the pace is an hour")
	if err := r.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if p := r.Phase(); p != protocol.PhasePaused {
		t.Fatalf("a paused auto run is %s", p)
	}
	if err := r.SetPace(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got := r.Info().PaceMS; got != 0 {
		t.Errorf("the pace is %d ms after SetPace(0)", got)
	}
	hold("the run is paused")
	if err := r.Play(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("the run did not play to its end on its own\n%s", l.ev.dump())
	}
	checkOutcome(t, r.Outcome(), outcomeWant{safe: true, call: experiments.CallRejected, commit: experiments.CallRejected,
		epoch: 2, resultFrom: experiments.NewOwner, receiverFrom: experiments.NewOwner, receiverEp: 2})
	if n := len(l.ev.filter(func(e protocol.Event) bool { return e.Step != nil })); n != len(r.Scenario().Steps) {
		t.Errorf("%d steps began, want %d", n, len(r.Scenario().Steps))
	}
	if err := r.Play(ctx); err == nil {
		t.Error("Play of a finished run was taken")
	}
	l.checkSchema()
}

// The watcher tells a lease that ran out as the database clock passes it,
// with no step asking: the zombie is frozen, nobody steps, and the lease
// event comes, on the database clock, once; the script's own wait for the
// expiry then finds it told already and tells it no more.
func TestRun_LeaseExpiryIsSeenOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	l := newLab(t, runner.Limits{Poll: 20 * time.Millisecond})
	ctx := context.Background()
	r := l.open(experiments.RunConfig{Ordering: experiments.ZombieFirst, Lease: lease}, protocol.ModeStep, 0)
	for range 2 { // A claims, then freezes: its heartbeat stops with it
		if _, err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	claim := l.ev.await(t, "A's claim", time.Second, func(e protocol.Event) bool {
		return e.SQL != nil && e.SQL.Op == protocol.OpClaim && e.SQL.Result == protocol.ResultOK
	})
	le := l.ev.await(t, "the lease running out, told by the watcher", 5*time.Second, isLease(protocol.LeaseExpired)).Lease
	if r.StepIndex() != 2 {
		t.Fatalf("the run moved on to step %d by itself", r.StepIndex())
	}
	if le.Clock != protocol.ClockDatabase || le.DBNow.Before(le.LeaseUntil) || !le.LeaseUntil.Equal(*claim.SQL.LeaseUntil) {
		t.Errorf("lease told run out at %v on the %s clock; it ran until %v, and A's claim said %v", le.DBNow, le.Clock, le.LeaseUntil, *claim.SQL.LeaseUntil)
	}
	if le.Epoch != 1 || le.Owner != "worker-a" || le.Holder != experiments.Zombie {
		t.Errorf("the lease that ran out is %+v, want A's, epoch 1", le)
	}
	if _, err := r.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(l.ev.filter(isLease(protocol.LeaseExpired))); n != 1 {
		t.Errorf("the lease was told run out %d times, want once\n%s", n, l.ev.dump())
	}
	checkOutcome(t, r.Outcome(), outcomeWant{safe: true, call: experiments.CallAcceptedThenSuperseded, commit: experiments.CallRejected,
		epoch: 2, resultFrom: experiments.NewOwner, receiverFrom: experiments.NewOwner, receiverEp: 2})
	l.checkSchema()
}

// With the database clock guard off, a claimer judges leases by its own
// clock: B's runs ahead, so it takes A's lease while it is still live on
// the database clock. The runner tells that as a lease taken live (not as
// one run out), on B's clock, and the run is unsafe.
func TestRun_DBClockOffTakesALiveLease(t *testing.T) {
	t.Parallel()
	l := newLab(t, runner.Limits{})
	r := l.open(experiments.RunConfig{Ordering: experiments.ClockSkew, Lease: lease, Broken: playground.Guards(0).Break(playground.DBClock)}, protocol.ModeStep, 0)
	if _, err := r.Finish(context.Background()); err != nil {
		t.Fatalf("finish: %v\n%s", err, l.ev.dump())
	}
	if o := r.Outcome(); o.Safe || !slices.Contains(o.Because, playground.DBClock.String()) {
		t.Errorf("a live lease taken: safe %v because of %v; want unsafe because of db-clock", o.Safe, o.Because)
	}
	live := l.ev.filter(isLease(protocol.LeaseTakenLive))
	if len(live) != 1 {
		t.Fatalf("%d leases told taken live, want one\n%s", len(live), l.ev.dump())
	}
	le := live[0].Lease
	if le.ClockOf != experiments.NewOwner || le.Clock != protocol.ClockWorker || le.SkewMS != (2*lease).Milliseconds() ||
		le.LiveMS <= 0 || !le.LeaseUntil.After(le.DBNow) || le.Holder != experiments.Zombie || le.Epoch != 1 {
		t.Errorf("the lease taken live is told as %+v", le)
	}
	if n := len(l.ev.filter(isLease(protocol.LeaseExpired))); n != 0 {
		t.Errorf("a lease still live was told run out %d times\n%s", n, l.ev.dump())
	}
	l.checkSchema()
}
