package api_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// childWorkers lists this process's children that are fencelab workers:
// the test's servers run in it, so their workers are its children.
func childWorkers(t *testing.T) []int {
	t.Helper()
	var out []int
	for _, pid := range childProcs() {
		cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if strings.Contains(string(cmd), "worker\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// Sixty commands at once to one session — runs, free play, batches, a
// load lab, resets — then a reset: no worker outlives its run. A worker
// whose run ended while it was being started (between taking its place
// and its process starting) was never stopped, and held its Postgres
// connection for minutes while the stats said runs 0, workers 1.
func TestLeak_NoWorkerOutlivesAStorm(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc to find the workers")
	}
	ts := startServer(t, nil)
	cmds := []string{
		`{"action":"run","ordering":"zombie-first","lease_ms":300}`,
		`{"action":"run","ordering":"new-owner-first","mode":"step"}`,
		`{"action":"run","ordering":"free-play","lease_ms":400}`,
		`{"action":"batch","name":"epoch-check","lease_ms":300}`,
		`{"action":"reset"}`,
		`{"action":"add_worker","work_ms":50}`,
		`{"action":"load","workers":3,"jobs":30,"lease_ms":300}`,
	}
	for trial := range 4 {
		s := ts.newSession()
		var wg sync.WaitGroup
		for i := range 60 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i%10) * 3 * time.Millisecond)
				s.try(cmds[i%len(cmds)])
			}()
		}
		wg.Wait()
		s.try(`{"action":"reset"}`)
		deadline := time.Now().Add(20 * time.Second)
		for {
			var st struct{ Runs, Workers, Loads int }
			_ = json.Unmarshal(ts.do("GET", "/api/stats", "", "", "").Body, &st)
			left := childWorkers(t)
			if len(left) == 0 && st.Workers == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("trial %d: 20 s after the last reset, workers %v are alive (stats: %+v)", trial, left, st)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
