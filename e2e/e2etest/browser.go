package e2etest

// The one Chromium of the test binary. Starting it takes seconds, so every
// test shares it; being shared, it outlives pgtest.Run, so it is closed and
// checked for leftovers by its own mark and profile rather than by
// pgtest's (see the top of e2etest.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencelab/fencelab/server/postgres/pgtest"
)

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

// FindChromium returns the path of Chromium, or "".
func FindChromium() string {
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

// RequireBrowser returns the context of the test binary's browser,
// starting it on first use. Without Chromium the test is skipped, or fails
// when CI=true.
func RequireBrowser(t *testing.T) context.Context {
	t.Helper()
	path := FindChromium()
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
	browserMark = fmt.Sprintf("%s=%d-%d", BrowserMarkEnv, os.Getpid(), time.Now().UnixNano())
	// The environment of this process without pgtest's suite mark, plus
	// the browser's own mark (see the top of e2etest.go).
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, SuiteMarkEnv+"=") {
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
	ctx, _ := chromedp.NewContext(allocCtx) // cancelled through cancelAlloc, closed by StopBrowser
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
		if serr := StopBrowser(); serr != nil {
			err = fmt.Errorf("%w; then %w", err, serr)
		}
		browserCtx = nil
	}
	return err
}

// StopBrowser closes the browser (gracefully, ≤10s, then by force), waits
// for chromedp to reap it, checks that no Chromium process is left 10s
// later (killing any), and removes its profile.
func StopBrowser() error {
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
	mark := []byte("\x00" + browserMark + "\x00")
	dirArg := []byte("\x00--user-data-dir=" + browserDataDir + "\x00")
	return pgtest.Processes(func(cmdline, env []byte) bool {
		return bytes.Contains(append([]byte{0}, cmdline...), dirArg) || bytes.Contains(append([]byte{0}, env...), mark)
	})
}
