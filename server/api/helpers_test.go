package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/lab/labtest"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/servertest"
	"github.com/fencelab/fencelab/server/session"
)

func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	servertest.Cleanup()
	os.Exit(code)
}

// binary is the fencelab binary the server spawns as its workers.
func binary(tb testing.TB) string { return servertest.Binary(tb) }

// testServer is a real server in this process on 127.0.0.1:0.
type testServer struct {
	*api.Server
	base string
	t    testing.TB
}

func startServer(tb testing.TB, tweak func(*api.Config)) *testServer {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	// Every event the server keeps must be what the protocol's schema says.
	// The tap only keeps a copy (it runs under the log's lock); the events
	// are checked once the server has shut down.
	var tapMu sync.Mutex
	var tapped [][]byte
	cfg := api.Config{Listener: ln, Pool: pgtest.Pool(tb), DatabaseURL: pgtest.DSN(tb), Exe: binary(tb),
		TapFunc: func(b []byte) {
			tapMu.Lock()
			tapped = append(tapped, bytes.Clone(b))
			tapMu.Unlock()
		}}
	if _, bench := tb.(*testing.B); bench {
		cfg.TapFunc = nil // a benchmark measures the server, not the tap
	}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := api.New(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	go srv.Serve()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			tb.Errorf("shutdown: %v", err)
		}
		tapMu.Lock()
		defer tapMu.Unlock()
		bad := 0
		for _, b := range tapped {
			if err := labtest.Validate(b); err != nil {
				if bad++; bad <= 3 {
					tb.Errorf("an event breaks the protocol schema: %v\n%s", err, b)
				}
			}
		}
	})
	return &testServer{Server: srv, base: srv.URL(), t: tb}
}

// call is one HTTP request and its answer.
type answer struct {
	Status int
	Body   []byte
	Header http.Header
}

func (a answer) json(tb testing.TB, v any) {
	tb.Helper()
	if err := json.Unmarshal(a.Body, v); err != nil {
		tb.Fatalf("answer %d is not JSON: %v\n%s", a.Status, err, a.Body)
	}
}

func (a answer) errText() string {
	var e struct{ Error string }
	_ = json.Unmarshal(a.Body, &e)
	return e.Error
}

func (ts *testServer) do(method, path, token, ctype, body string) answer {
	ts.t.Helper()
	h := map[string]string{}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	if ctype != "" {
		h["Content-Type"] = ctype
	}
	return ts.send(method, path, h, body)
}

// send makes one request with the headers a browser (or not) would send.
func (ts *testServer) send(method, path string, header map[string]string, body string) answer {
	ts.t.Helper()
	req, err := http.NewRequest(method, ts.base+path, strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{Status: resp.StatusCode, Body: b, Header: resp.Header}
}

// sess is a session made through the API.
type sess struct {
	ts    *testServer
	ID    string
	Token string
}

func (ts *testServer) newSession() *sess {
	ts.t.Helper()
	a := ts.do("POST", "/api/sessions", "", "", "")
	if a.Status != http.StatusCreated {
		ts.t.Fatalf("create session: %d %s", a.Status, a.Body)
	}
	var c struct{ ID, Token string }
	a.json(ts.t, &c)
	return &sess{ts: ts, ID: c.ID, Token: c.Token}
}

// cmd sends a command as the driver; it fails the test unless it is 200.
func (s *sess) cmd(body string) session.Result {
	s.ts.t.Helper()
	a := s.ts.do("POST", "/api/sessions/"+s.ID+"/commands", s.Token, "application/json", body)
	if a.Status != http.StatusOK {
		s.ts.t.Fatalf("command %s: %d %s", body, a.Status, a.Body)
	}
	var r session.Result
	a.json(s.ts.t, &r)
	return r
}

func (s *sess) try(body string) answer {
	return s.ts.do("POST", "/api/sessions/"+s.ID+"/commands", s.Token, "application/json", body)
}

// tryAtOnce sends the same command n times at once and returns each
// answer's status, in the order they were sent.
func (s *sess) tryAtOnce(n int, body string) []int {
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = s.try(body).Status
		}()
	}
	wg.Wait()
	return codes
}

