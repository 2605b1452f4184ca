package e2etest

// The server under test is a real `fencelab serve` process of the binary
// users run, not an in-process handler, so that the browser sees what ships:
// its start-up, its workers and its graceful shutdown included. The test's
// cleanup stops it only after the test's tabs are closed (see the top of
// e2etest.go), and fails the test if it leaves a process behind.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/labtest"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/child"
)

// LockedBuffer is a strings.Builder safe for concurrent writers.
type LockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *LockedBuffer) WriteString(s string) {
	b.mu.Lock()
	b.b.WriteString(s)
	b.mu.Unlock()
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Server is one `fencelab serve` process, started by startServer.
type Server struct {
	// URL is the base URL, without a trailing slash: http://127.0.0.1:PORT.
	URL string

	t  *testing.T
	st *serverState
}

// serverState is shared by a Server and its WithT copies.
type serverState struct {
	cmd     *exec.Cmd
	mark    string
	tap     string // the server's event tap
	stdout  LockedBuffer
	stderr  LockedBuffer
	done    chan struct{} // closed once the process has exited and been reaped
	waitErr error         // cmd.Wait's error; read after done
	readers sync.WaitGroup

	stopOnce sync.Once
}

var serverSeq atomic.Int64

var httpClient = &http.Client{Timeout: DefaultTimeout}

// startServer starts `fencelab serve --addr 127.0.0.1:0 --log-level warn`
// with extraArgs and DATABASE_URL set to the test database, waits (≤60s)
// for its "playground at" line and returns it. The test's cleanup stops it
// (SIGTERM, then SIGKILL after 15s) and fails the test if it does not exit
// cleanly or leaves a process (a worker) behind; when the test failed, the
// server's stderr is logged.
//
// To share one server among several cases, start it in the parent test and
// use it from subtests through srv.WithT(t).
func StartServer(t *testing.T, extraArgs ...string) *Server {
	t.Helper()
	bin := Binary(t)
	dsn := pgtest.DSN(t)

	st := &serverState{
		mark: fmt.Sprintf("%s=%s-%d-%d", ServerMarkEnv, Sanitize(t.Name()), serverSeq.Add(1), time.Now().UnixNano()),
		done: make(chan struct{}),
		// Every event the server emits is tapped, and checked against the
		// protocol's schema once the server has stopped.
		tap: filepath.Join(t.TempDir(), "events.ndjson"),
	}
	// A few spare schemas, not a hundred: the tests share the machine.
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--log-level", "warn", "--spare-runs", "2"}, extraArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn, st.mark, labtest.TapEnv+"="+st.tap)
	st.cmd = cmd

	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatalf("e2e: pipe: %v", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatalf("e2e: pipe: %v", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW

	// In a process group of its own, and if this test binary dies, the
	// kernel SIGKILLs the server where it has a parent-death signal
	// (child.Start), and the server's workers die with the server. Where
	// it has none (macOS), a server whose test binary died lives on until
	// it is stopped by hand; its workers still die with it through its
	// watchdog.
	proc, err := child.Start(cmd, child.Options{})
	if err == nil {
		go func() {
			st.waitErr = proc.Wait()
			close(st.done)
		}()
	}
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		t.Fatalf("e2e: start %s %s: %v", bin, strings.Join(args, " "), err)
	}

	ready := make(chan string, 1)
	st.readers.Add(2)
	go st.read(outR, &st.stdout, func(line string) {
		if strings.Contains(line, "playground at ") {
			select {
			case ready <- line:
			default:
			}
		}
	})
	go st.read(errR, &st.stderr, nil)

	s := &Server{t: t, st: st}
	t.Cleanup(func() {
		runTestEnd(t)
		closeTabs(t)
		s.Stop()
		if t.Failed() {
			s.logOutput(t)
		}
	})

	t0 := time.Now()
	select {
	case line := <-ready:
		_, rest, _ := strings.Cut(line, "playground at ")
		s.URL = strings.TrimRight(strings.TrimSpace(rest), "/")
		if u, err := url.Parse(s.URL); err != nil || u.Scheme != "http" || u.Host == "" {
			t.Fatalf("e2e: fencelab serve printed %q: no http URL in it", line)
		}
	case <-st.done:
		st.waitReaders(2 * time.Second)
		t.Fatalf("e2e: fencelab serve exited (%v) before printing its URL; stderr:\n%s", st.waitErr, Indent(st.stderr.String()))
	case <-time.After(60 * time.Second):
		t.Fatalf("e2e: fencelab serve printed no \"playground at\" line within 60s; stderr so far:\n%s", Indent(st.stderr.String()))
	}
	t.Logf("e2e: %s ready at %s in %v", strings.Join(append([]string{"fencelab"}, args...), " "), s.URL, time.Since(t0).Round(time.Millisecond))
	return s
}

// read copies the lines of r into buf, calling onLine for each.
func (st *serverState) read(r *os.File, buf *LockedBuffer, onLine func(string)) {
	defer st.readers.Done()
	defer r.Close()
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			buf.WriteString(line)
			if onLine != nil {
				onLine(strings.TrimRight(line, "\r\n"))
			}
		}
		if err != nil {
			return
		}
	}
}

