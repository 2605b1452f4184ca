package crowd

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/sandbox/sandboxtest"
	"github.com/fencelab/fencelab/server/servertest"
	"github.com/fencelab/fencelab/server/tick"
)

// rssBudget is the most memory a fencelab serve may hold at its peak
// (VmHWM) through a crowd of 100 readers, a class of 30 and a hostile
// reader: REFERENCE's "A public demo" states it.
const rssBudget = 400 << 20

// hostileFor is how long the hostile reader of TestBudget plays: a
// minute in the suite; an hour by hand,
// go test ./cmd/internal/crowd -run TestBudget -v -hostile-for 1h -timeout 90m.
var hostileFor = flag.Duration("hostile-for", time.Minute, "how long TestBudget's hostile reader plays")

// TestBudget_TheServersMemoryThroughACrowdAClassAndAHostileReader: a
// fencelab serve as it starts with no flags but its address (its own
// private cluster, spare schemas, prestarted workers), through a crowd of
// 100 readers, then a class of 30 students checking at once, then a
// hostile reader (sockets it never reads, checks whose values are just
// under their cap, bodies over theirs, junk, wrong class codes, session
// churn), keeps its peak resident set under rssBudget.
func TestBudget_TheServersMemoryThroughACrowdAClassAndAHostileReader(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the peak resident set is read from /proc/<pid>/status (VmHWM)")
	}
	ctx := t.Context()
	m := marker(t)
	logs := &servertest.LogBuffer{}
	lg := log.New(logs, "", 0)
	// DATABASE_URL set empty: a private cluster of its own, under the
	// per-backend limits a server without DATABASE_URL runs. Fewer spare
	// pairs than its default 120, which it would make on a busy CI machine
	// for minutes: they are Postgres's work, not the server's memory. The
	// 240 prestarted workers the issue measured (the default where memory
	// allows), whose output the server reads line by line.
	c, err := startServe(ctx, servertest.Binary(t), []string{"DATABASE_URL=", m}, []string{"--spare-runs=20", "--prestarted-workers=240", "--log-level=warn"}, lg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.stop(); err != nil {
			t.Errorf("the server did not stop cleanly: %v\n%s", err, logs.String())
		}
		gone(t, m, c.pid)
	}()
	base := c.url.String()
	t.Logf("at start: %s", memOf(t, c.pid))

	rep, err := Run(ctx, Config{Readers: 100, Pace: DefaultPace, Server: Server{URL: base, Log: lg}})
	if err != nil {
		t.Fatalf("the crowd: %v", err)
	}
	logReport(t, rep)
	if rep.OK == 0 {
		t.Fatalf("no reader of the crowd got a verdict: %+v", rep.ErrorMessages)
	}
	t.Logf("after the crowd: %s", memOf(t, c.pid))

	crep, err := RunClass(ctx, ClassConfig{Students: 30, Server: Server{URL: base, Log: lg}})
	if err != nil {
		t.Fatalf("the class: %v", err)
	}
	if crep.OK == 0 {
		t.Fatalf("no student of the class got a report: %+v", crep)
	}
	t.Logf("after the class of 30 (%d ok, %d wrong, %d missing, %d busy, %d errors): %s", crep.OK, crep.WrongVerdicts, crep.Missing, crep.Busy, crep.Errors, memOf(t, c.pid))

	h := &hostile{t: t, base: base, pid: c.pid, client: &http.Client{Timeout: 30 * time.Second}}
	h.play(ctx, *hostileFor)
	t.Logf("after %v of a hostile reader: %s", *hostileFor, memOf(t, c.pid))
	h.leave()
	t.Logf("what it sent, by answer: %s", h.tally())

	if peak := hwm(t, c.pid); peak > rssBudget {
		t.Errorf("the server's peak resident set was %d MiB, over its %d MiB budget\n%s", peak>>20, rssBudget>>20, logs.String())
	}
}

