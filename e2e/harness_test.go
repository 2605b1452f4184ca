package e2e

// The harness of the browser tests. One fencelab binary and one Chromium
// per test binary; one `fencelab serve` and one or more tabs per test.
//
// Lifetimes, and why they are what they are:
//
//   - pgtest.Run runs the tests, then stops PostgreSQL and fails the suite
//     if any process marked with its suite mark (FENCELAB_TEST_SUITE, which
//     every child inherits) is still alive. Servers and their workers carry
//     that mark and are stopped by each test's cleanup, well before.
//   - The browser is shared by every test, so it can only be closed after
//     m.Run, i.e. after pgtest.Run returns: too late for pgtest's check,
//     which would see it still running. And that check could not see most
//     of Chromium anyway: its zygotes, renderers, GPU and utility processes
//     start with an emptied environment, so no environment mark reaches
//     them. So Chromium is started without pgtest's suite mark, with a mark
//     of its own (FENCELAB_E2E_BROWSER: the browser process and its crash
//     handlers) and with a user-data-dir of its own (which every other
//     Chromium process has on its command line). TestMain closes it after
//     pgtest.Run and fails the suite if any process with either is left
//     10s later (and kills those).
//   - Everything a test starts is stopped by its t.Cleanup. The first of the
//     harness's cleanups to run for a test first runs its "end hooks": each
//     tab reports its JavaScript errors and, if the test failed, saves a
//     screenshot, while the server and the page are still alive. Then the
//     test's tabs are closed, each with its own profile (browser context),
//     whose disposal closes its connections, and only then its servers are
//     stopped: whatever order the test opened them in. (A connection that
//     Chromium opens ahead of need, with no request on it yet, holds up the
//     server's graceful shutdown for 5s: net/http's Shutdown waits that
//     long for a new connection to send its first request.)

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/fencelab/fencelab/engine/lab/labtest"
	"github.com/fencelab/fencelab/engine/pgtest"
	"github.com/fencelab/fencelab/server/servertest"
)

// defaultTimeout bounds every wait of the Tab helpers.
const defaultTimeout = 30 * time.Second

// pollInterval is how often a poll re-evaluates its predicate in the page.
// (A timer, not requestAnimationFrame: a window that is not drawn gets no
// animation frames, and the poll would never return.)
const pollInterval = 20 * time.Millisecond

const (
	// suiteMarkEnv is pgtest's suite mark (engine/pgtest: suiteMarkEnv).
	// Chromium must not carry it; see the top of this file. Should pgtest
	// rename it, Chromium would carry the new one and pgtest's check would
	// fail the suite loudly: nothing fails silently.
	suiteMarkEnv = "FENCELAB_TEST_SUITE"
	// browserMarkEnv marks every Chromium process of this test binary.
	browserMarkEnv = "FENCELAB_E2E_BROWSER"
	// serverMarkEnv marks one `fencelab serve` and every process it starts.
	serverMarkEnv = "FENCELAB_E2E_SERVER"
)

// artifactsDir is where screenshots go, relative to the package folder (the
// working directory of `go test`). It is git-ignored.
const artifactsDir = "artifacts"

func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	if err := stopBrowser(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	servertest.Cleanup()
	os.Exit(code)
}

// ---------------------------------------------------------------------------
// The binary.

// binary is the fencelab binary, built once per test run
// (server/servertest); TestMain removes it.
func binary(t testing.TB) string { return servertest.Binary(t) }

// ---------------------------------------------------------------------------
// Per-test end hooks: run once, by the first harness cleanup of the test.

type testEnd struct {
	mu        sync.Mutex
	hooks     []func()
	once      sync.Once
	closers   []func()
	closeOnce sync.Once
}

var testEnds sync.Map // *testing.T → *testEnd

func endOf(t *testing.T) *testEnd {
	e, _ := testEnds.LoadOrStore(t, &testEnd{})
	return e.(*testEnd)
}

// atTestEnd registers fn to run when the test's function has returned,
// before any harness cleanup stops anything.
func atTestEnd(t *testing.T, fn func()) {
	e := endOf(t)
	e.mu.Lock()
	e.hooks = append(e.hooks, fn)
	e.mu.Unlock()
}

// runTestEnd runs the test's end hooks, once; every harness cleanup calls
// it first.
func runTestEnd(t *testing.T) {
	e := endOf(t)
	e.once.Do(func() {
		e.mu.Lock()
		hooks := slices.Clone(e.hooks)
		e.mu.Unlock()
		for _, fn := range hooks {
			fn()
		}
	})
}

// atTabsClose registers fn, which closes a tab of the test; closeTabs runs
// them, newest first.
func atTabsClose(t *testing.T, fn func()) {
	e := endOf(t)
	e.mu.Lock()
	e.closers = append(e.closers, fn)
	e.mu.Unlock()
}

