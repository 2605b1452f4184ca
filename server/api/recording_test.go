package api_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/labtest"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/recording"
)

// seedSetups are the runs recorded into the binary: every ordering as a
// correct build, and each cell of the guard table that is unsafe.
var seedSetups = []struct {
	ordering experiments.Ordering
	broken   []string
}{
	{experiments.NewOwnerFirst, nil}, {experiments.ZombieFirst, nil}, {experiments.OwnerDoneFirst, nil}, {experiments.CrashBeforeCommit, nil}, {experiments.ClockSkew, nil},
	{experiments.NewOwnerFirst, []string{"epoch-increment"}}, {experiments.ZombieFirst, []string{"epoch-increment"}},
	{experiments.NewOwnerFirst, []string{"receiver-check"}}, {experiments.ClockSkew, []string{"db-clock"}},
	// The prediction's run: leases alone.
	{experiments.NewOwnerFirst, []string{"status-check", "owner-check", "epoch-check", "receiver-check"}},
}

// TestRecordingSeeds checks the recorded runs embedded in the binary: each
// is a real run's log whose verdict is what the engine says of its setup.
// With FENCELAB_UPDATE_SEEDS=1 it first records them afresh, from real runs
// of this server.
func TestRecordingSeeds(t *testing.T) {
	switch os.Getenv("FENCELAB_UPDATE_SEEDS") {
	case "1":
		recordSeeds(t)
		recordLoadSeed(t)
	case "load":
		recordLoadSeed(t)
	}
	checkLoadSeed(t)
	store, err := recording.New(64)
	if err != nil {
		t.Fatal(err)
	}
	list := store.List()
	if len(list) != len(seedSetups) {
		t.Fatalf("%d seed recordings, want %d (FENCELAB_UPDATE_SEEDS=1 go test ./server -run TestRecordingSeeds)", len(list), len(seedSetups))
	}
	for _, st := range seedSetups {
		r, ok := store.Get(recording.Key(st.ordering, st.broken, false))
		if !ok {
			t.Errorf("no seed for %s %v", st.ordering, st.broken)
			continue
		}
		labtest.Events(t, r.Events) // a seed speaks today's protocol
		var sql, verdict int
		pids := map[string]bool{}
		for _, e := range r.Events {
			if e.Process != nil && e.Process.Change == protocol.ProcSpawned && e.Process.Pid > 0 {
				pids[e.Actor] = true
			}
			if e.SQL != nil && e.SQL.Stmt.SQL != "" && pids[e.Actor] {
				sql++
			}
			if e.Verdict != nil {
				verdict++
				if o := e.Verdict.Outcome; o == nil || o.Safe != r.Outcome.Safe || o.Verdict != r.Outcome.Verdict {
					t.Errorf("%s: the verdict event does not match the outcome", r.Key)
				}
			}
		}
		if sql < 4 || verdict != 1 || !r.Seed {
			t.Errorf("%s: %d statements from worker processes, %d verdicts: not a real run's log", r.Key, sql, verdict)
		}
		if len(st.broken) == 0 {
			x, _ := experiments.ExpectedOutcome(st.ordering)
			o := r.Outcome
			if !o.Safe || o.ZombieReceiverCall != x.ZombieReceiverCall || o.ZombieCommit != x.ZombieCommit || o.Final.Epoch != x.Epoch {
				t.Errorf("%s: the correct build's seed is %+v", r.Key, o)
			}
		} else if r.Outcome.Safe {
			t.Errorf("%s: a seed of an unsafe cell is safe", r.Key)
		}
	}
}