// waitReaders waits up to timeout for the output readers to reach EOF.
func (st *serverState) waitReaders(timeout time.Duration) {
	done := make(chan struct{})
	go func() { st.readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// WithT returns the same server with failures reported to t: use it from a
// subtest that shares its parent's server.
func (s *Server) WithT(t *testing.T) *Server {
	return &Server{URL: s.URL, t: t, st: s.st}
}

// Stop stops the server: SIGTERM, a wait of up to 15s, then SIGKILL. It
// fails the test if the server had already exited on its own, did not exit
// within 15s or exited with a status other than 0, or if a process it
// started (a worker) is still running 10s later (those are killed). The
// test's cleanup calls it; a test may call it earlier, e.g. to see the page
// go offline. Only the first call does anything.
func (s *Server) Stop() {
	s.t.Helper()
	s.st.stopOnce.Do(func() {
		t0 := time.Now()
		for _, msg := range s.st.stop(s.URL) {
			s.t.Error(msg)
		}
		s.t.Logf("e2e: fencelab serve at %s stopped in %v", s.URL, time.Since(t0).Round(time.Millisecond))
		n := labtest.File(s.t, s.st.tap)
		if Shouting() {
			checkShouted(s.t, s.st.tap)
		}
		s.t.Logf("e2e: %d events of the server match the protocol's schema", n)
	})
}

func (st *serverState) stop(url string) []string {
	var errs []string
	select {
	case <-st.done:
		errs = append(errs, fmt.Sprintf("e2e: fencelab serve at %s exited on its own during the test: %v", url, st.waitErr))
	default:
		_ = st.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-st.done:
			if st.waitErr != nil {
				errs = append(errs, fmt.Sprintf("e2e: fencelab serve at %s exited with %v after SIGTERM, want status 0", url, st.waitErr))
			}
		case <-time.After(15 * time.Second):
			_ = st.cmd.Process.Kill()
			<-st.done
			errs = append(errs, fmt.Sprintf("e2e: fencelab serve at %s did not exit within 15s of SIGTERM; killed it", url))
		}
	}
	if left := WaitMarkedGone(st.mark, 10*time.Second); len(left) > 0 {
		KillMarked(st.mark)
		errs = append(errs, fmt.Sprintf("e2e: processes started by fencelab serve at %s were still running 10s after it exited (killed now):\n  %s",
			url, strings.Join(left, "\n  ")))
	}
	st.waitReaders(5 * time.Second)
	return errs
}

// Stderr returns what the server has written to stderr so far.
func (s *Server) Stderr() string { return s.st.stderr.String() }

func (s *Server) logOutput(t *testing.T) {
	t.Logf("e2e: fencelab serve at %s, stderr:\n%s", s.URL, Indent(s.st.stderr.String()))
	if out := s.st.stdout.String(); strings.Count(out, "\n") > 1 {
		t.Logf("e2e: fencelab serve at %s, stdout:\n%s", s.URL, Indent(out))
	}
}

// Request sends one HTTP request to the server (path is relative to
// s.URL; token, when set, goes in Authorization: Bearer; body, when set,
// is JSON) and returns the status and the body. It fails the test only if
// the request cannot be made.
func (s *Server) Request(method, path, token, body string) (int, []byte) {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		s.t.Fatalf("e2e: %s %s: %v", method, path, err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		s.t.Fatalf("e2e: %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("e2e: %s %s: reading the body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// requestJSON is Request that fails the test unless the status is 2xx and
// the body (if any) is one JSON object, which it returns.
func (s *Server) requestJSON(method, path, token, body string) map[string]any {
	s.t.Helper()
	code, b := s.Request(method, path, token, body)
	if code < 200 || code > 299 {
		s.t.Fatalf("e2e: %s %s %s: HTTP %d: %s", method, path, body, code, strings.TrimSpace(string(b)))
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		s.t.Fatalf("e2e: %s %s: the answer is not a JSON object: %v\n%s", method, path, err, b)
	}
	return m
}

// GetJSON GETs path (e.g. "/api/sessions/ID") and returns the JSON object.
func (s *Server) GetJSON(path string) map[string]any {
	s.t.Helper()
	return s.requestJSON(http.MethodGet, path, "", "")
}

// NewSession creates a session through the JSON API and returns its id and
// control token.
func (s *Server) NewSession() (id, token string) {
	s.t.Helper()
	m := s.requestJSON(http.MethodPost, "/api/sessions", "", "")
	id, _ = m["id"].(string)
	token, _ = m["token"].(string)
	if id == "" || token == "" {
		s.t.Fatalf("e2e: POST /api/sessions: no id and token in %v", m)
	}
	return id, token
}

// Command sends one command (a JSON object such as `{"action":"step"}`) to
// the session as its driver, and returns the answer. It fails the test on
// any status other than 2xx.
func (s *Server) Command(id, token, jsonBody string) map[string]any {
	s.t.Helper()
	return s.requestJSON(http.MethodPost, "/api/sessions/"+url.PathEscape(id)+"/commands", token, jsonBody)
}

// WatchURL is the page of session id, for a viewer.
func (s *Server) WatchURL(id string) string { return s.URL + "/s/" + url.PathEscape(id) }

// DriveURL is the page of session id for its driver (the token rides in the
// fragment, as in the API's drive_url).
func (s *Server) DriveURL(id, token string) string {
	return s.WatchURL(id) + "#token=" + url.QueryEscape(token)
}