// closeTabs closes the test's tabs, once, after its end hooks: the tab
// cleanups and the server cleanups call it, so tabs are closed before any
// server of the test is stopped, whatever order they were opened in.
func closeTabs(t *testing.T) {
	e := endOf(t)
	e.closeOnce.Do(func() {
		e.mu.Lock()
		closers := slices.Clone(e.closers)
		e.mu.Unlock()
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	})
}

// ---------------------------------------------------------------------------
// Processes marked by an environment entry.

// waitMarkedGone waits up to timeout for every live process whose
// environment holds mark ("NAME=value") to exit, and returns those left.
func waitMarkedGone(mark string, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		left := pgtest.Marked(mark)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killMarked SIGKILLs every live process whose environment holds mark.
func killMarked(mark string) {
	for _, p := range pgtest.Marked(mark) {
		var pid int
		if _, err := fmt.Sscanf(p, "pid %d", &pid); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// lockedBuffer is a strings.Builder safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) WriteString(s string) {
	b.mu.Lock()
	b.b.WriteString(s)
	b.mu.Unlock()
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ---------------------------------------------------------------------------
// The server.

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
	stdout  lockedBuffer
	stderr  lockedBuffer
	done    chan struct{} // closed once the process has exited and been reaped
	waitErr error         // cmd.Wait's error; read after done
	readers sync.WaitGroup

	stopOnce sync.Once
}

var serverSeq atomic.Int64

var httpClient = &http.Client{Timeout: defaultTimeout}

// startServer starts `fencelab serve --addr 127.0.0.1:0 --log-level warn`
// with extraArgs and DATABASE_URL set to the test database, waits (≤60s)
// for its "playground at" line and returns it. The test's cleanup stops it
// (SIGTERM, then SIGKILL after 15s) and fails the test if it does not exit
// cleanly or leaves a process (a worker) behind; when the test failed, the
// server's stderr is logged.
//
// To share one server among several cases, start it in the parent test and
// use it from subtests through srv.WithT(t).
func startServer(t *testing.T, extraArgs ...string) *Server {
	t.Helper()
	bin := binary(t)
	dsn := pgtest.DSN(t)

	st := &serverState{
		mark: fmt.Sprintf("%s=%s-%d-%d", serverMarkEnv, sanitize(t.Name()), serverSeq.Add(1), time.Now().UnixNano()),
		done: make(chan struct{}),
		// Every event the server emits is tapped, and checked against the
		// protocol's schema once the server has stopped.
		tap: filepath.Join(t.TempDir(), "events.ndjson"),
	}
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--log-level", "warn"}, extraArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn, st.mark, labtest.TapEnv+"="+st.tap)
	// If this test binary dies, the kernel kills the server where it has a
	// parent-death signal (serverAttr), and the server's workers die with
	// the server.
	cmd.SysProcAttr = serverAttr()
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

	// The parent-death signal fires when the OS thread that started the
	// process exits, not the process: start it from a goroutine locked to
	// its thread until the server has exited (go.dev/issue/27505).
	started := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		st.waitErr = cmd.Wait()
		close(st.done)
	}()
	err = <-started
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
		t.Fatalf("e2e: fencelab serve exited (%v) before printing its URL; stderr:\n%s", st.waitErr, indent(st.stderr.String()))
	case <-time.After(60 * time.Second):
		t.Fatalf("e2e: fencelab serve printed no \"playground at\" line within 60s; stderr so far:\n%s", indent(st.stderr.String()))
	}
	t.Logf("e2e: %s ready at %s in %v", strings.Join(append([]string{"fencelab"}, args...), " "), s.URL, time.Since(t0).Round(time.Millisecond))
	return s
}

