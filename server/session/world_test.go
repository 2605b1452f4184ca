package session_test

// The tests of this package's API, with no HTTP: each test builds what
// server/api's New builds for a Manager (a supervisor of real worker
// processes running the fencelab binary, the receivers' registry on a
// loopback listener of its own, the row notifier), on the test binary's
// Postgres, and drives its sessions with decoded commands, as the
// handlers do. At the end of each test no worker process may be left.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/labtest"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/child"
	"github.com/fencelab/fencelab/server/run/control"
	"github.com/fencelab/fencelab/server/run/notify"
	"github.com/fencelab/fencelab/server/run/receiver"
	"github.com/fencelab/fencelab/server/run/supervisor"
	"github.com/fencelab/fencelab/server/servertest"
	"github.com/fencelab/fencelab/server/session"
	"github.com/jackc/pgx/v5"
)

// world is one test's Manager and what it stands on.
type world struct {
	t   *testing.T
	m   *session.Manager
	sup *supervisor.Supervisor

	mu     sync.Mutex
	tapped [][]byte     // every event of every session, as the event tap sees it
	logged bytes.Buffer // the manager's log lines at warning and above
}

// Write keeps the manager's log lines (slog's handler writes each whole).
func (w *world) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logged.Write(b)
}

// errorsLogged returns the manager's log lines at level ERROR.
func (w *world) errorsLogged() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for l := range strings.SplitSeq(w.logged.String(), "\n") {
		if strings.Contains(l, "level=ERROR") {
			out = append(out, l)
		}
	}
	return out
}

// newWorld builds a Manager with the limits lim (zero: the defaults) as
// server/api's New does. Its cleanup closes the manager, then fails the
// test if a worker process the supervisor started is still alive or a
// schema of the manager's instance is left.
func newWorld(t *testing.T, lim session.Limits) *world {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sup, err := supervisor.New(supervisor.Config{Exe: servertest.Binary(t)})
	if err != nil {
		t.Fatal(err)
	}
	receivers, stopReceivers, err := receiver.Serve(nil)
	if err != nil {
		_ = sup.Close()
		t.Fatal(err)
	}
	nt := notify.New(notify.Connector(pgtest.DSN(t), "fencelab session test listener"), nil)
	w := &world{t: t, sup: sup}
	m, err := session.NewManager(ctx, session.Config{Pool: pgtest.Pool(t), DatabaseURL: pgtest.DSN(t), Supervisor: sup, Notify: nt,
		Receivers: receivers, Limits: lim, TapFunc: w.tap,
		Log: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		nt.Close()
		stopReceivers()
		_ = sup.Close()
		t.Fatal(err)
	}
	w.m = m
	t.Cleanup(func() {
		m.Close()
		// Close ends every run, and each run reaps its workers as it
		// ends: none is left for the supervisor's own Close to kill.
		if n := len(sup.Procs()); n > 0 {
			t.Errorf("%d worker processes outlived the manager's Close", n)
		}
		nt.Close()
		_ = sup.Close()
		stopReceivers()
		if n := w.schemas(""); n > 0 {
			t.Errorf("%d schemas of the manager are left after its Close: %v", n, w.schemaNames())
		}
		for _, pid := range w.spawned() {
			if !gone(pid) {
				t.Errorf("worker %d is alive after the manager's Close", pid)
			}
		}
		// Nothing the tests do is an error for the server's log (a reset
		// cutting a run's start short included).
		for _, l := range w.errorsLogged() {
			t.Errorf("the manager logged an error: %s", l)
		}
		// Every event the sessions kept is what the protocol's schema says.
		w.mu.Lock()
		defer w.mu.Unlock()
		bad := 0
		for _, b := range w.tapped {
			if err := labtest.Validate(b); err != nil {
				if bad++; bad <= 3 {
					t.Errorf("an event breaks the protocol schema: %v\n%s", err, b)
				}
			}
		}
	})
	return w
}

// tap keeps a copy of an event (it runs under the log's lock).
func (w *world) tap(b []byte) {
	w.mu.Lock()
	w.tapped = append(w.tapped, bytes.Clone(b))
	w.mu.Unlock()
}

// events decodes every event the tap saw, of every session, whatever
// became of its session's log since (a closed log lets its events go).
func (w *world) events() []protocol.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]protocol.Event, 0, len(w.tapped))
	for _, b := range w.tapped {
		var e protocol.Event
		if err := json.Unmarshal(b, &e); err != nil {
			w.t.Errorf("a tapped event does not decode: %v\n%s", err, b)
		}
		out = append(out, e)
	}
	return out
}

