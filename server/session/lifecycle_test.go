package session_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/session"
)

// TestCaps_ARunPastTheServersSlotsIsBusyAndStartsNothing: with one run
// slot on the server, a second session's run is refused as busy and
// starts nothing (no run, no schema, no worker, no slot); once the first
// run is reset, the same command starts.
func TestCaps_ARunPastTheServersSlotsIsBusyAndStartsNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, session.Limits{MaxRuns: 1})
	a, b := w.session(), w.session()
	must(t, a, `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
	must(t, a, `{"action":"step"}`) // a worker of a's is live
	schemas, workers := w.schemas(""), len(w.sup.Procs())
	if workers == 0 {
		t.Fatal("a's run has no worker after its first step")
	}

	_, err := cmd(t, b, `{"action":"run","ordering":"new-owner-first","mode":"auto","lease_ms":300,"pace_ms":0}`)
	wantFault(t, err, fault.Busy, "a run past the server's one slot")
	if snap := snapshot(t, b); snap.Run != nil || len(snap.Runs) != 0 {
		t.Fatalf("the refused run is in b's snapshot: %+v %+v", snap.Run, snap.Runs)
	}
	if n := w.m.RunsInFlight(); n != 1 {
		t.Fatalf("%d run slots held, the server has 1", n)
	}
	if n := w.schemas(""); n != schemas {
		t.Fatalf("%d schemas after the refused run, %d before", n, schemas)
	}
	if n := len(w.sup.Procs()); n != workers || len(spawnedBy(t, b, "")) != 0 {
		t.Fatalf("%d worker processes after the refused run, %d before; b spawned %d", n, workers, len(spawnedBy(t, b, "")))
	}

	must(t, a, `{"action":"reset"}`)
	r := must(t, b, `{"action":"run","ordering":"new-owner-first","mode":"step","lease_ms":300}`)
	if info, err := b.Run(r.Run); err != nil || info.Phase.Ended() {
		t.Fatalf("b's run once a's slot was free: %+v, %v", info, err)
	}
	must(t, b, `{"action":"reset"}`)
	w.noWorkers("after both runs were reset")
}

// TestDelete_EndsTheSessionWholeAndItStartsNothingMore: deleting a
// session with a run playing stops the run (workers reaped, both schemas
// dropped, slot given back) and closes its log with a last word; the
// session is gone from the manager; a command sent on it afterwards is
// refused and starts nothing.
func TestDelete_EndsTheSessionWholeAndItStartsNothingMore(t *testing.T) {
	t.Parallel()
	w := newWorld(t, session.Limits{})
	s := w.session()
	r := must(t, s, `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
	must(t, s, `{"action":"step"}`)
	if len(w.sup.Procs()) == 0 || w.schemas("") != 2 {
		t.Fatalf("a run after a step: %d workers, %d schemas", len(w.sup.Procs()), w.schemas(""))
	}

	if err := w.m.Delete(s.ID); err != nil {
		t.Fatal(err)
	}
	info, err := s.Run(r.Run)
	if err != nil || info.Phase != protocol.PhaseStopped || info.StopReason != protocol.StopSessionEnd {
		t.Fatalf("the run of a deleted session: %s (%s), %v", info.Phase, info.StopReason, err)
	}
	if n := w.m.RunsInFlight(); n != 0 {
		t.Errorf("%d run slots held after delete", n)
	}
	if n := w.schemas(""); n != 0 {
		t.Errorf("%d schemas left after delete", n)
	}
	w.noWorkers("after delete")
	evs := w.events()
	if last := evs[len(evs)-1]; last.Kind != protocol.KindSession || last.Session == nil || last.Session.Reason != protocol.SessionDeleted {
		t.Errorf("the log's last event is %s %+v, want the session's end (deleted)", last.Kind, last.Session)
	}
	if w.m.Has(s.ID) {
		t.Error("the manager still has the deleted session")
	}
	_, err = w.m.Get(s.ID)
	wantFault(t, err, fault.NotFound, "Get of a deleted session")
	wantFault(t, w.m.Delete(s.ID), fault.NotFound, "a second delete")

	seq, spawns := s.Log.LastSeq(), len(w.spawned())
	for _, c := range []string{
		`{"action":"run","ordering":"new-owner-first","mode":"auto","lease_ms":300,"pace_ms":0}`,
		`{"action":"batch","name":"epoch-check","lease_ms":300}`,
		`{"action":"load","workers":2,"jobs":10}`,
	} {
		_, err := cmd(t, s, c)
		wantFault(t, err, fault.NotFound, c+" on a deleted session")
	}
	if snap := snapshot(t, s); len(snap.Runs) != 1 || snap.Runs[0].ID != r.Run {
		t.Errorf("runs of the deleted session after more commands: %+v", snap.Runs)
	}
	if n := w.m.RunsInFlight(); n != 0 {
		t.Errorf("%d run slots held after commands on a deleted session", n)
	}
	if n := w.schemas(""); n != 0 {
		t.Errorf("%d schemas made by commands on a deleted session", n)
	}
	if n := len(w.sup.Procs()); n != 0 || len(w.spawned()) != spawns || s.Log.LastSeq() != seq || len(w.events()) != len(evs) {
		t.Errorf("commands on a deleted session: %d workers, %d spawned (was %d), log at %d (was %d), %d events tapped (was %d)",
			n, len(w.spawned()), spawns, s.Log.LastSeq(), seq, len(w.events()), len(evs))
	}
}