// read copies the lines of r into buf, calling onLine for each.
func (st *serverState) read(r *os.File, buf *lockedBuffer, onLine func(string)) {
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
		if shouting() {
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
	if left := waitMarkedGone(st.mark, 10*time.Second); len(left) > 0 {
		killMarked(st.mark)
		errs = append(errs, fmt.Sprintf("e2e: processes started by fencelab serve at %s were still running 10s after it exited (killed now):\n  %s",
			url, strings.Join(left, "\n  ")))
	}
	st.waitReaders(5 * time.Second)
	return errs
}

// Stderr returns what the server has written to stderr so far.
func (s *Server) Stderr() string { return s.st.stderr.String() }

func (s *Server) logOutput(t *testing.T) {
	t.Logf("e2e: fencelab serve at %s, stderr:\n%s", s.URL, indent(s.st.stderr.String()))
	if out := s.st.stdout.String(); strings.Count(out, "\n") > 1 {
		t.Logf("e2e: fencelab serve at %s, stdout:\n%s", s.URL, indent(out))
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

// ---------------------------------------------------------------------------
// The browser.

var (
	browserOnce    sync.Once
	browserCtx     context.Context    // the browser's first context; tabs are its children
	allocCancel    context.CancelFunc // cancels the allocator and waits for it
	browserMark    string             // FENCELAB_E2E_BROWSER=…
	browserDataDir string             // Chromium's user-data-dir
	browserErr     error
)

// chromiumNotFound is the skip message when there is no browser.
const chromiumNotFound = "Chromium not found: apt-get install chromium chromium-driver (CI installs it)"

// findChromium returns the path of Chromium, or "".
func findChromium() string {
	if fi, err := os.Stat("/usr/bin/chromium"); err == nil && !fi.IsDir() {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// requireBrowser returns the context of the test binary's browser,
// starting it on first use. Without Chromium the test is skipped, or fails
// when CI=true.
func requireBrowser(t *testing.T) context.Context {
	t.Helper()
	path := findChromium()
	if path == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("e2e: %s; CI=true, so this is a failure, not a skip", chromiumNotFound)
		}
		t.Skip(chromiumNotFound)
	}
	browserOnce.Do(func() {
		t0 := time.Now()
		browserErr = startBrowser(path)
		if browserErr == nil {
			t.Logf("e2e: started %s in %v", path, time.Since(t0).Round(time.Millisecond))
		}
	})
	if browserErr != nil {
		t.Fatalf("e2e: cannot start Chromium (%s): %v", path, browserErr)
	}
	return browserCtx
}

func startBrowser(path string) error {
	browserMark = fmt.Sprintf("%s=%d-%d", browserMarkEnv, os.Getpid(), time.Now().UnixNano())
	// The environment of this process without pgtest's suite mark, plus
	// the browser's own mark (see the top of this file).
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, suiteMarkEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, browserMark)
	dir, err := os.MkdirTemp("", "fencelab-e2e-chromium-*")
	if err != nil {
		return err
	}
	browserDataDir = dir

	// chromedp's defaults (headless, no-first-run, disable-background-
	// networking, disable-sync, disable-dev-shm-usage, …) plus ours. Its
	// default command set-up gives Chromium a parent-death signal, so it
	// dies with this process.
	opts := slices.Clone(chromedp.DefaultExecAllocatorOptions[:])
	opts = append(opts,
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // we run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1280, 800), // each tab sets its own viewport
		chromedp.NoInheritEnv,
		chromedp.Env(env...),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, _ := chromedp.NewContext(allocCtx) // cancelled through cancelAlloc, closed by stopBrowser
	browserCtx, allocCancel = ctx, cancelAlloc
	// The first Run starts the browser and binds it to ctx: no timeout here.
	errc := make(chan error, 1)
	go func() { errc <- chromedp.Do(ctx) }()
	select {
	case err = <-errc:
	case <-time.After(60 * time.Second):
		err = errors.New("no browser within 60s")
	}
	if err != nil {
		if serr := stopBrowser(); serr != nil {
			err = fmt.Errorf("%w; then %w", err, serr)
		}
		browserCtx = nil
	}
	return err
}

// stopBrowser closes the browser (gracefully, ≤10s, then by force), waits
// for chromedp to reap it, checks that no Chromium process is left 10s
// later (killing any), and removes its profile.
func stopBrowser() error {
	if browserCtx == nil {
		return nil
	}
	var errs []error
	ctx, cancel := context.WithTimeout(browserCtx, 10*time.Second)
	if err := chromedp.Cancel(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		errs = append(errs, fmt.Errorf("closing Chromium: %w", err))
	}
	cancel()
	allocCancel()
	deadline := time.Now().Add(10 * time.Second)
	left := chromiumLeft()
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		left = chromiumLeft()
	}
	if len(left) > 0 {
		for _, p := range left {
			var pid int
			if _, err := fmt.Sscanf(p, "pid %d", &pid); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		errs = append(errs, fmt.Errorf("Chromium processes still running 10s after the browser was closed (killed now):\n  %s",
			strings.Join(left, "\n  ")))
	}
	for i := 0; ; i++ { // a dying child can still write in it for a moment
		err := os.RemoveAll(browserDataDir)
		if err == nil {
			break
		}
		if i == 20 {
			errs = append(errs, fmt.Errorf("removing Chromium's profile: %w", err))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.Join(errs...)
}

// chromiumLeft lists the live processes (not zombies) of this binary's
// Chromium: those with its environment mark, and those with its
// user-data-dir on their command line, as "pid N (state): command line".
func chromiumLeft() []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	mark := []byte("\x00" + browserMark + "\x00")
	dirArg := []byte("\x00--user-data-dir=" + browserDataDir + "\x00")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if !bytes.Contains(append([]byte{0}, cmdline...), dirArg) && !bytes.Contains(append([]byte{0}, env...), mark) {
			continue
		}
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
			continue
		}
		cmd := strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		if len(cmd) > 200 {
			cmd = cmd[:200] + "…"
		}
		out = append(out, fmt.Sprintf("pid %d (%c): %s", pid, stat[i+2], cmd))
	}
	return out
}

// ---------------------------------------------------------------------------
// Tabs.

// Tab is one browser tab of a test. Its helpers fail the test (t.Fatalf)
// when what they wait for does not happen within 30s.
type Tab struct {
	// Ctx is the tab's chromedp context, for anything the helpers lack.
	Ctx context.Context

	Width, Height int

	t       *testing.T
	cancel  context.CancelFunc
	cfg     tabConfig
	profile cdp.BrowserContextID

	mu      sync.Mutex
	errs    []string
	changed chan struct{} // closed and replaced whenever errs grows
}

type tabConfig struct {
	allow     []string
	expect    bool
	shareWith *Tab
}

// TabOption configures newTab.
type TabOption func(*tabConfig)

// AllowErrors makes JavaScript errors whose text contains any of substrings
// harmless: they are still recorded in Errors, but do not fail the test.
func AllowErrors(substrings ...string) TabOption {
	return func(c *tabConfig) { c.allow = append(c.allow, substrings...) }
}

// ExpectErrors makes the tab record JavaScript errors without failing the
// test for them: the test inspects Errors (or WaitError) itself.
func ExpectErrors() TabOption {
	return func(c *tabConfig) { c.expect = true }
}

// SameProfileAs opens the tab in the profile (browser context) of other, a
// tab of the same test opened before: they share cookies, storage and
// cache, as two tabs of one person do. Without it each tab has a fresh
// profile of its own, as a different person would.
func SameProfileAs(other *Tab) TabOption {
	return func(c *tabConfig) { c.shareWith = other }
}

// newTab opens a tab of the test binary's browser, in a window and a fresh
// profile of its own (see SameProfileAs), with a width×height CSS-pixel
// viewport. Until the test ends it records every uncaught exception,
// console.error (and failed console.assert) and error entry of the browser
// log (e.g. a failed request, a 404 favicon.ico included), and then fails
// the test on any that no AllowErrors substring matches (unless
// ExpectErrors). If the test failed, it then saves a full-page screenshot to
// e2e/artifacts/<TestName>-<width>.png. The test's cleanup closes the tab
// (and disposes of its profile, closing its connections) before it stops
// the test's servers.
func newTab(t *testing.T, width, height int, opts ...TabOption) *Tab {
	t.Helper()
	parent := requireBrowser(t)
	tab := &Tab{t: t, Width: width, Height: height, changed: make(chan struct{})}
	for _, o := range opts {
		o(&tab.cfg)
	}
	// The listener sees the tab's events from its first message, on the
	// goroutine that reads them, so an error is recorded before the reply
	// to any command sent after it is seen.
	copts := []chromedp.ContextOption{chromedp.WithListener(tab.onEvent)}
	if other := tab.cfg.shareWith; other != nil {
		if other.profile == "" {
			t.Fatalf("e2e: SameProfileAs: the other tab has no profile")
		}
		copts = append(copts, chromedp.WithExistingBrowserContext(other.profile))
	} else {
		copts = append(copts, chromedp.WithNewBrowserContext())
	}
	ctx, cancel := chromedp.NewContext(parent, copts...)
	tab.Ctx, tab.cancel = ctx, cancel
	atTestEnd(t, tab.finish)
	atTabsClose(t, cancel) // closes the tab (and its own profile) and waits
	t.Cleanup(func() {
		runTestEnd(t)
		closeTabs(t)
	})

	// The first Run creates the target and binds it to ctx: no timeout on
	// ctx itself.
	errc := make(chan error, 1)
	go func() { errc <- chromedp.Do(ctx) }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("e2e: cannot open a tab: %v", err)
		}
	case <-time.After(defaultTimeout):
		t.Fatalf("e2e: no tab within %v", defaultTimeout)
	}
	tab.profile = chromedp.FromContext(ctx).BrowserContextID
	err := tab.do(defaultTimeout,
		chromedp.EmulateViewport(int64(width), int64(height)),
		// Every tab behaves as the focused one (focus events, :focus-visible,
		// document.hasFocus()), though each is a window of its own.
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true})
			return err
		}),
	)
	if err != nil {
		t.Fatalf("e2e: set up the %dx%d tab: %v", width, height, err)
	}
	return tab
}

