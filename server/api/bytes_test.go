package api_test

import (
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/sandbox/sandboxtest"
)

// heapInUse is the server's heap after a collection (the server runs in
// this process).
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// rss is this process's resident set in bytes (Linux's /proc), or 0
// where there is no /proc (macOS): the heap's figure holds there alone.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// rssBudget is what the byte attack may add to the server's resident set
// (BENCHMARKS.md): the events of every session together are capped at
// 256 MiB, and these sessions' at 16 MiB each.
const rssBudget = 300 << 20

// TestBytes_BigResultsCannotFillTheServer is the byte attack: checks whose
// claim returns a 2 MiB owner (three of which took the server from 378 MB
// to 2.49 GB, one session holding 205 MB of events) are refused as
// too-big by their trial run, and checks whose owner is just under the
// value cap run to their report with every session's events within its
// byte cap, and the server's heap within its budget.
func TestBytes_BigResultsCannotFillTheServer(t *testing.T) {
	ts := startServer(t, func(c *api.Config) { c.TapFunc = nil }) // the tap keeps a copy of every event
	before, rssBefore := heapInUse(), rss()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sessions []*sess
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := ts.newSession()
			sol := sandbox.Start()
			sol.Claim = sandboxtest.BigOwnerClaim(21)
			a := s.try(checkCmd(t, sol))
			if a.Status != http.StatusBadRequest || !strings.Contains(a.errText(), "may hold at most") {
				t.Errorf("check %d of a 2 MiB owner: %d %.200s, want a 400 saying the value is over its cap", i, a.Status, a.Body)
			}
			if a.Status == http.StatusOK {
				mu.Lock()
				sessions = append(sessions, s) // its events are weighed below
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for range 3 {
		s := ts.newSession()
		sol := sandbox.Start()
		sol.Claim = sandboxtest.BigOwnerClaim(12) // 4 KiB and a little: under the value cap
		s.cmd(checkCmd(t, sol))
		sessions = append(sessions, s)
	}
	for _, s := range sessions {
		if rep := s.checkReport(3 * time.Minute); rep.Pass {
			t.Errorf("the start passes: %+v", rep)
		}
		a := ts.do(http.MethodGet, "/api/sessions/"+s.ID+"/events.ndjson", "", "", "")
		if a.Status != http.StatusOK || len(a.Body) > 16<<20 {
			t.Errorf("events.ndjson: %d, %d bytes, want at most the session's 16 MiB", a.Status, len(a.Body))
		}
		t.Logf("a session's events: %d bytes", len(a.Body))
	}
	after, rssAfter := heapInUse(), rss()
	grew := int64(after) - int64(before)
	t.Logf("resident set %d MB before, %d MB after", rssBefore>>20, rssAfter>>20)
	if rssAfter-rssBefore > rssBudget {
		t.Errorf("the resident set grew by %d MB, over the %d MB budget", (rssAfter-rssBefore)>>20, rssBudget>>20)
	}
	t.Logf("heap in use %d MB before, %d MB after (%+d MB)", before>>20, after>>20, grew>>20)
	if budget := int64(200 << 20); grew > budget {
		t.Errorf("the heap grew by %d MB, over the %d MB budget", grew>>20, budget>>20)
	}
}
