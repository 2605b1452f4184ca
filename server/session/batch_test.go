package session_test

import (
	"slices"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/session"
)

// TestBatch_PlaysItsCellsAndEnds: a batch's runs are the session's from
// the command's answer (pending ones included), each plays to its verdict
// in the background, and the batch says it finished, with every cell; it
// leaves no slot, schema or worker, and the session's current run is
// untouched by it.
func TestBatch_PlaysItsCellsAndEnds(t *testing.T) {
	t.Parallel()
	w := newWorld(t, session.Limits{})
	s := w.session()
	res := must(t, s, `{"action":"batch","name":"epoch-check","lease_ms":300}`)
	if len(res.Runs) != 2 {
		t.Fatalf("the epoch-check batch has runs %v, want its 2 orderings", res.Runs)
	}
	snap := snapshot(t, s)
	if snap.Run != nil {
		t.Fatalf("a batch made a current run: %+v", snap.Run)
	}
	for _, id := range res.Runs {
		i := slices.IndexFunc(snap.Runs, func(r protocol.RunInfo) bool { return r.ID == id })
		if i < 0 || !snap.Runs[i].Background {
			t.Fatalf("cell %s is not among the session's runs as a background run: %+v", id, snap.Runs)
		}
	}

	done := waitEvent(t, s, 60*time.Second, "the batch finished", func(e protocol.Event) bool {
		return e.Batch != nil && e.Batch.Phase == protocol.BatchFinished
	})
	if done.Batch.Name != experiments.BatchEpochCheck || len(done.Batch.Cells) != 2 || done.Batch.Answer == "" {
		t.Fatalf("the batch finished as %+v", done.Batch)
	}
	for _, id := range res.Runs {
		info, err := s.Run(id)
		if err != nil || info.Phase != protocol.PhaseFinished || info.Outcome == nil || !info.Background {
			t.Fatalf("cell %s once the batch finished: %s %+v, %v", id, info.Phase, info.Outcome, err)
		}
	}
	w.waitFor(10*time.Second, "the cells' slots given back", func() bool { return w.m.RunsInFlight() == 0 })
	if n := w.schemas(""); n != 0 {
		t.Fatalf("%d schemas left by a finished batch", n)
	}
	w.noWorkers("after the batch")
}

// TestBatch_ResetStopsItMidWayAndLeavesNothing: the matrix, stopped by a
// reset while its first cells play: when the reset returns, every cell
// that started was stopped by it, none is still waiting, and no slot,
// schema or worker process is left; the batch says it stopped. A new batch
// replaces one playing the same way.
func TestBatch_ResetStopsItMidWayAndLeavesNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, session.Limits{})
	s := w.session()
	// A lease long enough that no cell can finish before the reset comes:
	// each waits for its lease to run out, and the reset follows the first
	// cell seen playing by a second or two. (At 300 ms one sometimes
	// finished first; at 2 s too, on a loaded machine.)
	res := must(t, s, `{"action":"matrix","lease_ms":20000}`)
	if len(res.Runs) < 10 {
		t.Fatalf("the matrix has %d runs", len(res.Runs))
	}
	var playing string // a cell past its start, playing
	w.waitFor(30*time.Second, "a cell playing", func() bool {
		for _, id := range res.Runs {
			if info, err := s.Run(id); err == nil && info.Phase == protocol.PhasePlaying {
				playing = id
				return true
			}
		}
		return false
	})

	must(t, s, `{"action":"reset"}`)
	if info, err := s.Run(playing); err != nil || info.Phase != protocol.PhaseStopped || info.StopReason != protocol.StopReset {
		t.Errorf("cell %s, playing at the reset, after it: %s (%s), %v", playing, info.Phase, info.StopReason, err)
	}
	if n := w.m.RunsInFlight(); n != 0 {
		t.Errorf("%d run slots held when the reset returned", n)
	}
	if n := len(w.sup.Procs()); n != 0 {
		t.Errorf("%d worker processes when the reset returned", n)
	}
	if n := w.schemas(""); n != 0 {
		t.Errorf("%d schemas when the reset returned: %v", n, w.schemaNames())
	}
	snap := snapshot(t, s)
	// Every cell that had begun is stopped by the reset, for its reason:
	// one caught starting too, whose start the reset cut short (it used to
	// fail, in the cancel's words: "the database is unavailable").
	reset := 0
	for _, r := range snap.Runs {
		if r.Phase != protocol.PhaseStopped || r.StopReason != protocol.StopReset {
			t.Errorf("cell %s after the reset: %s (%s)", r.ID, r.Phase, r.StopReason)
		}
		if r.StopReason == protocol.StopReset {
			reset++
		}
	}
	if reset == 0 || len(snap.Runs) == len(res.Runs) {
		t.Fatalf("%d of the matrix's %d cells had started when it was reset, %d stopped by it", len(snap.Runs), len(res.Runs), reset)
	}
	waitEvent(t, s, time.Second, "the batch stopped by the reset", func(e protocol.Event) bool {
		return e.Batch != nil && e.Batch.Phase == protocol.BatchStopped && e.Batch.Answer == protocol.StopWords(protocol.StopReset)
	})
	for _, e := range events(t, s) {
		if e.Batch != nil && e.Batch.Phase == protocol.BatchFinished {
			t.Fatal("a reset batch said it finished")
		}
	}
	w.noWorkers("after the reset")

	// A batch replaces the one playing: the first's cells are stopped as
	// replaced, and only the second's play on.
	first := must(t, s, `{"action":"batch","name":"receiver-check","lease_ms":300}`)
	w.waitFor(30*time.Second, "a cell of the first batch spawned a worker", func() bool {
		return len(spawnedBy(t, s, first.Runs[0])) > 0 || len(spawnedBy(t, s, first.Runs[1])) > 0
	})
	second := must(t, s, `{"action":"batch","name":"epoch-check","lease_ms":300}`)
	for _, id := range first.Runs {
		if info, err := s.Run(id); err == nil && (info.Phase != protocol.PhaseStopped || info.StopReason != protocol.StopReplaced) &&
			(info.Phase != protocol.PhaseFailed || info.StopReason != protocol.StopStartFailed) {
			t.Errorf("cell %s of the replaced batch: %s (%s)", id, info.Phase, info.StopReason)
		}
	}
	waitEvent(t, s, 60*time.Second, "the second batch finished", func(e protocol.Event) bool {
		return e.Batch != nil && e.Batch.Phase == protocol.BatchFinished && e.Batch.Name == experiments.BatchEpochCheck
	})
	for _, id := range second.Runs {
		if info, err := s.Run(id); err != nil || info.Phase != protocol.PhaseFinished {
			t.Errorf("cell %s of the second batch: %s, %v", id, info.Phase, err)
		}
	}
	w.waitFor(10*time.Second, "the cells' slots given back", func() bool { return w.m.RunsInFlight() == 0 })
	w.noWorkers("after the second batch")
}
