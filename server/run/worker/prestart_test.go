package worker_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/supervisor"
	"github.com/fencelab/fencelab/server/run/worker"
	"github.com/fencelab/fencelab/server/servertest"
)

func TestParseAssignment(t *testing.T) {
	t.Parallel()
	a, err := worker.ParseAssignment([]byte(`{"args":["--label","A","--step"],"env":{"DATABASE_URL":"postgres://x","FENCELAB_SQL_ROLE":"r"}}`))
	if err != nil || !slices.Equal(a.Args, []string{"--label", "A", "--step"}) || a.Env["DATABASE_URL"] != "postgres://x" || len(a.Env) != 2 {
		t.Fatalf("a good assignment: %+v, %v", a, err)
	}
	for _, bad := range []string{``, `null x`, `[]`, `{"args":["--step"],"extra":1}`, `{"args":["--step"]} {}`,
		`{"env":{"PATH":"/tmp"}}`, `{"env":{"LD_PRELOAD":"/tmp/x.so"}}`, `{"env":{"database_url":"x"}}`, `{"args":"--step"}`,
		`{"args":["` + strings.Repeat("x", worker.MaxAssignmentBytes) + `"]}`} {
		if a, err := worker.ParseAssignment([]byte(bad)); err == nil {
			t.Errorf("ParseAssignment(%.50q) = %+v, want an error", bad, a)
		}
	}
}

// A prestarted worker whose stdin ends before an assignment came exits at
// once and quietly; one given flags beside --prestarted is refused.
func TestPrestarted_LetGoOrMisused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	if err := worker.Main(ctx, []string{worker.FlagPrestarted}, func(string) string { return "" }, strings.NewReader(""), &out, &errb); err != nil || out.Len() != 0 {
		t.Errorf("let go unused: %v, printed %q", err, out.String())
	}
	if err := worker.Main(ctx, []string{worker.FlagPrestarted, "--step"}, func(string) string { return "" }, strings.NewReader(""), &out, &errb); err == nil {
		t.Error("--prestarted --step: no error")
	}
	// An assignment that is refused ends the worker with the refusal, and
	// it does nothing it was told.
	err := worker.Main(ctx, []string{worker.FlagPrestarted}, func(string) string { return "" },
		strings.NewReader(`{"args":["--label","A","--step"],"env":{"PATH":"/tmp"}}`+"\n"), &out, &errb)
	if err == nil || !strings.Contains(err.Error(), `"PATH"`) || out.Len() != 0 {
		t.Errorf("an assignment setting PATH: %v, printed %q", err, out.String())
	}
}

// TestPrestarted_AStartTakesOne: a supervisor's Start gives its spec to a
// worker process spawned ahead of it (the same pid), which becomes that
// worker: its label, its owner, its connection, and a real claim of a
// job. A spec whose environment holds what an assignment may not carry,
// and a Start when none waits, spawn a new process as before; a
// prestarted worker killed while it waits is passed over; Close leaves
// no process behind.
func TestPrestarted_AStartTakesOne(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool, s, _, id := oneJob(ctx, t)

	sup, err := supervisor.New(supervisor.Config{Exe: servertest.Binary(t)})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = sup.Close()
		}
	}()
	var pids []int
	for range 3 {
		pid, err := sup.Prestart()
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if n, procs := sup.Prestarted(), sup.Procs(); n != 3 || len(procs) != 0 {
		t.Fatalf("after 3 prestarts: %d waiting, %d workers; want 3 and 0", n, len(procs))
	}

	var mu sync.Mutex
	events := map[string][]protocol.Event{}
	spec := func(label string, env ...string) supervisor.Spec {
		return supervisor.Spec{Label: label, Args: []string{"--schema", s.Jobs, "--name", "owner-" + label, "--lease", "30s", "--step"},
			Env: append([]string{"DATABASE_URL=" + pgtest.DSN(t), worker.EnvReceiverURL + "=http://127.0.0.1:9/deliveries"}, env...),
			EventFunc: func(p *supervisor.Proc, e protocol.Event) {
				mu.Lock()
				events[label] = append(events[label], e)
				mu.Unlock()
			}}
	}
	waitFor := func(label string, what string, match func(protocol.Event) bool) protocol.Event {
		t.Helper()
		for ctx.Err() == nil {
			mu.Lock()
			for _, e := range events[label] {
				if match(e) {
					mu.Unlock()
					return e
				}
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("worker %s: no %s; its events: %+v", label, what, events[label])
		return protocol.Event{}
	}
	atClaim := func(e protocol.Event) bool {
		return e.Checkpoint != nil && e.Checkpoint.Name == protocol.CheckpointClaim
	}

	a, err := sup.Start(spec("A"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Pid != pids[0] || a.Label != "A" || sup.Prestarted() != 2 {
		t.Fatalf("Start took pid %d (label %q), %d left waiting; want the oldest prestarted, %d, and 2 left", a.Pid, a.Label, sup.Prestarted(), pids[0])
	}
	ready := waitFor("A", "ready event", func(e protocol.Event) bool { return e.Process != nil && e.Process.Change == protocol.ProcReady })
	if ready.Actor != "A" || ready.Process.Pid != pids[0] || ready.Process.Owner != "owner-A" {
		t.Fatalf("the ready event: %+v %+v", ready, ready.Process)
	}
	waitFor("A", "claim checkpoint", atClaim)
	var app string
	if err := pool.QueryRow(ctx, `SELECT application_name FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND application_name = $1`,
		protocol.AppName("A")).Scan(&app); err != nil {
		t.Fatalf("no connection named for worker A: %v", err)
	}
	if err := a.Send(worker.Command{Cmd: "proceed", Checkpoint: protocol.CheckpointClaim}); err != nil {
		t.Fatal(err)
	}
	claim := waitFor("A", "claim", func(e protocol.Event) bool { return e.SQL != nil && e.SQL.Op == protocol.OpClaim })
	if claim.SQL.Result != protocol.ResultOK || claim.SQL.JobID != id || claim.SQL.Owner != "owner-A" {
		t.Fatalf("A's claim: %+v", claim.SQL)
	}

	// An entry no assignment carries: a new process, with it in its
	// environment, and the prestarted ones left waiting.
	b, err := sup.Start(spec("B", "FENCELAB_SOMETHING_ELSE=1"))
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(pids, b.Pid) || sup.Prestarted() != 2 {
		t.Fatalf("B took pid %d (prestarted: %v), %d left waiting; want a new process and 2 left", b.Pid, pids, sup.Prestarted())
	}
	waitFor("B", "claim checkpoint", atClaim)

	// One killed while it waits is reaped and no longer waits: C is a
	// live worker all the same.
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for sup.Prestarted() != 1 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	c, err := sup.Start(spec("C"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Pid == pids[1] {
		t.Fatalf("C was given the killed worker, pid %d", c.Pid)
	}
	waitFor("C", "claim checkpoint", atClaim)

	if err := sup.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	for _, pid := range append(pids, b.Pid, c.Pid) {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d is still there after Close (%v)", pid, err)
		}
	}
}