// do runs actions on the tab with a timeout.
func (tab *Tab) do(timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(tab.Ctx, timeout)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// runAction runs one action that returns a value on the tab with a timeout.
func runAction[T any](tab *Tab, timeout time.Duration, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(tab.Ctx, timeout)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// onEvent records the error events. It runs on chromedp's reading
// goroutine: it must be quick and must not send commands.
func (tab *Tab) onEvent(ev any) {
	switch e := ev.(type) {
	case *runtime.EventExceptionThrown:
		tab.record("uncaught exception: " + exceptionText(e.ExceptionDetails))
	case *runtime.EventConsoleAPICalled:
		switch e.Type {
		case runtime.ConsoleAPICalledTypeError:
			tab.record("console.error: " + argsText(e.Args) + stackPlace(e.StackTrace))
		case runtime.ConsoleAPICalledTypeAssert:
			tab.record("console.assert failed: " + argsText(e.Args) + stackPlace(e.StackTrace))
		}
	case *cdplog.EventEntryAdded:
		if en := e.Entry; en != nil && en.Level == cdplog.EntryLevelError {
			msg := fmt.Sprintf("browser log (%s): %s", en.Source, en.Text)
			if en.URL != "" && !strings.Contains(en.Text, en.URL) {
				msg += " (" + en.URL + ")"
			}
			tab.record(msg)
		}
	}
}

func (tab *Tab) record(msg string) {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	tab.errs = append(tab.errs, msg)
	close(tab.changed)
	tab.changed = make(chan struct{})
}

// Errors returns every JavaScript error the tab has recorded so far,
// allowed ones included, in order.
func (tab *Tab) Errors() []string {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	return slices.Clone(tab.errs)
}

// WaitError waits (≤30s) until the tab has recorded an error containing
// substr, and returns it.
func (tab *Tab) WaitError(substr string) string {
	tab.t.Helper()
	deadline := time.NewTimer(defaultTimeout)
	defer deadline.Stop()
	for {
		tab.mu.Lock()
		for _, e := range tab.errs {
			if strings.Contains(e, substr) {
				tab.mu.Unlock()
				return e
			}
		}
		ch := tab.changed
		errs := slices.Clone(tab.errs)
		tab.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			tab.t.Fatalf("e2e: WaitError(%q): no such error within %v; errors recorded: %q", substr, defaultTimeout, errs)
		}
	}
}

func (tab *Tab) allowed(msg string) bool {
	for _, s := range tab.cfg.allow {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// unexpected returns the recorded errors that no AllowErrors substring
// matches: those the test fails on at its end (unless ExpectErrors).
func (tab *Tab) unexpected() []string {
	var bad []string
	for _, e := range tab.Errors() {
		if !tab.allowed(e) {
			bad = append(bad, e)
		}
	}
	return bad
}

// finish is the tab's end hook: report its errors, and save a screenshot
// if the test failed.
func (tab *Tab) finish() {
	t := tab.t
	// A round trip: every event the browser sent before its reply has been
	// recorded once it returns.
	href, err := runAction(tab, 5*time.Second, chromedp.Evaluate[string]("location.href"))
	if err != nil {
		href = "(unknown: " + err.Error() + ")"
	}
	if !tab.cfg.expect {
		if bad := tab.unexpected(); len(bad) > 0 {
			t.Errorf("e2e: the %dx%d tab at %s reported %d JavaScript error(s):\n  %s",
				tab.Width, tab.Height, href, len(bad), strings.Join(bad, "\n  "))
		}
	}
	if t.Failed() {
		path, err := tab.saveScreenshot(failureShotName(t.Name(), tab.Width))
		if err != nil {
			t.Logf("e2e: no screenshot of the failed test: %v", err)
		} else {
			t.Logf("e2e: screenshot of the failed test (%dx%d, %s): %s", tab.Width, tab.Height, href, path)
		}
	}
}

var (
	shotNamesMu sync.Mutex
	shotNames   = map[string]bool{}
)

// failureShotName is <TestName>-<width>, with -2, -3… for a test's further
// tabs of the same width.
func failureShotName(test string, width int) string {
	base := fmt.Sprintf("%s-%d", sanitize(test), width)
	shotNamesMu.Lock()
	defer shotNamesMu.Unlock()
	name := base
	for i := 2; shotNames[name]; i++ {
		name = fmt.Sprintf("%s-%d", base, i)
	}
	shotNames[name] = true
	return name
}

// Screenshot saves a full-page PNG of the tab as e2e/artifacts/<name>.png
// (name sanitized) and returns its path.
func (tab *Tab) Screenshot(name string) string {
	tab.t.Helper()
	path, err := tab.saveScreenshot(sanitize(strings.TrimSuffix(name, ".png")))
	if err != nil {
		tab.t.Fatalf("e2e: Screenshot(%q): %v", name, err)
	}
	tab.t.Logf("e2e: screenshot %s", path)
	return path
}

func (tab *Tab) saveScreenshot(name string) (string, error) {
	if err := os.MkdirAll(artifactsDir, 0o755); err != nil {
		return "", err
	}
	path, err := filepath.Abs(filepath.Join(artifactsDir, name+".png"))
	if err != nil {
		return "", err
	}
	png, err := runAction(tab, defaultTimeout, fullPagePNG)
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, png, 0o644)
}

// fullPagePNG captures the whole page, beyond the viewport, as a PNG.
// (chromedp.FullScreenshot encodes a JPEG for any quality but 100.)
func fullPagePNG(ctx context.Context, tg *chromedp.Target) ([]byte, error) {
	return chromedp.FullScreenshot(100)(ctx, tg)
}

// ---------------------------------------------------------------------------
// Tab helpers.

// sel is the CSS selector of a data-testid.
func sel(testid string) string { return `[data-testid="` + cssEscape(testid) + `"]` }

// cssEscape escapes a value for a double-quoted CSS attribute selector.
func cssEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\a `).Replace(s)
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Navigate loads url in the tab and waits for its load event (≤30s). It
// fails on a network error or an HTTP status of 400 or more. (For a change
// of the fragment alone there is no load: use Eval("location.hash = …").)
func (tab *Tab) Navigate(url string) {
	tab.t.Helper()
	resp, err := runAction(tab, defaultTimeout, chromedp.NavigateResponse(url))
	if err != nil {
		tab.t.Fatalf("e2e: Navigate(%s): %v", url, err)
	}
	if resp != nil && resp.Status >= 400 {
		tab.t.Fatalf("e2e: Navigate(%s): HTTP %d %s", url, resp.Status, resp.StatusText)
	}
}

// WaitReady waits (≤30s) until window.fencelab.ready === true.
func (tab *Tab) WaitReady() {
	tab.t.Helper()
	if !tab.poll(`window.fencelab && window.fencelab.ready === true`, defaultTimeout) {
		tab.t.Fatalf("e2e: WaitReady: window.fencelab.ready was not true within %v (window.fencelab: %s)",
			defaultTimeout, tab.describe(`window.fencelab === undefined ? "undefined" : JSON.stringify(Object.keys(window.fencelab))`))
	}
}

// poll waits until the JavaScript expression is truthy, evaluating it in
// the page every pollInterval, and reports whether it became so in time.
func (tab *Tab) poll(expr string, timeout time.Duration) bool {
	tab.t.Helper()
	_, err := runAction(tab, timeout+5*time.Second, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(pollInterval), chromedp.WithPollingTimeout(timeout)))
	switch {
	case err == nil:
		return true
	case errors.Is(err, chromedp.ErrPollingTimeout), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	tab.t.Fatalf("e2e: polling %s: %v", expr, err)
	return false
}

// describe evaluates expr for an error message; it never fails the test.
func (tab *Tab) describe(expr string) string {
	v, err := runAction(tab, 5*time.Second, chromedp.Evaluate[json.RawMessage](expr))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	s := string(v)
	var str string
	if json.Unmarshal(v, &str) == nil {
		s = str
	}
	if len(s) > 2000 {
		s = s[:2000] + "…"
	}
	return s
}

// PollJS waits until the JavaScript expression is truthy (timeout ≤ 0
// means 30s), polling it in the page; it never sleeps in Go.
func (tab *Tab) PollJS(jsExpr string, timeout time.Duration) {
	tab.t.Helper()
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	if !tab.poll(jsExpr, timeout) {
		tab.t.Fatalf("e2e: PollJS(%s): not true within %v", jsExpr, timeout)
	}
}

// PollState waits until jsExpr, a boolean JavaScript expression over
// s = window.fencelab.state(), is true (timeout ≤ 0 means 30s); e.g.
// `s.outcome && s.outcome.safe === true`. Until the page is ready, and
// while the expression throws (s.outcome is still null…), it counts as
// false; on timeout the message has the last exception and the last state.
func (tab *Tab) PollState(jsExpr string, timeout time.Duration) {
	tab.t.Helper()
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	expr := `(() => {
		const f = window.fencelab;
		if (!f || f.ready !== true || typeof f.state !== "function") { window.__e2ePollError = "window.fencelab is not ready"; return false; }
		let s;
		try { s = f.state(); } catch (e) { window.__e2ePollError = "window.fencelab.state() threw: " + e; return false; }
		try { return !!(` + jsExpr + `); } catch (e) { window.__e2ePollError = String(e); return false; }
	})()`
	if !tab.poll(expr, timeout) {
		tab.t.Fatalf("e2e: PollState(%s): not true within %v\n  last exception: %s\n  last state: %s", jsExpr, timeout,
			tab.describe(`window.__e2ePollError || "none"`),
			tab.describe(`window.fencelab && typeof window.fencelab.state === "function" ? JSON.stringify(window.fencelab.state()) : "no window.fencelab.state"`))
	}
}

// State returns window.fencelab.state().
func (tab *Tab) State() map[string]any {
	tab.t.Helper()
	var m map[string]any
	tab.Eval(`(() => {
		if (!window.fencelab || typeof window.fencelab.state !== "function")
			throw new Error("window.fencelab.state is not a function (is the page loaded? call WaitReady first)");
		return window.fencelab.state();
	})()`, &m)
	return m
}

// Eval evaluates a JavaScript expression in the page (awaiting a promise)
// and decodes its JSON value into out; out may be nil to ignore it. An
// exception fails the test (it is not an uncaught error of the page).
func (tab *Tab) Eval(js string, out any) {
	tab.t.Helper()
	if out == nil {
		if _, err := runAction(tab, defaultTimeout, chromedp.Evaluate[chromedp.Void](js, chromedp.EvalAwaitPromise)); err != nil {
			tab.t.Fatalf("e2e: Eval(%s): %v", js, err)
		}
		return
	}
	raw, err := runAction(tab, defaultTimeout, chromedp.Evaluate[json.RawMessage](js, chromedp.EvalAwaitPromise))
	if err != nil {
		tab.t.Fatalf("e2e: Eval(%s): %v", js, err)
	}
	if len(raw) == 0 {
		tab.t.Fatalf("e2e: Eval(%s): the value is undefined or cannot be serialized", js)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		tab.t.Fatalf("e2e: Eval(%s): cannot decode %s into %T: %v", js, raw, out, err)
	}
}

// onElement waits (≤30s) for the element with the testid and returns
// fn(el), fn being a JavaScript function of the element whose result is
// JSON-able.
func (tab *Tab) onElement(what, testid, fn string) json.RawMessage {
	tab.t.Helper()
	expr := `(() => {
		const el = document.querySelector(` + jsString(sel(testid)) + `);
		return el ? {v: (` + fn + `)(el)} : null;
	})()`
	res, err := runAction(tab, defaultTimeout+5*time.Second, chromedp.Poll[struct {
		V json.RawMessage `json:"v"`
	}](expr, chromedp.WithPollingInterval(pollInterval), chromedp.WithPollingTimeout(defaultTimeout)))
	switch {
	case errors.Is(err, chromedp.ErrPollingTimeout), errors.Is(err, context.DeadlineExceeded):
		tab.t.Fatalf("e2e: %s(%q): no element %s within %v", what, testid, sel(testid), defaultTimeout)
	case err != nil:
		tab.t.Fatalf("e2e: %s(%q): %v", what, testid, err)
	}
	return res.V
}

// Click waits (≤30s) for the element to be visible, scrolls it into view
// and clicks its centre with the mouse, as a person would.
func (tab *Tab) Click(testid string) {
	tab.t.Helper()
	err := tab.do(defaultTimeout, chromedp.Click(chromedp.CSS(sel(testid))))
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		tab.t.Fatalf("e2e: Click(%q): no visible %s within %v (in the page: %s)", testid, sel(testid), defaultTimeout,
			tab.describe(`document.querySelector(`+jsString(sel(testid))+`) ? "present, not visible" : "absent"`))
	case err != nil:
		tab.t.Fatalf("e2e: Click(%q): %v", testid, err)
	}
}

// WaitVisible waits (≤30s) until the element exists and is visible.
func (tab *Tab) WaitVisible(testid string) {
	tab.t.Helper()
	if !tab.poll(visibleJS(testid), defaultTimeout) {
		tab.t.Fatalf("e2e: WaitVisible(%q): %s not visible within %v", testid, sel(testid), defaultTimeout)
	}
}

// visibleJS is an expression: the element exists, has a box and is not
// hidden by display, visibility, content-visibility or opacity.
func visibleJS(testid string) string {
	return `(() => {
		const el = document.querySelector(` + jsString(sel(testid)) + `);
		if (!el) return false;
		const r = el.getBoundingClientRect();
		if (r.width === 0 && r.height === 0) return false;
		return el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true, opacityProperty: true, visibilityProperty: true, contentVisibilityAuto: true});
	})()`
}

// Visible reports, now and without waiting, whether the element exists and
// is visible.
func (tab *Tab) Visible(testid string) bool {
	tab.t.Helper()
	var v bool
	tab.Eval(visibleJS(testid), &v)
	return v
}

// SetValue sets the value of an <input>, <select> or <textarea> (waiting
// ≤30s for it) and dispatches "input" and "change" events, as a person's
// edit would. For a <select>, value must be one of its options' values.
func (tab *Tab) SetValue(testid, value string) {
	tab.t.Helper()
	raw := tab.onElement("SetValue", testid, `(el) => {
		if (!("value" in el)) return {err: "the element <" + el.tagName.toLowerCase() + "> has no value"};
		if (el.disabled) return {err: "the element is disabled"};
		el.focus();
		el.value = `+jsString(value)+`;
		el.dispatchEvent(new Event("input", {bubbles: true}));
		el.dispatchEvent(new Event("change", {bubbles: true}));
		if (el.value !== `+jsString(value)+`) {
			const opts = el.options ? Array.from(el.options, o => o.value) : null;
			return {err: "the value is " + JSON.stringify(el.value) + " after setting it" + (opts ? "; the options are " + JSON.stringify(opts) : "")};
		}
		return {};
	}`)
	var res struct{ Err string }
	_ = json.Unmarshal(raw, &res)
	if res.Err != "" {
		tab.t.Fatalf("e2e: SetValue(%q, %q): %s", testid, value, res.Err)
	}
}

// SetChecked makes a checkbox (or radio) checked or not (waiting ≤30s for
// it), by clicking it when it is not already so, which fires the same
// "click", "input" and "change" events as a person's click.
func (tab *Tab) SetChecked(testid string, checked bool) {
	tab.t.Helper()
	raw := tab.onElement("SetChecked", testid, `(el) => {
		if (!("checked" in el)) return {err: "the element <" + el.tagName.toLowerCase() + "> cannot be checked"};
		if (el.disabled) return {err: "the element is disabled"};
		if (el.checked !== `+strconv.FormatBool(checked)+`) el.click();
		if (el.checked !== `+strconv.FormatBool(checked)+`) return {err: "clicking it did not change it (a handler undid it?)"};
		return {};
	}`)
	var res struct{ Err string }
	_ = json.Unmarshal(raw, &res)
	if res.Err != "" {
		tab.t.Fatalf("e2e: SetChecked(%q, %v): %s", testid, checked, res.Err)
	}
}

// keyNames maps the key names Press accepts to chromedp's key runes.
var keyNames = map[string]string{
	"Space":      " ",
	"ArrowRight": kb.ArrowRight,
	"ArrowLeft":  kb.ArrowLeft,
	"ArrowUp":    kb.ArrowUp,
	"ArrowDown":  kb.ArrowDown,
	"Escape":     kb.Escape,
	"PageDown":   kb.PageDown,
	"PageUp":     kb.PageUp,
	"Home":       kb.Home,
	"End":        kb.End,
	"Tab":        kb.Tab,
	"Enter":      kb.Enter,
	"Backspace":  kb.Backspace,
}

// Press sends one key (keydown, keypress for a printable one, keyup) to
// whatever has the focus, as the keyboard would: a single character such
// as " ", "r" or "?", or a name: ArrowRight, ArrowLeft, ArrowUp, ArrowDown,
// Escape, PageDown, PageUp, Home, End, Tab, Enter, Backspace, Space.
func (tab *Tab) Press(key string) {
	tab.t.Helper()
	k, ok := keyNames[key]
	if !ok {
		if len([]rune(key)) != 1 {
			tab.t.Fatalf("e2e: Press(%q): not a single character nor a key name Press knows", key)
		}
		k = key
	}
	if err := tab.do(defaultTimeout, chromedp.KeyEvent(k)); err != nil {
		tab.t.Fatalf("e2e: Press(%q): %v", key, err)
	}
}

// Text waits (≤30s) for the element and returns its rendered text
// (innerText), trimmed.
func (tab *Tab) Text(testid string) string {
	tab.t.Helper()
	var s string
	_ = json.Unmarshal(tab.onElement("Text", testid, `(el) => el.innerText ?? el.textContent`), &s)
	return strings.TrimSpace(s)
}

// Attr waits (≤30s) for the element and returns its attribute name, or ""
// when it has none.
func (tab *Tab) Attr(testid, name string) string {
	tab.t.Helper()
	var s string
	_ = json.Unmarshal(tab.onElement("Attr", testid, `(el) => el.getAttribute(`+jsString(name)+`) ?? ""`), &s)
	return s
}

// Focused returns the data-testid of the focused element, or its tag name
// in lower case when it has none ("body" when nothing has the focus).
func (tab *Tab) Focused() string {
	tab.t.Helper()
	var s string
	tab.Eval(`(() => {
		let a = document.activeElement;
		while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
		if (!a) return "";
		return a.getAttribute("data-testid") || a.tagName.toLowerCase();
	})()`, &s)
	return s
}

// ---------------------------------------------------------------------------
// Text helpers.

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// sanitize makes a test or screenshot name a safe file name.
func sanitize(name string) string {
	s := strings.Trim(unsafeName.ReplaceAllString(name, "_"), "_.")
	if s == "" {
		s = "unnamed"
	}
	return s
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (empty)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// exceptionText renders an uncaught exception as the console shows it.
func exceptionText(d *runtime.ExceptionDetails) string {
	if d == nil {
		return "(no details)"
	}
	text := d.Text
	if o := d.Exception; o != nil {
		desc := o.Description
		if desc == "" && len(o.Value) > 0 {
			desc = string(o.Value)
		}
		desc, _, _ = strings.Cut(desc, "\n    at ")
		text = strings.TrimSpace(text + " " + desc)
	}
	place := d.URL
	if place == "" && d.StackTrace != nil && len(d.StackTrace.CallFrames) > 0 {
		place = d.StackTrace.CallFrames[0].URL
	}
	if place != "" {
		text += fmt.Sprintf(" (%s:%d:%d)", place, d.LineNumber+1, d.ColumnNumber+1)
	}
	return text
}

// argsText renders the arguments of a console call.
func argsText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		var s string
		switch {
		case a.Type == runtime.RemoteObjectTypeString && json.Unmarshal(a.Value, &s) == nil:
		case a.Description != "":
			s, _, _ = strings.Cut(a.Description, "\n    at ")
		case len(a.Value) > 0:
			s = string(a.Value)
		default:
			s = string(a.Type)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// stackPlace is " (url:line:col)" of a console call's first frame, or "".
func stackPlace(st *runtime.StackTrace) string {
	if st == nil || len(st.CallFrames) == 0 || st.CallFrames[0].URL == "" {
		return ""
	}
	f := st.CallFrames[0]
	return fmt.Sprintf(" (%s:%d:%d)", f.URL, f.LineNumber+1, f.ColumnNumber+1)
}
