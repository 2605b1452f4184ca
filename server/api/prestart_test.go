package api_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// prestartedWorkers lists this process's children that are prestarted
// workers still waiting for an assignment.
func prestartedWorkers() []int {
	var out []int
	for _, pid := range childProcs() {
		cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if strings.Contains(string(cmd), "worker\x00--prestarted") {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}

// childProcs lists this process's children (from /proc: pid (comm)
// state ppid …).
func childProcs() []int {
	me := strconv.Itoa(os.Getpid())
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		st, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); len(f) >= 2 && f[1] == me {
			pid, _ := strconv.Atoi(filepath.Base(d))
			out = append(out, pid)
		}
	}
	return out
}

// TestPrestarted_ARunTakesThemAndNoneOutlivesTheServer: a server with
// prestarted workers spawns them while quiet, gives them to a run (its two
// workers are those very processes, and the run plays to a safe verdict),
// makes more once the run has started and the server is quiet again, and
// leaves none behind when it shuts down.
func TestPrestarted_ARunTakesThemAndNoneOutlivesTheServer(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Fatal("needs /proc to find the workers")
	}
	ts := startServer(t, func(c *api.Config) { c.Limits.PrestartedWorkers = 2 })
	stats := func() (prestarted int) {
		var st struct{ Prestarted int }
		_ = json.Unmarshal(ts.do("GET", "/api/stats", "", "", "").Body, &st)
		return st.Prestarted
	}
	waitUntil := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 20s (stats: %d prestarted; processes %v)", what, stats(), prestartedWorkers())
			}
		}
	}
	waitUntil("two prestarted workers", func() bool { return stats() == 2 && len(prestartedWorkers()) == 2 })
	before := prestartedWorkers()

	s := ts.newSession()
	res := s.cmd(`{"action":"run","ordering":"zombie-first","lease_ms":300}`)
	if o := s.verdictOf(res.Run, 60*time.Second); !o.Safe {
		t.Fatalf("the run on prestarted workers is not safe: %+v", o)
	}
	var spawned []int
	for _, e := range s.events(0, res.Run) {
		if e.Process != nil && e.Process.Change == protocol.ProcSpawned {
			spawned = append(spawned, e.Process.Pid)
		}
	}
	slices.Sort(spawned)
	if !slices.Equal(spawned, before) {
		t.Fatalf("the run's workers are pids %v; the prestarted ones were %v", spawned, before)
	}
	waitUntil("two new prestarted workers", func() bool {
		now := prestartedWorkers()
		return stats() == 2 && len(now) == 2 && !slices.Contains(now, before[0]) && !slices.Contains(now, before[1])
	})
	after := prestartedWorkers()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, pid := range append(before, after...) {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("worker pid %d outlived the server", pid)
		}
	}
}
