package runner_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/labtest"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/check"
	"github.com/fencelab/fencelab/server/run/runner"
	"github.com/fencelab/fencelab/server/servertest"
)

// The tests of this file's neighbours play one run's whole life through
// the package's own API, with no HTTP: a world of their own (a
// supervisor of real worker processes, a receiver, the listener), a pair
// of schemas of their own in the test binary's Postgres, and every event
// the run emits kept in order, as a session's log would keep it.

// lab is one test's world and the run it plays.
type lab struct {
	t       *testing.T
	w       *check.World
	ev      *events
	run     *runner.Run
	schemas judge.Schemas
}

// newLab opens a world of the test's own; lim sets its limits. At the end
// of the test it checks that no worker process outlived the run.
func newLab(t *testing.T, lim runner.Limits) *lab {
	t.Helper()
	w, err := check.OpenWorld(context.Background(), pgtest.Pool(t), pgtest.DSN(t), servertest.Binary(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Env.Limits = lim
	l := &lab{t: t, w: w, ev: &events{changed: make(chan struct{})}}
	t.Cleanup(func() {
		noWorkerLeft(t, w)
		w.Close()
	})
	return l
}

// open starts a run of cfg in mode, and fails the test if it cannot.
func (l *lab) open(cfg experiments.RunConfig, mode protocol.Mode, pace time.Duration) *runner.Run {
	l.t.Helper()
	r, err := l.tryOpen(cfg, mode, pace)
	if err != nil {
		l.t.Fatalf("open %s: %v", cfg.Ordering, err)
	}
	return r
}

func (l *lab) tryOpen(cfg experiments.RunConfig, mode protocol.Mode, pace time.Duration) (*runner.Run, error) {
	l.schemas = judge.Schemas{Jobs: pgtest.Schema(l.t), Receiver: pgtest.Schema(l.t)}
	spec := runner.Spec{ID: "run-" + strings.ToLower(strings.ReplaceAll(l.t.Name(), "/", "-")), Config: cfg, Mode: mode, Pace: pace,
		Schemas: l.schemas, EmitFunc: l.ev.add}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := runner.Open(ctx, &l.w.Env, spec)
	if r != nil {
		l.run = r
		l.t.Cleanup(r.Close) // before the schemas are dropped: cleanups run last first
	}
	return r, err
}

// noWorkerLeft waits, a while at most, until the world's supervisor holds
// no worker process.
func noWorkerLeft(t *testing.T, w *check.World) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(w.Env.Supervisor.Procs()) > 0 {
		if time.Now().After(deadline) {
			t.Errorf("%d worker processes outlived their run", len(w.Env.Supervisor.Procs()))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// events keeps every event a run emits, in order.
type events struct {
	mu      sync.Mutex
	all     []protocol.Event
	changed chan struct{} // closed and replaced on every event
}

func (e *events) add(ev protocol.Event) {
	e.mu.Lock()
	ev.Seq = int64(len(e.all) + 1) // numbered as a session's log numbers them
	e.all = append(e.all, ev)
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

// list returns a copy of the events so far.
func (e *events) list() []protocol.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]protocol.Event(nil), e.all...)
}

// filter returns the events so far that match.
func (e *events) filter(match func(protocol.Event) bool) []protocol.Event {
	var out []protocol.Event
	for _, ev := range e.list() {
		if match(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// await waits until an event matches, and returns the first that does.
func (e *events) await(t *testing.T, what string, timeout time.Duration, match func(protocol.Event) bool) protocol.Event {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		e.mu.Lock()
		for _, ev := range e.all {
			if match(ev) {
				e.mu.Unlock()
				return ev
			}
		}
		ch := e.changed
		e.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("no event %s within %v; the run told:\n%s", what, timeout, e.dump())
		}
	}
}

// dump is the events so far, one line each, for a failure's message.
func (e *events) dump() string {
	var b strings.Builder
	for _, ev := range e.list() {
		fmt.Fprintf(&b, "  %3d %s %-8s %-10s %s\n", ev.Seq, ev.At.Format("15:04:05.000"), ev.Actor, ev.Kind, ev.Text)
	}
	return b.String()
}

// Matchers of events.

func isLease(change protocol.LeaseChange) func(protocol.Event) bool {
	return func(e protocol.Event) bool { return e.Lease != nil && e.Lease.Change == change }
}

func isProcess(label string, change protocol.ProcessChange) func(protocol.Event) bool {
	return func(e protocol.Event) bool {
		return e.Process != nil && e.Actor == label && e.Process.Change == change
	}
}

func isVerdict(e protocol.Event) bool { return e.Verdict != nil }

// indexOf returns the index of the first event of evs that matches, or -1.
func indexOf(evs []protocol.Event, match func(protocol.Event) bool) int {
	for i, e := range evs {
		if match(e) {
			return i
		}
	}
	return -1
}

// eventually polls cond until it holds, or fails the test after timeout.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkSchema validates every event the run told against the protocol's
// JSON Schema, as every front end receives them.
func (l *lab) checkSchema() {
	l.t.Helper()
	labtest.Events(l.t, l.ev.list())
}

// outcomeWant is what a scripted run's outcome must show: the article's
// cells, and the final row and receiver.
type outcomeWant struct {
	safe         bool
	call, commit experiments.Call
	epoch        int64
	resultFrom   string
	receiverFrom string
	receiverEp   int64
}

// checkOutcome checks a scripted run's outcome against want.
func checkOutcome(t *testing.T, o *protocol.Outcome, want outcomeWant) {
	t.Helper()
	if o == nil {
		t.Fatal("the run has no outcome")
	}
	got := outcomeWant{safe: o.Safe, call: o.ZombieReceiverCall, commit: o.ZombieCommit, epoch: o.Final.Epoch,
		resultFrom: o.Final.ResultFrom, receiverFrom: o.Receiver.PayloadFrom, receiverEp: o.Receiver.Epoch}
	if got != want {
		t.Errorf("outcome:\n got %+v\nwant %+v\nverdict: %s", got, want, o.Verdict)
	}
}
