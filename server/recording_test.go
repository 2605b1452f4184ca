package server_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/recording"
)

// seedSetups are the runs recorded into the binary: every ordering as a
// correct build, and each cell of the guard table that is unsafe.
var seedSetups = []struct {
	ordering engine.Ordering
	broken   []string
}{
	{engine.NewOwnerFirst, nil}, {engine.ZombieFirst, nil}, {engine.CrashBeforeCommit, nil}, {engine.ClockSkew, nil},
	{engine.NewOwnerFirst, []string{"epoch-increment"}}, {engine.ZombieFirst, []string{"epoch-increment"}},
	{engine.NewOwnerFirst, []string{"receiver-check"}}, {engine.ClockSkew, []string{"db-clock"}},
}

// TestRecordingSeeds checks the recorded runs embedded in the binary: each
// is a real run's log whose verdict is what the engine says of its setup.
// With FENCELAB_UPDATE_SEEDS=1 it first records them afresh, from real runs
// of this server.
func TestRecordingSeeds(t *testing.T) {
	if os.Getenv("FENCELAB_UPDATE_SEEDS") == "1" {
		recordSeeds(t)
	}
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
		var sql, verdict int
		for _, e := range r.Events {
			if e.Kind == engine.KindSQL && e.SQL != "" && e.Pid > 0 {
				sql++
			}
			if e.Kind == engine.KindVerdict {
				verdict++
				var o engine.Outcome
				if err := json.Unmarshal(e.Data, &o); err != nil || o.Safe != r.Outcome.Safe || o.Verdict != r.Outcome.Verdict {
					t.Errorf("%s: the verdict event does not match the outcome", r.Key)
				}
			}
		}
		if sql < 4 || verdict != 1 || !r.Seed {
			t.Errorf("%s: %d statements from worker processes, %d verdicts: not a real run's log", r.Key, sql, verdict)
		}
		if len(st.broken) == 0 {
			x, _ := engine.ExpectedOutcome(st.ordering)
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
		rec, ok := ts.Config().Recordings.Get(recording.Key(st.ordering, st.broken, false))
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
