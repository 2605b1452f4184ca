package session_test

import (
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/session"
)

// TestExecute_StepsARunToTheArticlesSafeEnd: a command before any run is
// a conflict that starts nothing; a step-by-step run of the article's
// zombie-first ordering steps to its safe end, one step per step of its
// script; the snapshot and Run(id) say what it is while it plays and once
// it is done; a step after the end is a conflict; nothing of it is left.
func TestExecute_StepsARunToTheArticlesSafeEnd(t *testing.T) {
	t.Parallel()
	w := newWorld(t, session.Limits{})
	s := w.session()

	for _, c := range []string{`{"action":"step"}`, `{"action":"finish"}`, `{"action":"pause_worker","worker":"A"}`} {
		_, err := cmd(t, s, c)
		wantFault(t, err, fault.Conflict, c+" with no run")
	}
	if snap := snapshot(t, s); snap.Run != nil || len(snap.Runs) != 0 || w.m.RunsInFlight() != 0 || len(w.sup.Procs()) != 0 {
		t.Fatalf("commands with no run started something: run %+v, %d runs, %d slots, %d workers", snap.Run, len(snap.Runs), w.m.RunsInFlight(), len(w.sup.Procs()))
	}

	r := must(t, s, `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
	if r.Run == "" || !r.OK {
		t.Fatalf("run answered %+v", r)
	}
	snap := snapshot(t, s)
	if snap.Role != "driver" || snap.Run == nil || snap.Run.ID != r.Run || snap.Run.Phase.Ended() || snap.Run.Mode != protocol.ModeStep ||
		snap.Run.Ordering != experiments.ZombieFirst || snap.Run.LeaseMS != 300 || len(snap.Runs) != 1 {
		t.Fatalf("snapshot of a run just started: %+v", snap)
	}
	if w.m.RunsInFlight() != 1 {
		t.Fatalf("%d run slots held by one run", w.m.RunsInFlight())
	}

	sc, _ := experiments.Script(experiments.ZombieFirst)
	var out *protocol.Outcome
	for steps := 1; ; steps++ {
		res := must(t, s, `{"action":"step"}`)
		if res.Run != r.Run || res.Step == nil {
			t.Fatalf("step %d answered %+v", steps, res)
		}
		if info, err := s.Run(r.Run); err != nil || (!res.Done && info.StepIndex != steps) {
			t.Fatalf("after step %d the run says step %d (%v)", steps, info.StepIndex, err)
		}
		if res.Done {
			if steps != len(sc.Steps) {
				t.Errorf("done after %d steps, the script has %d", steps, len(sc.Steps))
			}
			out = res.Outcome
			break
		}
		if steps > len(sc.Steps) {
			t.Fatalf("%d steps and the run is not done", steps)
		}
	}
	if out == nil || out.ZombieReceiverCall != experiments.CallAcceptedThenSuperseded || out.ZombieCommit != experiments.CallRejected || !out.Safe ||
		out.Final.Epoch != 2 || out.Final.ResultFrom != "B" || out.Receiver.PayloadFrom != "B" || out.Receiver.Epoch != 2 {
		t.Fatalf("outcome = %+v", out)
	}

	snap = snapshot(t, s)
	if snap.Run == nil || snap.Run.Phase != protocol.PhaseFinished || snap.Run.Ended == nil || snap.Run.Outcome == nil || !snap.Run.Outcome.Safe ||
		len(snap.Jobs) != 0 || len(snap.Runs) != 1 || snap.Runs[0].Phase != protocol.PhaseFinished {
		t.Fatalf("snapshot after the run: %+v", snap)
	}
	info, err := s.Run(r.Run)
	if err != nil || info.Phase != protocol.PhaseFinished || info.Outcome == nil || info.Outcome.Final.Epoch != 2 {
		t.Fatalf("Run(%s) after the run: %+v, %v", r.Run, info, err)
	}
	_, err = s.Run("r" + r.Run)
	wantFault(t, err, fault.NotFound, "a run the session never had")
	_, err = cmd(t, s, `{"action":"step"}`)
	wantFault(t, err, fault.Conflict, "a step after the end")

	w.waitFor(10*time.Second, "the run's slot given back", func() bool { return w.m.RunsInFlight() == 0 })
	w.noWorkers("after the run's end")
	if n := w.schemas(""); n != 0 {
		t.Fatalf("%d schemas left by a finished run", n)
	}
}

// TestExecute_ResetAndReplaceEndTheRunWhole: one current run per session:
// a second run stops the first (replaced: its workers reaped, its schemas
// dropped, its slot given back) before it starts; reset stops the second
// the same way and leaves nothing; a reset with no run is fine.
func TestExecute_ResetAndReplaceEndTheRunWhole(t *testing.T) {
	t.Parallel()
	w := newWorld(t, session.Limits{})
	s := w.session()
	must(t, s, `{"action":"reset"}`)

	first := must(t, s, `{"action":"run","ordering":"new-owner-first","mode":"step","lease_ms":300}`)
	must(t, s, `{"action":"step"}`) // A spawned and holding the job
	firstPids := spawnedBy(t, s, first.Run)
	if len(firstPids) == 0 {
		t.Fatal("the first run spawned no worker")
	}
	second := must(t, s, `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
	if second.Run == first.Run {
		t.Fatalf("the second run has the first's id %s", first.Run)
	}
	info, err := s.Run(first.Run)
	if err != nil || info.Phase != protocol.PhaseStopped || info.StopReason != protocol.StopReplaced {
		t.Fatalf("the first run once replaced: %s (%s), %v", info.Phase, info.StopReason, err)
	}
	for _, pid := range firstPids {
		if !gone(pid) {
			t.Errorf("the replaced run's worker %d is alive", pid)
		}
	}
	snap := snapshot(t, s)
	if snap.Run == nil || snap.Run.ID != second.Run || live(snap.Runs) != 1 || len(snap.Runs) != 2 {
		t.Fatalf("after a second run: current %+v, runs %+v", snap.Run, snap.Runs)
	}
	if n := w.m.RunsInFlight(); n != 1 {
		t.Fatalf("%d run slots held after the first run was replaced, want 1", n)
	}
	if n := w.schemas(""); n != 2 {
		t.Fatalf("%d schemas after the first run was replaced, want the second's 2", n)
	}

	res := must(t, s, `{"action":"reset"}`)
	if res.Run != second.Run {
		t.Fatalf("reset answered run %q, want %q", res.Run, second.Run)
	}
	info, err = s.Run(second.Run)
	if err != nil || info.Phase != protocol.PhaseStopped || info.StopReason != protocol.StopReset {
		t.Fatalf("the run once reset: %s (%s), %v", info.Phase, info.StopReason, err)
	}
	// Reset returns once the run has ended whole.
	if n := w.m.RunsInFlight(); n != 0 {
		t.Errorf("%d run slots held after reset", n)
	}
	if n := w.schemas(""); n != 0 {
		t.Errorf("%d schemas left after reset", n)
	}
	w.noWorkers("after reset")
	_, err = cmd(t, s, `{"action":"step"}`)
	wantFault(t, err, fault.Conflict, "a step after reset")
}

// TestExecute_SixRunsAtOnceLeaveOne: the same run command sent six times
// at once on one session: each is answered, exactly one run is current
// and live, the five others ended whole (one slot, one run's schemas and
// workers), and reset then leaves nothing.
func TestExecute_SixRunsAtOnceLeaveOne(t *testing.T) {
	t.Parallel()
	w := newWorld(t, session.Limits{})
	s := w.session()
	const n = 6
	errs := make([]error, n)
	runs := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r session.Result
			r, errs[i] = cmd(t, s, `{"action":"run","ordering":"free-play","lease_ms":400}`)
			runs[i] = r.Run
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("run command %d: %v", i, err)
		}
	}
	snap := snapshot(t, s)
	if l := live(snap.Runs); l != 1 || len(snap.Runs) != n {
		t.Fatalf("%d of %d runs are live after %d run commands at once, want 1: %+v", l, len(snap.Runs), n, snap.Runs)
	}
	if snap.Run == nil || snap.Run.Phase.Ended() {
		t.Fatalf("the current run is %+v", snap.Run)
	}
	seen := map[string]bool{}
	for _, id := range runs {
		if seen[id] {
			t.Errorf("two commands were answered with run %s", id)
		}
		seen[id] = true
	}
	for _, r := range snap.Runs {
		if r.ID != snap.Run.ID && (r.Phase != protocol.PhaseStopped || r.StopReason != protocol.StopReplaced) {
			t.Errorf("run %s, not current, is %s (%s)", r.ID, r.Phase, r.StopReason)
		}
	}
	if k := w.m.RunsInFlight(); k != 1 {
		t.Errorf("%d run slots held, want 1", k)
	}
	if k := w.schemas(""); k != 2 {
		t.Errorf("%d schemas, want one run's 2", k)
	}
	// The replaced runs' workers are gone; only the current run's live.
	for _, r := range snap.Runs {
		if r.ID == snap.Run.ID {
			continue
		}
		for _, pid := range spawnedBy(t, s, r.ID) {
			if !gone(pid) {
				t.Errorf("worker %d of the replaced run %s is alive", pid, r.ID)
			}
		}
	}
	if k, mine := len(w.sup.Procs()), len(spawnedBy(t, s, snap.Run.ID)); k > mine {
		t.Errorf("%d worker processes, and the current run spawned %d", k, mine)
	}
	must(t, s, `{"action":"reset"}`)
	if k := w.m.RunsInFlight(); k != 0 {
		t.Errorf("%d run slots held after reset", k)
	}
	if k := w.schemas(""); k != 0 {
		t.Errorf("%d schemas left after reset", k)
	}
	w.noWorkers("after reset")
}