func (s *sess) snapshot() session.Snapshot {
	s.ts.t.Helper()
	a := s.ts.do("GET", "/api/sessions/"+s.ID, s.Token, "", "")
	if a.Status != http.StatusOK {
		s.ts.t.Fatalf("snapshot: %d %s", a.Status, a.Body)
	}
	var snap session.Snapshot
	a.json(s.ts.t, &snap)
	return snap
}

func (s *sess) events(since int64, run string) []protocol.Event {
	s.ts.t.Helper()
	a := s.ts.do("GET", fmt.Sprintf("/api/sessions/%s/events?since=%d&run=%s&limit=10000", s.ID, since, run), "", "", "")
	if a.Status != http.StatusOK {
		s.ts.t.Fatalf("events: %d %s", a.Status, a.Body)
	}
	var p struct{ Events []protocol.Event }
	a.json(s.ts.t, &p)
	return p.Events
}

// waitEvent polls the log until an event matches, and returns it.
func (s *sess) waitEvent(timeout time.Duration, what string, match func(protocol.Event) bool) protocol.Event {
	s.ts.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, e := range s.events(0, "") {
			if match(e) {
				return e
			}
		}
		time.Sleep(30 * time.Millisecond)
	}
	s.ts.t.Fatalf("no event %s after %v", what, timeout)
	return protocol.Event{}
}

// verdictOf waits for a run's verdict and decodes its outcome.
func (s *sess) verdictOf(run string, timeout time.Duration) protocol.Outcome {
	s.ts.t.Helper()
	e := s.waitEvent(timeout, "verdict of "+run, func(e protocol.Event) bool { return e.Kind == protocol.KindVerdict && e.Run == run })
	if e.Verdict == nil || e.Verdict.Outcome == nil {
		s.ts.t.Fatalf("verdict of %s carries no outcome: %+v", run, e)
	}
	return *e.Verdict.Outcome
}

// wsClient is a WebSocket client of a session.
type wsClient struct {
	c      *websocket.Conn
	frames chan map[string]json.RawMessage
	closed chan error
}

func (s *sess) dial(ctx context.Context, since int64, token string) (*wsClient, *http.Response, error) {
	u := strings.Replace(s.ts.base, "http", "ws", 1) + fmt.Sprintf("/api/sessions/%s/ws?since=%d", s.ID, since)
	if token != "" {
		u += "&token=" + token
	}
	c, resp, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		return nil, resp, err
	}
	c.SetReadLimit(1 << 20)
	w := &wsClient{c: c, frames: make(chan map[string]json.RawMessage, 1<<16), closed: make(chan error, 1)}
	go func() {
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				w.closed <- err
				close(w.frames)
				return
			}
			var m map[string]json.RawMessage
			_ = json.Unmarshal(b, &m)
			if m != nil {
				m["_recv"], _ = json.Marshal(time.Now()) // when it was read, for latency
			}
			w.frames <- m
		}
	}()
	return w, resp, nil
}

func typeOf(m map[string]json.RawMessage) string {
	var t string
	_ = json.Unmarshal(m["type"], &t)
	return t
}

func eventOf(m map[string]json.RawMessage) protocol.Event {
	var e protocol.Event
	_ = json.Unmarshal(m["event"], &e)
	return e
}

// next returns the next frame of a type, or fails after timeout.
func (w *wsClient) next(tb testing.TB, typ string, timeout time.Duration) map[string]json.RawMessage {
	tb.Helper()
	t := time.After(timeout)
	for {
		select {
		case m, ok := <-w.frames:
			if !ok {
				tb.Fatalf("socket closed while waiting for %q", typ)
			}
			if typeOf(m) == typ {
				return m
			}
		case <-t:
			tb.Fatalf("no %q frame after %v", typ, timeout)
		}
	}
}

func (w *wsClient) send(tb testing.TB, v any) {
	tb.Helper()
	b, _ := json.Marshal(v)
	if err := w.c.Write(context.Background(), websocket.MessageText, b); err != nil {
		tb.Fatalf("send: %v", err)
	}
}

// closeStatus waits for the socket to be closed by the server.
func (w *wsClient) closeStatus(tb testing.TB, timeout time.Duration) websocket.StatusCode {
	tb.Helper()
	for {
		select {
		case _, ok := <-w.frames:
			if !ok {
				return websocket.CloseStatus(<-w.closed)
			}
		case <-time.After(timeout):
			tb.Fatalf("the server did not close the socket within %v", timeout)
		}
	}
}