// spawned lists the pids of every worker spawned in the world.
func (w *world) spawned() []int {
	var pids []int
	for _, e := range w.events() {
		if e.Process != nil && e.Process.Change == protocol.ProcSpawned {
			pids = append(pids, e.Process.Pid)
		}
	}
	return pids
}

// session makes a session, for a client with no per-client caps.
func (w *world) session() *session.Session {
	w.t.Helper()
	s, err := w.m.Create()
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

// schemas counts the schemas of the manager's instance whose names go on
// with more (fl_<instance>_<more>…).
func (w *world) schemas(more string) int {
	w.t.Helper()
	var n int
	if err := pgtest.Pool(w.t).QueryRow(context.Background(), "SELECT count(*) FROM information_schema.schemata WHERE starts_with(schema_name, $1)",
		"fl_"+w.m.Instance()+"_"+more).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	return n
}

// schemaNames lists the schemas of the manager's instance.
func (w *world) schemaNames() []string {
	w.t.Helper()
	rows, err := pgtest.Pool(w.t).Query(context.Background(), "SELECT schema_name FROM information_schema.schemata WHERE starts_with(schema_name, $1) ORDER BY 1",
		"fl_"+w.m.Instance()+"_")
	if err != nil {
		w.t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		w.t.Fatal(err)
	}
	return names
}

// waitFor polls cond until it holds, failing the test after timeout.
func (w *world) waitFor(timeout time.Duration, what string, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// noWorkers waits until the supervisor holds no worker process, and
// checks that every worker spawned in the world is gone.
func (w *world) noWorkers(why string) {
	w.t.Helper()
	w.waitFor(10*time.Second, "no worker process "+why, func() bool { return len(w.sup.Procs()) == 0 })
	for _, pid := range w.spawned() {
		if !gone(pid) {
			w.t.Errorf("worker %d is alive %s", pid, why)
		}
	}
}

// gone reports whether a process has exited (a zombie counts as gone).
func gone(pid int) bool { return child.Gone(child.State(pid)) }

// cmd decodes a command as the handlers do and executes it.
func cmd(t *testing.T, s *session.Session, body string) (session.Result, error) {
	t.Helper()
	c, err := control.Parse([]byte(body), control.DefaultLimits())
	if err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.Execute(ctx, c)
}

// must is cmd that fails the test on an error.
func must(t *testing.T, s *session.Session, body string) session.Result {
	t.Helper()
	r, err := cmd(t, s, body)
	if err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return r
}

// wantFault fails the test unless err carries the fault code.
func wantFault(t *testing.T, err error, code fault.Code, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %s", what, code)
	}
	if got := fault.CodeOf(err); got != code {
		t.Fatalf("%s: %v (%s), want %s", what, err, got, code)
	}
}

// events returns every event the session's log keeps.
func events(t *testing.T, s *session.Session) []protocol.Event {
	t.Helper()
	evs, err := s.Log.Since(0, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// spawnedBy lists the pids of the workers the session's log saw spawned
// by one run ("": by any).
func spawnedBy(t *testing.T, s *session.Session, run string) []int {
	var pids []int
	for _, e := range events(t, s) {
		if e.Process != nil && e.Process.Change == protocol.ProcSpawned && (run == "" || e.Run == run) {
			pids = append(pids, e.Process.Pid)
		}
	}
	return pids
}

// waitEvent waits until the session's log holds an event that matches.
func waitEvent(t *testing.T, s *session.Session, timeout time.Duration, what string, match func(protocol.Event) bool) protocol.Event {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, e := range events(t, s) {
			if match(e) {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event %s within %v; the log holds:\n%s", what, timeout, dump(t, s))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dump is the session's events, one line each, for a failure's message.
func dump(t *testing.T, s *session.Session) string {
	var b strings.Builder
	for _, e := range events(t, s) {
		fmt.Fprintf(&b, "  %d %s %s %s: %s\n", e.Seq, e.Run, e.Actor, e.Kind, e.Text)
	}
	return b.String()
}

// live counts the runs of a snapshot that have not ended.
func live(runs []protocol.RunInfo) int {
	n := 0
	for _, r := range runs {
		if !r.Phase.Ended() {
			n++
		}
	}
	return n
}

// snapshot reads the session's snapshot as its driver.
func snapshot(t *testing.T, s *session.Session) session.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, err := s.Snapshot(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}
