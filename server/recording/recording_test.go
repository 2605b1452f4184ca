package recording_test

import (
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/recording"
)

// A run of a reader's own statements never becomes a setup's recording:
// not when it says so (Custom), and not when only its events do.
func TestStore_KeepsTheLabsRunsAlone(t *testing.T) {
	s, err := recording.New(10)
	if err != nil {
		t.Fatal(err)
	}
	seed, ok := s.Get(recording.Key(experiments.NewOwnerFirst, nil, false))
	if !ok || !seed.Seed {
		t.Fatal("no seed of new-owner-first")
	}
	theirs := func(custom bool) recording.Recording {
		r := seed
		r.Seed, r.Recorded, r.Custom = false, time.Now(), custom
		o := *seed.Outcome
		o.Safe, o.Headline = false, "Unsafe: a visitor's run"
		r.Outcome = &o
		r.Events = append([]protocol.Event(nil), seed.Events...)
		for i, e := range r.Events {
			if e.RunState != nil && !custom {
				rs := *e.RunState
				rs.Info.Custom = true
				r.Events[i].RunState = &rs
			}
		}
		return r
	}
	for _, custom := range []bool{true, false} {
		s.Add(theirs(custom))
		got, ok := s.Get(recording.Key(experiments.NewOwnerFirst, nil, false))
		if !ok || !got.Seed || got.Outcome.Headline == "Unsafe: a visitor's run" {
			t.Errorf("custom=%v: the setup's recording is now %q (seed %v)", custom, got.Outcome.Headline, got.Seed)
		}
	}
	for _, r := range s.List() {
		if r.Custom {
			t.Errorf("the list holds a reader's run: %s", r.Key)
		}
	}
	// The lab's own newer run replaces the seed, as it should.
	mine := seed
	mine.Seed, mine.Recorded = false, time.Now()
	s.Add(mine)
	if got, _ := s.Get(recording.Key(experiments.NewOwnerFirst, nil, false)); got.Seed {
		t.Error("a lab run did not replace the seed")
	}
}