// memOf says the server's resident set now and at its peak.
func memOf(t *testing.T, pid int) string {
	return fmt.Sprintf("RSS %d MiB, peak %d MiB", statusKB(t, pid, "VmRSS:")>>10, hwm(t, pid)>>20)
}

// hwm is the process's peak resident set, in bytes: the kernel's own
// high-water mark, which no sampling of /api/stats (the crowd's peaks)
// can miss between two samples.
func hwm(t *testing.T, pid int) int64 { return statusKB(t, pid, "VmHWM:") << 10 }

// statusKB reads one kB field of /proc/<pid>/status.
func statusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("the server's status: %v", err)
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s %q: %v", field, v, err)
			}
			return kb
		}
	}
	t.Fatalf("no %s in the server's status", field)
	return 0
}

// hostile is one reader who does what a reader should not, from one
// address (loopback: no per-address caps, the worst case), at once on
// several fronts.
type hostile struct {
	t      *testing.T
	base   string
	pid    int // the server's, whose memory it reports as it plays
	client *http.Client
	counts sync.Map // what → *atomic.Int64, by answer

	mu       sync.Mutex
	sessions [][2]string // id and token of each session it made
}

func (h *hostile) count(what string) {
	v, _ := h.counts.LoadOrStore(what, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (h *hostile) tally() string {
	var parts []string
	h.counts.Range(func(k, v any) bool {
		parts = append(parts, fmt.Sprintf("%s %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	return strings.Join(parts, ", ")
}

// do sends one request and counts its answer under what and its status.
func (h *hostile) do(ctx context.Context, what, method, path, token string, body []byte) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, bytes.NewReader(body))
	if err != nil { // from a front's goroutine: no Fatal there
		h.t.Errorf("%s: %v", what, err)
		return 0, nil
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			h.count(what + " error")
		}
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	h.count(fmt.Sprintf("%s %d", what, resp.StatusCode))
	if resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable {
		h.t.Errorf("%s: %d %.200s", what, resp.StatusCode, b)
	}
	return resp.StatusCode, b
}

// session makes a session: its id and token, or "" when refused.
func (h *hostile) session(ctx context.Context) (id, token string) {
	st, b := h.do(ctx, "session", "POST", "/api/sessions", "", nil)
	if st != http.StatusCreated {
		return "", ""
	}
	var s struct{ ID, Token string }
	_ = json.Unmarshal(b, &s)
	h.mu.Lock()
	h.sessions = append(h.sessions, [2]string{s.ID, s.Token})
	h.mu.Unlock()
	return s.ID, s.Token
}

// leave ends the sessions the reader made that are still there, as a
// reader who closes their tabs does. The server's stop with hundreds of
// sessions and their runs on a loaded machine is the class's stop test's
// (it took over 10 s beside two busy loops, the bound REFERENCE states).
func (h *hostile) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h.mu.Lock()
	all := h.sessions
	h.mu.Unlock()
	for _, s := range all {
		h.do(ctx, "leave", "DELETE", "/api/sessions/"+s[0], s[1], nil)
	}
}

// play plays every front until d has passed, and waits for them.
func (h *hostile) play(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for range 30 {
		wg.Go(func() { h.unreadSocket(ctx) })
	}
	for range 2 {
		wg.Go(func() { h.bigValues(ctx) })
	}
	wg.Go(func() { h.junk(ctx) })
	wg.Go(func() { h.churn(ctx) })
	wg.Go(func() { h.report(ctx, d) })
	wg.Wait()
}

// report logs the server's memory six times as the hostile reader plays,
// so that a long play shows whether it grows or stays.
func (h *hostile) report(ctx context.Context, d time.Duration) {
	start := time.Now()
	tick.Every(ctx, d/6, func() bool {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/status", h.pid)); err != nil { // no Fatal from this goroutine
			h.t.Errorf("the server is gone while the hostile reader plays: %v", err)
			return false
		}
		h.t.Logf("%v into the hostile reader: %s; answers so far: %s", time.Since(start).Round(time.Second), memOf(h.t, h.pid), h.tally())
		return true
	})
}

// loop calls f until ctx ends.
func loop(ctx context.Context, f func()) {
	for ctx.Err() == nil {
		f()
	}
}

// unreadSocket opens a session's socket it never reads, and starts run
// after run in it, so that its events pile up for a reader who is not
// there.
func (h *hostile) unreadSocket(ctx context.Context) {
	id, token := h.session(ctx)
	if id == "" {
		return
	}
	u := strings.Replace(h.base, "http", "ws", 1) + "/api/sessions/" + id + "/ws?since=0&token=" + token
	c, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		if ctx.Err() == nil {
			h.count("socket refused")
		}
		return
	}
	defer c.CloseNow()
	run := []byte(`{"action":"run","ordering":"zombie-first","mode":"auto","lease_ms":300}`)
	loop(ctx, func() {
		if st, _ := h.do(ctx, "run", "POST", "/api/sessions/"+id+"/commands", token, run); st != http.StatusOK {
			sleep(ctx, 200*time.Millisecond)
		}
	})
}

// bigValues sends checks whose claim returns an owner of 2 MiB (over the
// value cap: refused at their trial) and of 4 KiB (under it, so that every
// event of their runs is as big as it may be), and reads each session's
// whole log back.
func (h *hostile) bigValues(ctx context.Context) {
	checkOf := func(doublings int) []byte {
		sol := sandbox.Start()
		sol.Claim = sandboxtest.BigOwnerClaim(doublings)
		cmd, _ := json.Marshal(map[string]any{"action": "check", "solution": sol}) // strings alone: it cannot fail
		return cmd
	}
	checks := []struct {
		what string
		cmd  []byte
	}{{"check of 2 MiB values", checkOf(21)}, {"check of 4 KiB values", checkOf(12)}}
	n := 0
	loop(ctx, func() {
		id, token := h.session(ctx)
		if id == "" {
			sleep(ctx, time.Second)
			return
		}
		c := checks[n%len(checks)]
		n++
		h.do(ctx, c.what, "POST", "/api/sessions/"+id+"/commands", token, c.cmd)
		sleep(ctx, 5*time.Second)
		h.do(ctx, "its events.ndjson", "GET", "/api/sessions/"+id+"/events.ndjson", "", nil)
	})
}

// junk sends what no page sends: bodies over their cap, NULs and lone
// surrogates, numbers that overflow, wrong class codes.
func (h *hostile) junk(ctx context.Context) {
	huge := append([]byte(`{"action":"run","ordering":"`), bytes.Repeat([]byte("z"), 8<<20)...)
	huge = append(huge, `"}`...)
	bad := [][]byte{
		huge,
		[]byte("{\"action\":\"run\",\"ordering\":\"zombie-first\\u0000\"}"),
		[]byte(`{"action":"run","ordering":"\ud800"}`),
		[]byte(`{"action":"run","lease_ms":99999999999999999999999}`),
		[]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`),
	}
	id, token := h.session(ctx)
	n := 0
	loop(ctx, func() {
		n++
		for _, b := range bad {
			h.do(ctx, "junk", "POST", "/api/sessions/"+id+"/commands", token, b)
		}
		const alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789" // a code's letters, so each is a guess
		guess := []byte("AAAAAA")
		for i, k := 0, n; i < len(guess); i, k = i+1, k/len(alphabet) {
			guess[i] = alphabet[k%len(alphabet)]
		}
		code := fmt.Sprintf(`{"code":"%s","name":"Mallory %d"}`, guess, n)
		h.do(ctx, "wrong code", "POST", "/api/classes/join", "", []byte(code))
	})
}

// churn makes sessions, ends every other one and leaves the rest, to the
// server's cap and past it.
func (h *hostile) churn(ctx context.Context) {
	n := 0
	loop(ctx, func() {
		n++
		if id, token := h.session(ctx); id != "" && n%2 == 0 {
			h.do(ctx, "delete", "DELETE", "/api/sessions/"+id, token, nil)
		}
	})
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
