package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/server/api"
)

// dialFrom opens a session's socket as a client behind the trusted proxy.
func (s *sess) dialFrom(addr string) (*websocket.Conn, *http.Response, error) {
	u := strings.Replace(s.ts.base, "http", "ws", 1) + "/api/sessions/" + s.ID + "/ws?since=0"
	h := http.Header{}
	if addr != "" {
		h.Set("X-Forwarded-For", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
}

// TestSockets_OneAddressHoldsOnlySoMany: an address may hold
// MaxSocketsPerClient sockets at once; one more is refused with a 503 and
// a sentence, before the upgrade. Another address is not touched by it,
// loopback has no cap, and a socket closed gives its place back.
func TestSockets_OneAddressHoldsOnlySoMany(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) {
		c.TrustProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		c.MaxSocketsPerClient = 3
	})
	s := ts.newSession()
	var held []*websocket.Conn
	defer func() {
		for _, c := range held {
			c.CloseNow()
		}
	}()
	for i := range 3 {
		c, _, err := s.dialFrom("203.0.113.7")
		if err != nil {
			t.Fatalf("socket %d of an address with a cap of 3: %v", i+1, err)
		}
		held = append(held, c)
	}
	refusedSocket := func(what string) {
		t.Helper()
		c, resp, err := s.dialFrom("203.0.113.7")
		if err == nil {
			c.CloseNow()
			t.Fatalf("%s: opened, want a 503", what)
		}
		if resp == nil {
			t.Fatalf("%s: %v, with no answer", what, err)
		}
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		var e struct{ Error string }
		_ = json.Unmarshal(buf.Bytes(), &e)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(e.Error, "limit") {
			t.Fatalf("%s: %d %s, want 503 saying the address is at its limit", what, resp.StatusCode, buf.Bytes())
		}
	}
	refusedSocket("a 4th socket")
	refusedSocket("a 5th socket")
	// Another address, and loopback, are not held back by it.
	c, _, err := s.dialFrom("203.0.113.8")
	if err != nil {
		t.Fatalf("another address: %v", err)
	}
	held = append(held, c)
	for i := range 5 {
		c, _, err := s.dialFrom("")
		if err != nil {
			t.Fatalf("loopback socket %d: %v", i+1, err)
		}
		held = append(held, c)
	}
	// A socket closed gives its place back (once the server has seen it go).
	held[0].Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, _, err := s.dialFrom("203.0.113.7")
		if err == nil {
			held = append(held, c)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed socket's place was not given back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	refusedSocket("a 4th socket after one closed and another opened")
}