// TestSpares_ARunTakesAMadeAheadPairAndNothingIsLeft: a manager with a
// spare run keeps a pair of schemas made ahead while quiet; a run takes
// it (its statements run on the spare's schemas, and it makes no pair of
// its own), its end drops it; the manager's Close drops the spare made
// again since, so no schema of the instance is left.
func TestSpares_ARunTakesAMadeAheadPairAndNothingIsLeft(t *testing.T) {
	t.Parallel()
	w := newWorld(t, session.Limits{SpareRuns: 1})
	// Wait on the manager's own count, not the catalog: the schemas are
	// in the catalog a moment before the spare is handed to the line a run
	// takes it from, and a run started in that moment makes its own pair.
	w.waitFor(20*time.Second, "a spare pair made", func() bool { return w.m.Spares() == 1 })
	s := w.session()
	r := must(t, s, `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
	// Every schema of the instance is a spare's: the run made no pair of
	// its own. (The pair made again to replace the one it took may be
	// there already: the filler waits a quiet second, which a loaded
	// machine's run start outlasts.)
	if all, spares := w.schemas(""), w.schemas("s"); all != spares || spares < 2 {
		t.Fatalf("%d schemas once the run took the spare pair, %d of them spares': want spares' alone", all, spares)
	}
	for {
		if res := must(t, s, `{"action":"step"}`); res.Done {
			if res.Outcome == nil || !res.Outcome.Safe {
				t.Fatalf("a run on a spare pair: %+v", res.Outcome)
			}
			break
		}
	}
	spare := `"fl_` + w.m.Instance() + `_s`
	var onSpare, elsewhere int
	for _, e := range events(t, s) {
		if e.Run == r.Run && e.SQL != nil {
			if strings.Contains(e.SQL.Stmt.SQL, spare) {
				onSpare++
			} else if strings.Contains(e.SQL.Stmt.SQL, `"fl_`) {
				elsewhere++
			}
		}
	}
	if onSpare == 0 || elsewhere != 0 {
		t.Fatalf("the run's statements: %d on the spare pair, %d on other schemas of the server", onSpare, elsewhere)
	}
	// The run's end dropped the pair it took; the only schemas left are a
	// spare made again since.
	if n, spares := w.schemas(""), w.schemas("s"); n != spares || n > 2 {
		t.Fatalf("%d schemas of the server after the run, %d of them spares", n, spares)
	}
	w.waitFor(20*time.Second, "the spare pair made again", func() bool { return w.schemas("s") == 2 })
	w.m.Close()
	if n := w.schemas(""); n != 0 {
		t.Fatalf("%d schemas of the server after Close", n)
	}
	w.noWorkers("after Close")
}

// TestSweep_IdleAndOverlongRunsEnd: Sweep stops a run nobody has driven
// for longer than RunIdle (abandoned) and leaves a driven one playing; it
// stops a run older than MaxRunTime even while driven (time limit); and it
// ends a session idle for longer than SessionIdle, its run with it.
func TestSweep_IdleAndOverlongRunsEnd(t *testing.T) {
	t.Parallel()
	const run = `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`
	sweepUntil := func(w *world, keep *session.Session, what string, done func() bool) {
		t.Helper()
		w.waitFor(15*time.Second, what, func() bool {
			keep.Touch() // driven all along
			w.m.Sweep()
			return done()
		})
	}
	ended := func(s *session.Session, id string) bool {
		info, err := s.Run(id)
		return err == nil && info.Phase.Ended()
	}

	t.Run("abandoned", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, session.Limits{RunIdle: 300 * time.Millisecond})
		idle, driven := w.session(), w.session()
		ri, rd := must(t, idle, run), must(t, driven, run)
		sweepUntil(w, driven, "the idle run ends", func() bool { return ended(idle, ri.Run) })
		if info, _ := idle.Run(ri.Run); info.Phase != protocol.PhaseStopped || info.StopReason != protocol.StopAbandoned {
			t.Fatalf("the idle run: %s (%s)", info.Phase, info.StopReason)
		}
		if info, _ := driven.Run(rd.Run); info.Phase.Ended() {
			t.Fatalf("the driven run ended: %s (%s)", info.Phase, info.StopReason)
		}
		if n := w.m.RunsInFlight(); n != 1 {
			t.Fatalf("%d run slots held, want the driven run's", n)
		}
		if !w.m.Has(idle.ID) {
			t.Fatal("an abandoned run took its session with it")
		}
		must(t, driven, `{"action":"reset"}`)
		w.noWorkers("after the sweep")
	})

	t.Run("time-limit", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, session.Limits{MaxRunTime: 600 * time.Millisecond})
		long := w.session()
		rl := must(t, long, run)
		sweepUntil(w, long, "the overlong run ends", func() bool { return ended(long, rl.Run) })
		if info, _ := long.Run(rl.Run); info.Phase != protocol.PhaseStopped || info.StopReason != protocol.StopTimeLimit {
			t.Fatalf("the overlong run: %s (%s)", info.Phase, info.StopReason)
		}
		if !w.m.Has(long.ID) {
			t.Fatal("a session in use was dropped")
		}
		if n := w.m.RunsInFlight(); n != 0 {
			t.Fatalf("%d run slots held after the sweep", n)
		}
		w.noWorkers("after the sweep")
	})

	// In a world of its own, with no run time limit: idle counts from the
	// end of the session's last command, and a run whose command took
	// longer than its time limit on a busy machine would reach that limit
	// first (CI, once).
	t.Run("session-idle", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, session.Limits{SessionIdle: 400 * time.Millisecond})
		forgotten, other := w.session(), w.session()
		rf := must(t, forgotten, run)
		sweepUntil(w, other, "the idle session ends", func() bool { return !w.m.Has(forgotten.ID) })
		if info, _ := forgotten.Run(rf.Run); info.Phase != protocol.PhaseStopped || info.StopReason != protocol.StopSessionEnd {
			t.Fatalf("the idle session's run: %s (%s)", info.Phase, info.StopReason)
		}
		if !w.m.Has(other.ID) {
			t.Fatal("a session in use was dropped")
		}
		if n := w.m.RunsInFlight(); n != 0 {
			t.Fatalf("%d run slots held after the sweep", n)
		}
		w.noWorkers("after the sweep")
	})
}
