package server_test

// Fair to every reader: what one client can take from the others.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server"
	"github.com/fencelab/fencelab/server/sandbox"
)

// from makes a request as the client addr behind a proxy on loopback.
func (ts *testServer) from(addr, method, path, token, body string) answer {
	ts.t.Helper()
	req, err := http.NewRequest(method, ts.base+path, strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	req.Header.Set("X-Forwarded-For", addr)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{Status: resp.StatusCode, Body: b, Header: resp.Header}
}

// sessionFrom makes a session as a client behind the proxy.
func (ts *testServer) sessionFrom(addr string) (*sess, answer) {
	ts.t.Helper()
	a := ts.from(addr, "POST", "/api/sessions", "", "")
	if a.Status != http.StatusCreated {
		return nil, a
	}
	var c struct{ ID, Token string }
	if err := json.Unmarshal(a.Body, &c); err != nil {
		ts.t.Fatal(err)
	}
	return &sess{ts: ts, ID: c.ID, Token: c.Token}, a
}

// TestFairness_PageLoadsCannotLockReadersOut: a server full of sessions
// nobody ever used makes room for a new reader; a session someone watches
// is never the one that makes way.
func TestFairness_PageLoadsCannotLockReadersOut(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *server.Config) { c.Limits.MaxSessions = 10 })
	reader := ts.newSession()
	w, _, err := reader.dial(context.Background(), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.c.CloseNow()
	w.next(t, "live", 5*time.Second)
	for i := range 50 {
		if a := ts.do("POST", "/api/sessions", "", "", ""); a.Status != http.StatusCreated {
			t.Fatalf("session %d of a full server: %d %s", i, a.Status, a.Body)
		}
		if a := ts.do("GET", "/", "", "", ""); a.Status != http.StatusOK && a.Status != http.StatusNotFound {
			t.Fatalf("a page load on a full server: %d", a.Status)
		}
	}
	if n := ts.Sessions.Count(); n > 10 {
		t.Fatalf("%d sessions, over the limit of 10", n)
	}
	if a := ts.do("GET", "/api/sessions/"+reader.ID, "", "", ""); a.Status != http.StatusOK {
		t.Fatalf("the watched reader's session made way: %d", a.Status)
	}
	reader.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
}

