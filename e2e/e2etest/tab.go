package e2etest

// Tabs: each in a profile of its own (unless SameProfileAs), so that tests
// share the browser process and nothing else. A tab records the page's
// JavaScript errors from its first event, so a test fails on any error it
// did not allow, even one thrown while nothing was waiting; and it saves a
// screenshot of a failed test while the page is still up.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// ArtifactsDir is where every package of the suite saves its screenshots:
// e2e/artifacts, found from the working directory of `go test` (a package
// folder inside e2e). It is git-ignored.
var ArtifactsDir = artifactsDir()

func artifactsDir() string {
	dir, err := os.Getwd()
	if err != nil {
		return "artifacts"
	}
	for d := dir; ; d = filepath.Dir(d) {
		if filepath.Base(d) == "e2e" {
			if _, err := os.Stat(filepath.Join(filepath.Dir(d), "go.mod")); err == nil {
				return filepath.Join(d, "artifacts")
			}
		}
		if filepath.Dir(d) == d {
			return filepath.Join(dir, "artifacts")
		}
	}
}

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

// TabOption configures NewTab.
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

// NewTab opens a tab of the test binary's browser, in a window and a fresh
// profile of its own (see SameProfileAs), with a width×height CSS-pixel
// viewport. Until the test ends it records every uncaught exception,
// console.error (and failed console.assert) and error entry of the browser
// log (e.g. a failed request, a 404 favicon.ico included), and then fails
// the test on any that no AllowErrors substring matches (unless
// ExpectErrors). If the test failed, it then saves a full-page screenshot to
// e2e/artifacts/<TestName>-<width>.png. The test's cleanup closes the tab
// (and disposes of its profile, closing its connections) before it stops
// the test's servers.
func NewTab(t *testing.T, width, height int, opts ...TabOption) *Tab {
	t.Helper()
	parent := RequireBrowser(t)
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
	AtTestEnd(t, tab.finish)
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
	case <-time.After(DefaultTimeout):
		t.Fatalf("e2e: no tab within %v", DefaultTimeout)
	}
	tab.profile = chromedp.FromContext(ctx).BrowserContextID
	err := tab.Do(DefaultTimeout,
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
// Allow makes errors containing any of substrings harmless from now on,
// as AllowErrors does from the start.
func (tab *Tab) Allow(substrings ...string) {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	tab.cfg.allow = append(tab.cfg.allow, substrings...)
}

// T is the test the tab belongs to.
func (tab *Tab) T() *testing.T { return tab.t }

// Do runs actions on the tab with a timeout.
func (tab *Tab) Do(timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(tab.Ctx, timeout)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// RunAction runs one action that returns a value on the tab with a timeout.
func RunAction[T any](tab *Tab, timeout time.Duration, a chromedp.Action[T]) (T, error) {
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
	deadline := time.NewTimer(DefaultTimeout)
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
			tab.t.Fatalf("e2e: WaitError(%q): no such error within %v; errors recorded: %q", substr, DefaultTimeout, errs)
		}
	}
}

func (tab *Tab) allowed(msg string) bool {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	for _, s := range tab.cfg.allow {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Unexpected returns the recorded errors that no AllowErrors substring
// matches: those the test fails on at its end (unless ExpectErrors).
func (tab *Tab) Unexpected() []string {
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
	href, err := RunAction(tab, 5*time.Second, chromedp.Evaluate[string]("location.href"))
	if err != nil {
		href = "(unknown: " + err.Error() + ")"
	}
	if !tab.cfg.expect {
		if bad := tab.Unexpected(); len(bad) > 0 {
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
	base := fmt.Sprintf("%s-%d", Sanitize(test), width)
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
	path, err := tab.saveScreenshot(Sanitize(strings.TrimSuffix(name, ".png")))
	if err != nil {
		tab.t.Fatalf("e2e: Screenshot(%q): %v", name, err)
	}
	tab.t.Logf("e2e: screenshot %s", path)
	return path
}

func (tab *Tab) saveScreenshot(name string) (string, error) {
	if err := os.MkdirAll(ArtifactsDir, 0o755); err != nil {
		return "", err
	}
	path, err := filepath.Abs(filepath.Join(ArtifactsDir, name+".png"))
	if err != nil {
		return "", err
	}
	png, err := RunAction(tab, DefaultTimeout, fullPagePNG)
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