func recordSeeds(t *testing.T) {
	ts := startServer(t, nil)
	dir := filepath.Join("recording", "seed")
	old, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, f := range old {
		os.Remove(f)
	}
	for _, st := range seedSetups {
		s := ts.newSession()
		broken, _ := json.Marshal(st.broken)
		if st.broken == nil {
			broken = []byte("[]")
		}
		r := s.cmd(fmt.Sprintf(`{"action":"run","ordering":%q,"mode":"auto","lease_ms":600,"pace_ms":400,"broken":%s}`, st.ordering, broken))
		s.verdictOf(r.Run, time.Minute)
		// The run is recorded once it has ended, just after its verdict.
		var rec recording.Recording
		ok := false
		for deadline := time.Now().Add(10 * time.Second); !ok && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			rec, ok = ts.Config().Recordings.Get(recording.Key(st.ordering, st.broken, false))
			ok = ok && !rec.Seed
		}
		if !ok {
			t.Fatalf("the server did not record %s", r.Run)
		}
		rec.Seed = true
		b, _ := json.Marshal(rec)
		name := filepath.Join(dir, rec.Key+".json")
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("recorded %s: %d events, %d bytes", name, len(rec.Events), len(b))
	}
}

// recordLoadSeed records the load lab the binary carries: a real lab of
// the page's defaults, run by this server.
func recordLoadSeed(t *testing.T) {
	ts := startServer(t, nil)
	s := ts.newSession()
	r := s.cmd(`{"action":"load"}`)
	s.waitEvent(5*time.Minute, "the load lab's end", func(e protocol.Event) bool {
		return e.Run == r.Run && e.Load != nil && e.Load.Phase == experiments.LoadFinished
	})
	var rec recording.LoadRecording
	ok := false
	for deadline := time.Now().Add(10 * time.Second); !ok && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		rec, ok = ts.Config().Recordings.Load()
		ok = ok && !rec.Seed
	}
	if !ok {
		t.Fatalf("the server did not record the load lab %s", r.Run)
	}
	rec.Seed = true
	b, _ := json.Marshal(rec)
	name := filepath.Join("recording", filepath.FromSlash(recording.LoadSeedFile))
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %s: %d events, %d bytes: %s", name, len(rec.Events), len(b), rec.Verdict)
}

// checkLoadSeed: the load lab the binary carries is a whole real lab in
// today's protocol, with the page's default styles, each style's live
// counts the checker's, and no zombie write through fencelab.
func checkLoadSeed(t *testing.T) {
	store, err := recording.New(64)
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := store.Load()
	if !ok {
		t.Fatalf("no load lab seed (FENCELAB_UPDATE_SEEDS=load go test ./server -run TestRecordingSeeds)")
	}
	labtest.Events(t, rec.Events)
	phases := map[experiments.LoadPhase]int{}
	for _, e := range rec.Events {
		if e.Load != nil {
			phases[e.Load.Phase]++
			if e.Load.Phase == experiments.LoadFinished && e.Load.Verdict != rec.Verdict {
				t.Errorf("the load seed's verdict %q is not its finished event's %q", rec.Verdict, e.Load.Verdict)
			}
		}
	}
	n := len(experiments.LoadStyles())
	if !rec.Seed || phases[experiments.LoadStarted] != 1 || phases[experiments.LoadFinished] != 1 || phases[experiments.LoadStyleDone] != n || phases[experiments.LoadRoundDone] != n*(n-1) || phases[experiments.LoadTick] < 10 {
		t.Errorf("the load seed is not a whole lab of %d rounds: %v", n, phases)
	}
	if !strings.Contains(rec.Verdict, fmt.Sprintf("over %d rounds", n)) {
		t.Errorf("the load seed's verdict %q has no spread over its rounds", rec.Verdict)
	}
	for _, r := range rec.Results {
		if !r.Agrees || r.Check.Unfinished != 0 || len(r.Rounds) != n {
			t.Errorf("the load seed's %s: agrees %v, %d unfinished, %d rounds", r.Style, r.Agrees, r.Check.Unfinished, len(r.Rounds))
		}
		if r.Style == "fencelab" && (r.Check.Broken != 0 || r.Tally.LateRow != 0 || r.Tally.LateReceiver != 0) {
			t.Errorf("the load seed's fencelab let zombie writes land: %+v", r)
		}
	}
}