// TestFairness_CapsPerClient: behind a trusted proxy, one address has at
// most its share of sessions and of runs at once, and another address is
// not held back by it; from an untrusted peer the forwarded header counts
// for nothing.
func TestFairness_CapsPerClient(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *server.Config) {
		c.TrustProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		c.Limits.MaxSessionsPerClient = 3
		c.Limits.MaxRunsPerClient = 2
	})
	const greedy, other = "203.0.113.7", "198.51.100.9"
	var mine []*sess
	for range 3 {
		s, a := ts.sessionFrom(greedy)
		if s == nil {
			t.Fatalf("a session for %s: %d %s", greedy, a.Status, a.Body)
		}
		mine = append(mine, s)
	}
	// Two runs at once for one address, not three.
	for i, s := range mine {
		a := ts.from(greedy, "POST", "/api/sessions/"+s.ID+"/commands", s.Token, `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
		switch {
		case i < 2 && a.Status != http.StatusOK:
			t.Fatalf("run %d of %s: %d %s", i, greedy, a.Status, a.Body)
		case i == 2 && (a.Status != http.StatusServiceUnavailable || !strings.Contains(string(a.Body), "this address is running 2 runs")):
			t.Fatalf("the third run at once of %s: %d %s", greedy, a.Status, a.Body)
		}
	}
	o, a := ts.sessionFrom(other)
	if o == nil {
		t.Fatalf("another address is held back: %d %s", a.Status, a.Body)
	}
	if a := ts.from(other, "POST", "/api/sessions/"+o.ID+"/commands", o.Token, `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`); a.Status != http.StatusOK {
		t.Fatalf("another address's run: %d %s", a.Status, a.Body)
	}
	// A fourth session of the greedy address makes the oldest unwatched one
	// of its own make way; with all three watched it is refused.
	if s, a := ts.sessionFrom(greedy); s == nil {
		t.Fatalf("a fourth session of %s: %d %s", greedy, a.Status, a.Body)
	}
	if a := ts.do("GET", "/api/sessions/"+mine[0].ID, "", "", ""); a.Status != http.StatusNotFound {
		t.Fatalf("the oldest unwatched session of %s is still there: %d", greedy, a.Status)
	}
	var watched []*sess
	for range 3 {
		s, _ := ts.sessionFrom(greedy)
		if s == nil {
			break
		}
		c, _, err := s.dial(context.Background(), 0, "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.c.CloseNow()
		c.next(t, "live", 5*time.Second)
		watched = append(watched, s)
	}
	if len(watched) != 3 {
		t.Fatalf("%d watched sessions of %s, want 3", len(watched), greedy)
	}
	if s, a := ts.sessionFrom(greedy); s != nil || a.Status != http.StatusServiceUnavailable || !strings.Contains(string(a.Body), "this address has 3 sessions") {
		t.Fatalf("a session beyond the cap, all of them watched: %d %s", a.Status, a.Body)
	}
	// A forged header from a peer that is not a trusted proxy counts for
	// nothing: the direct peer is counted (here loopback: no caps).
	plain := startServer(t, func(c *server.Config) { c.Limits.MaxSessionsPerClient = 1 })
	for range 3 {
		if s, a := plain.sessionFrom(greedy); s == nil {
			t.Fatalf("a session from loopback: %d %s", a.Status, a.Body)
		}
	}
	if n := plain.Sessions.Count(); n != 3 {
		t.Fatalf("X-Forwarded-For from an untrusted peer was believed: %d sessions left of 3 (a cap of 1 per client)", n)
	}
}

// Free play's workers count against their address: one address's runs
// together hold at most MaxWorkersPerClient worker processes, and
// another address still gets its own; killing one gives its slot back.
func TestFairness_WorkersPerClient(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *server.Config) {
		c.TrustProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		c.Limits.MaxWorkersPerClient = 5
	})
	const greedy, other = "203.0.113.8", "198.51.100.10"
	cmd := func(addr string, s *sess, body string) answer {
		return ts.from(addr, "POST", "/api/sessions/"+s.ID+"/commands", s.Token, body)
	}
	g, a := ts.sessionFrom(greedy)
	if g == nil {
		t.Fatalf("a session: %d %s", a.Status, a.Body)
	}
	if a := cmd(greedy, g, `{"action":"run","ordering":"free-play","lease_ms":400}`); a.Status != http.StatusOK {
		t.Fatalf("free play: %d %s", a.Status, a.Body)
	}
	for i := range 3 {
		if a := cmd(greedy, g, `{"action":"add_worker"}`); a.Status != http.StatusOK {
			t.Fatalf("worker %d of 5: %d %s", i+3, a.Status, a.Body)
		}
	}
	a = cmd(greedy, g, `{"action":"add_worker"}`)
	if a.Status != http.StatusServiceUnavailable || !strings.Contains(string(a.Body), "5 worker processes here") {
		t.Fatalf("a sixth worker of one address: %d %s", a.Status, a.Body)
	}
	o, _ := ts.sessionFrom(other)
	if a := cmd(other, o, `{"action":"run","ordering":"free-play","lease_ms":400}`); a.Status != http.StatusOK {
		t.Fatalf("another address's free play: %d %s", a.Status, a.Body)
	}
	if a := cmd(greedy, g, `{"action":"kill_worker","worker":"A"}`); a.Status != http.StatusOK {
		t.Fatalf("kill: %d %s", a.Status, a.Body)
	}
	waitFor(t, 10*time.Second, "the killed worker's slot given back", func() bool {
		return cmd(greedy, g, `{"action":"add_worker"}`).Status == http.StatusOK
	})
}

// TestFairness_ACheckTakesItsCapsBeforeAnyWork: an address's cap of
// checks is taken before their statements are checked (schemas, a role, a
// trial run): from an address at its cap, a check whose statements do not
// even prepare is refused as busy, where checking them first made it a 400
// that named them; the address's own check, replacing its last, and
// another address are not held back.
func TestFairness_ACheckTakesItsCapsBeforeAnyWork(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *server.Config) {
		c.TrustProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		c.Limits.MaxBatchesPerClient = 1
	})
	const addr, other = "203.0.113.7", "198.51.100.9"
	first, a := ts.sessionFrom(addr)
	if first == nil {
		t.Fatalf("a session: %d %s", a.Status, a.Body)
	}
	second, a := ts.sessionFrom(addr)
	if second == nil {
		t.Fatalf("a session: %d %s", a.Status, a.Body)
	}
	path := func(s *sess) string { return "/api/sessions/" + s.ID + "/commands" }
	long := `{"action":"check","lease_ms":5000,"solution":` + mustJSON(t, sandbox.Ours()) + `}`
	if a := ts.from(addr, "POST", path(first), first.Token, long); a.Status != http.StatusOK {
		t.Fatalf("the first check: %d %s", a.Status, a.Body)
	}
	broken := sandbox.Ours()
	broken.Claim = "UPDATE jobs SET owner = :owner WHERE"
	bad := `{"action":"check","solution":` + mustJSON(t, broken) + `}`
	a = ts.from(addr, "POST", path(second), second.Token, bad)
	if a.Status != http.StatusTooManyRequests && a.Status != http.StatusServiceUnavailable {
		t.Fatalf("a second check from an address at its cap: %d %s, want busy before its statements are checked", a.Status, a.Body)
	}
	// The first session's own new check replaces its last: it is checked,
	// and refused for its statements.
	if a := ts.from(addr, "POST", path(first), first.Token, bad); a.Status != http.StatusBadRequest {
		t.Fatalf("the address's check replacing its own: %d %s, want its statements refused (400)", a.Status, a.Body)
	}
	o, a := ts.sessionFrom(other)
	if o == nil {
		t.Fatalf("a session: %d %s", a.Status, a.Body)
	}
	if a := ts.from(other, "POST", path(o), o.Token, bad); a.Status != http.StatusBadRequest {
		t.Fatalf("another address's check: %d %s, want its statements refused (400)", a.Status, a.Body)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
