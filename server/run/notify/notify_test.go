package notify_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/notify"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// got collects one subscriber's payloads and resumes.
type got struct {
	mu       sync.Mutex
	payloads []string
	resumes  int
	changed  chan struct{}
}

func newGot() *got { return &got{changed: make(chan struct{}, 1)} }

func (g *got) fn(p string) {
	g.mu.Lock()
	g.payloads = append(g.payloads, p)
	g.mu.Unlock()
	g.poke()
}

func (g *got) resumed() {
	g.mu.Lock()
	g.resumes++
	g.mu.Unlock()
	g.poke()
}

func (g *got) poke() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// wait waits until cond holds of what was got.
func (g *got) wait(t *testing.T, what string, cond func(payloads []string, resumes int) bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		g.mu.Lock()
		ok := cond(g.payloads, g.resumes)
		ps, rs := append([]string(nil), g.payloads...), g.resumes
		g.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-g.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%s: not within 20s (payloads %v, resumes %d)", what, ps, rs)
		}
	}
}

func notifyOn(t *testing.T, channel, payload string) {
	t.Helper()
	if _, err := pgtest.Pool(t).Exec(context.Background(), "SELECT pg_notify($1, $2)", channel, payload); err != nil {
		t.Fatal(err)
	}
}

// newNotifier returns a notifier whose connections carry an
// application_name of their own, which it also returns.
func newNotifier(t *testing.T) (*notify.Notifier, string) {
	dsn := pgtest.DSN(t)
	app := fmt.Sprintf("fl-notify-%d", time.Now().UnixNano())
	n := notify.New(notify.Connector(dsn, app), nil)
	t.Cleanup(n.Close)
	return n, app
}

// TestNotifier_ManyChannelsOneConnection: each subscriber gets its own
// channel's notifications, in order, from the moment Listen returns, over
// one connection; after Close it gets nothing more.
func TestNotifier_ManyChannelsOneConnection(t *testing.T) {
	n, app := newNotifier(t)
	ctx := context.Background()
	subs := map[string]*got{}
	var closers []*notify.Sub
	for i := range 5 {
		ch := fmt.Sprintf("t_notify_%d_%d", time.Now().UnixNano(), i)
		g := newGot()
		s, err := n.Listen(ctx, ch, g.fn, g.resumed)
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, s)
		subs[ch] = g
		notifyOn(t, ch, "first") // right after Listen returns: not missed
	}
	for ch := range subs {
		for i := range 20 {
			notifyOn(t, ch, fmt.Sprint(i))
		}
	}
	for ch, g := range subs {
		g.wait(t, ch, func(ps []string, _ int) bool { return len(ps) == 21 })
		if g.payloads[0] != "first" || g.payloads[20] != "19" {
			t.Fatalf("%s got %v", ch, g.payloads)
		}
	}
	var conns int
	if err := pgtest.Pool(t).QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&conns); err != nil {
		t.Fatal(err)
	}
	if conns != 1 {
		t.Fatalf("%d listening connections for 5 channels, want 1", conns)
	}
	for _, s := range closers {
		s.Close()
	}
	for ch := range subs {
		notifyOn(t, ch, "after close")
	}
	time.Sleep(200 * time.Millisecond) // waiting for something NOT to happen
	for ch, g := range subs {
		g.mu.Lock()
		if len(g.payloads) != 21 {
			t.Errorf("%s got %d payloads after Close", ch, len(g.payloads)-21)
		}
		g.mu.Unlock()
	}
}

// TestNotifier_ResumesAfterTheConnectionIsKilled: when Postgres ends the
// listening connection, the notifier connects again, LISTENs again, tells
// each subscriber it resumed, and delivers what is notified after.
func TestNotifier_ResumesAfterTheConnectionIsKilled(t *testing.T) {
	n, app := newNotifier(t)
	ctx := context.Background()
	ch := fmt.Sprintf("t_notify_kill_%d", time.Now().UnixNano())
	g := newGot()
	s, err := n.Listen(ctx, ch, g.fn, g.resumed)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	notifyOn(t, ch, "before")
	g.wait(t, "before", func(ps []string, _ int) bool { return len(ps) == 1 })
	var killed int
	if err := pgtest.Pool(t).QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
		app).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminated %d listening connections: %v", killed, err)
	}
	g.wait(t, "a resume", func(_ []string, rs int) bool { return rs >= 1 })
	notifyOn(t, ch, "after")
	g.wait(t, "after", func(ps []string, _ int) bool { return len(ps) == 2 && ps[1] == "after" })
	if !n.Connected() {
		t.Fatal("the notifier says it is not connected")
	}
}

// TestNotifier_ASlowSubscriberIsToldToCatchUp: a subscriber that cannot
// keep up loses notifications and is told so (resumed), without holding
// up another subscriber.
func TestNotifier_ASlowSubscriberIsToldToCatchUp(t *testing.T) {
	n, _ := newNotifier(t)
	ctx := context.Background()
	slowCh := fmt.Sprintf("t_notify_slow_%d", time.Now().UnixNano())
	fastCh := slowCh + "_fast"
	release := make(chan struct{})
	slow := newGot()
	s1, err := n.Listen(ctx, slowCh, func(p string) { <-release; slow.fn(p) }, slow.resumed)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	fast := newGot()
	s2, err := n.Listen(ctx, fastCh, fast.fn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	// One batch of notifications, more than a subscriber's queue holds.
	if _, err := pgtest.Pool(t).Exec(ctx, "SELECT pg_notify($1, g::text) FROM generate_series(1, 5000) g", slowCh); err != nil {
		t.Fatal(err)
	}
	notifyOn(t, fastCh, "fast")
	fast.wait(t, "the fast subscriber", func(ps []string, _ int) bool { return len(ps) == 1 })
	close(release)
	slow.wait(t, "the slow subscriber's resume", func(_ []string, rs int) bool { return rs >= 1 })
}
