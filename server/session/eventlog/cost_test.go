package eventlog_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/session/eventlog"
)

// TestCost_TheBytesALogCountsAreTheHeapItHolds: the bytes a log counts
// for its events (what --max-session-mb and --max-events-total-mb bound)
// are at least the heap those events hold, for the events real runs make
// (the seed recordings'): a budget the server keeps is then a bound on
// its memory, and not a fraction of it.
func TestCost_TheBytesALogCountsAreTheHeapItHolds(t *testing.T) {
	files, err := filepath.Glob("../../recording/seed/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no seed recordings: %v", err)
	}
	var evs []protocol.Event
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Events []protocol.Event `json:"events"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		evs = append(evs, r.Events...)
	}
	if len(evs) < 100 {
		t.Fatalf("only %d events in the seed recordings", len(evs))
	}
	// The events as a session gets them: fresh values, not shared with the
	// slice they were read from.
	raw, err := json.Marshal(evs)
	if err != nil {
		t.Fatal(err)
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	var logs []*eventlog.Log
	var counted int64
	for counted < 64<<20 {
		var fresh []protocol.Event
		if err := json.Unmarshal(raw, &fresh); err != nil {
			t.Fatal(err)
		}
		l := eventlog.New(eventlog.Config{MaxEvents: 1 << 30, MaxBytes: 1 << 40})
		for _, e := range fresh {
			l.Append(e)
		}
		fresh = nil
		counted += l.Bytes()
		logs = append(logs, l)
	}
	held := heap() - before
	t.Logf("%d logs of %d events: counted %d MiB, heap %d MiB (%.2f×)", len(logs), len(evs), counted>>20, held>>20, float64(held)/float64(counted))
	if held > uint64(counted) {
		t.Errorf("the logs count %d MiB and hold %d MiB of heap: a budget in counted bytes does not bound the memory", counted>>20, held>>20)
	}
	runtime.KeepAlive(logs)
}
