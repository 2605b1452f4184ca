// Package e2etest is the harness of the browser suite (e2e and the packages
// inside it): a `fencelab serve` per test, one Chromium per test binary,
// tabs that select by data-testid and wait without sleeping. Nothing but
// those tests imports it. Each package of the suite has
//
//	func TestMain(m *testing.M) { e2etest.Main(m) }
package e2etest

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
//     Chromium process has on its command line). Main closes it after
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
//
// The harness is split by concern: this file (Main, the end hooks that
// order every test's cleanups, marked processes, text), the server
// (server.go), the browser (browser.go), tabs (tab.go), the Tab's helpers
// (helpers.go, media.go) and helpers that read the playground (pages.go).

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/servertest"
)

// CheckTimeout bounds a whole check in the page: its cases, each a real
// run with a short lease, a few at a time, on a loaded machine.
const CheckTimeout = 4 * time.Minute

// DefaultTimeout bounds every wait of the Tab helpers.
const DefaultTimeout = 30 * time.Second

const (
	// SuiteMarkEnv is pgtest's suite mark (server/postgres/pgtest: SuiteMarkEnv).
	// Chromium must not carry it; see the top of this file. Should pgtest
	// rename it, Chromium would carry the new one and pgtest's check would
	// fail the suite loudly: nothing fails silently.
	SuiteMarkEnv = "FENCELAB_TEST_SUITE"
	// BrowserMarkEnv marks every Chromium process of this test binary.
	BrowserMarkEnv = "FENCELAB_E2E_BROWSER"
	// ServerMarkEnv marks one `fencelab serve` and every process it starts.
	ServerMarkEnv = "FENCELAB_E2E_SERVER"
)

// suiteParallel is how many of the suite's tests run at once unless
// -test.parallel says otherwise. Every test runs in parallel with the
// others (each has servers, tabs and profiles of its own), and they spend
// most of their time waiting on real leases, frozen workers and pages
// rather than on the CPU: at go test's default of GOMAXPROCS (2 here) the
// suite alone took 430 s of wall time for 185 s of CPU.
const suiteParallel = 4

// Main is the TestMain of every package of the browser suite: it runs the
// package's tests, four at a time unless -test.parallel says otherwise,
// then stops the browser and removes the binary, and exits.
func Main(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", strconv.Itoa(suiteParallel))
	}
	code := pgtest.Run(m)
	if err := StopBrowser(); err != nil {
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
// (server/servertest); Main removes it.
func Binary(t testing.TB) string { return servertest.Binary(t) }

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

// AtTestEnd registers fn to run when the test's function has returned,
// before any harness cleanup stops anything.
func AtTestEnd(t *testing.T, fn func()) {
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

// WaitMarkedGone waits up to timeout for every live process whose
// environment holds mark ("NAME=value") to exit, and returns those left.
func WaitMarkedGone(mark string, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		left := pgtest.Marked(mark)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// KillMarked SIGKILLs every live process whose environment holds mark.
func KillMarked(mark string) {
	for _, p := range pgtest.Marked(mark) {
		var pid int
		if _, err := fmt.Sscanf(p, "pid %d", &pid); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// ---------------------------------------------------------------------------
// Text helpers.

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// sanitize makes a test or screenshot name a safe file name.
func Sanitize(name string) string {
	s := strings.Trim(unsafeName.ReplaceAllString(name, "_"), "_.")
	if s == "" {
		s = "unnamed"
	}
	return s
}

func Indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (empty)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
