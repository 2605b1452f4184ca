package e2e

// Tests of the harness itself: none of them depends on the playground page
// (the lead is building it), only on /healthz, the JSON API, and pages of
// their own.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
)

// TestSmoke starts a server, reads /healthz in a tab, drives a session
// through the JSON API (real worker processes, which Stop then checks are
// gone), and proves that an uncaught exception is caught — allowed here,
// so it does not fail the test. (Chromium asks for /favicon.ico, which the
// server does not have: the 404 is a browser-log error, allowed here too.)
func TestSmoke(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 800, e2etest.AllowErrors("boom", "/favicon.ico"))

	tab.Navigate(srv.URL + "/healthz")
	var body string
	tab.Eval(`document.body.innerText`, &body)
	if !strings.Contains(body, `"status":"ok"`) {
		t.Fatalf("/healthz shows %q, want it to contain \"status\":\"ok\"", body)
	}

	id, token := srv.NewSession()
	srv.Command(id, token, `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":1000}`)
	srv.Command(id, token, `{"action":"step"}`)
	if s := srv.GetJSON("/api/sessions/" + id); s["last_seq"] == nil {
		t.Errorf("GET /api/sessions/%s has no last_seq: %v", id, s)
	}
	if code, _ := srv.Request(http.MethodPost, "/api/sessions/"+id+"/commands", "wrong-token", `{"action":"step"}`); code < 400 {
		t.Errorf("a command with a wrong token answered %d, want 4xx", code)
	}

	tab.Eval(`setTimeout(() => { throw new Error("boom") }, 0)`, nil)
	got := tab.WaitError("boom")
	if !strings.Contains(got, "uncaught exception") || !slices.Contains(tab.Errors(), got) {
		t.Errorf("recorded %q; Errors() = %q", got, tab.Errors())
	}
	if bad := tab.Unexpected(); len(bad) > 0 {
		t.Errorf("the allowed error counts as unexpected: %q", bad)
	}
}

// TestConsoleErrorIsReported: a console.error, with no allow-list, is
// recorded as an error the test would fail on. e2etest.ExpectErrors keeps it from
// failing this test, so the test can look at it.
func TestConsoleErrorIsReported(t *testing.T) {
	t.Parallel()
	tab := e2etest.NewTab(t, 800, 600, e2etest.ExpectErrors())
	tab.Navigate("about:blank")
	tab.Eval(`console.error("kaboom", 42, {a: 1})`, nil)
	got := tab.WaitError("kaboom")
	if !strings.HasPrefix(got, "console.error: kaboom 42") {
		t.Errorf("recorded %q, want it to start with \"console.error: kaboom 42\"", got)
	}
	if bad := tab.Unexpected(); !slices.Contains(bad, got) {
		t.Errorf("the console.error is not among the errors the test would fail on: %q", bad)
	}
	tab.Eval(`console.log("fine"); console.warn("fine too")`, nil)
	tab.Eval(`0`, nil) // a round trip: any event before it has been recorded
	if errs := tab.Errors(); len(errs) != 1 {
		t.Errorf("Errors() = %q, want only the console.error (log and warn are not errors)", errs)
	}
}

// helperEnv makes TestFailingTabHelper fail on purpose, in a child process.
const helperEnv = "FENCELAB_E2E_FAILING_HELPER"

// TestFailingTabHelper is the child of TestFailureIsReported; it does
// nothing in a normal run.
func TestFailingTabHelper(t *testing.T) {
	t.Parallel()
	if os.Getenv(helperEnv) != "1" {
		t.Skip("runs only as the child of TestFailureIsReported")
	}
	tab := e2etest.NewTab(t, 640, 480)
	tab.Navigate("about:blank")
	tab.Eval(`console.error("unexpected-kaboom")`, nil)
	tab.WaitError("unexpected-kaboom")
}

// TestFailureIsReported runs TestFailingTabHelper in a child test process
// and checks, from outside, that a console.error without an allow-list
// fails the test at cleanup and leaves a screenshot.
func TestFailureIsReported(t *testing.T) {
	t.Parallel()
	if e2etest.FindChromium() == "" {
		e2etest.RequireBrowser(t) // skips, or fails on CI
	}
	shot, _ := filepath.Abs(filepath.Join(e2etest.ArtifactsDir, "TestFailingTabHelper-640.png"))
	os.Remove(shot)
	t.Cleanup(func() { os.Remove(shot) })

	cmd := exec.Command(os.Args[0], "-test.run", "^TestFailingTabHelper$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "DATABASE_URL="+pgtest.DSN(t))
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the child test did not finish within 2 minutes:\n%s", out)
	}
	text := string(out)
	if err == nil {
		t.Fatalf("the child test passed; want it to fail on the console.error:\n%s", text)
	}
	for _, want := range []string{
		"--- FAIL: TestFailingTabHelper",
		"reported 1 JavaScript error(s)",
		"console.error: unexpected-kaboom",
		"screenshot of the failed test",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the child's output lacks %q:\n%s", want, text)
		}
	}
	if fi, err := os.Stat(shot); err != nil || fi.Size() == 0 {
		t.Errorf("no screenshot at %s: %v", shot, err)
	} else if b, _ := os.ReadFile(shot); !strings.HasPrefix(string(b), "\x89PNG") {
		t.Errorf("%s is not a PNG", shot)
	}
}

// fakePage stands in for the playground: the same data-testid and
// window.fencelab conventions, so every e2etest.Tab helper can be exercised.
const fakePage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>fake playground</title>
<link rel="icon" href="data:,">
<style>
  body { font: 16px sans-serif; margin: 0; }
  .gone { display: none; }
  .tall { height: 3000px; background: linear-gradient(#fff, #ccd); }
</style></head>
<body>
  <button data-testid="run">Run</button>
  <button data-testid="step" aria-keyshortcuts="ArrowRight">Step</button>
  <select data-testid="ordering">
    <option value="new-owner-first">new owner first</option>
    <option value="zombie-first">zombie first</option>
  </select>
  <label><input type="checkbox" data-testid="guard-epoch-check" checked> epoch check</label>
  <input data-testid="lease" type="number" value="1000">
  <div data-testid="outcome" data-verdict="none">no outcome yet</div>
  <div data-testid="hidden" class="gone">hidden</div>
  <div class="tall"></div>
  <script>
    const st = {clicks: 0, ordering: "new-owner-first", epochCheck: true, lease: "1000", keys: [], events: [], outcome: null};
    const $ = id => document.querySelector('[data-testid="' + id + '"]');
    $("run").addEventListener("click", () => {
      st.clicks++;
      setTimeout(() => { st.outcome = {safe: true, verdict: "safe"}; $("outcome").textContent = "Safe: run " + st.clicks; $("outcome").dataset.verdict = "safe"; }, 200);
    });
    $("ordering").addEventListener("input", e => st.events.push("input:" + e.target.value));
    $("ordering").addEventListener("change", e => { st.ordering = e.target.value; st.events.push("change:" + e.target.value); });
    $("guard-epoch-check").addEventListener("change", e => { st.epochCheck = e.target.checked; });
    $("lease").addEventListener("change", e => { st.lease = e.target.value; });
    document.addEventListener("keydown", e => st.keys.push(e.key));
    // Ready a little later, as a page that first loads its session would be.
    setTimeout(() => { window.fencelab = {ready: true, state: () => JSON.parse(JSON.stringify(st))}; }, 100);
  </script>
</body></html>`

// TestTabHelpers drives every e2etest.Tab helper against fakePage.
func TestTabHelpers(t *testing.T) {
	t.Parallel()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, fakePage)
	}))
	t.Cleanup(page.Close)

	tab := e2etest.NewTab(t, 320, 640)
	tab.Navigate(page.URL)
	tab.WaitReady()

	if got := tab.Text("outcome"); got != "no outcome yet" {
		t.Errorf(`Text("outcome") = %q`, got)
	}
	if got := tab.Attr("outcome", "data-verdict"); got != "none" {
		t.Errorf(`Attr("outcome", "data-verdict") = %q`, got)
	}
	if got := tab.Attr("outcome", "no-such-attribute"); got != "" {
		t.Errorf(`Attr of a missing attribute = %q, want ""`, got)
	}
	if !tab.Visible("run") || tab.Visible("hidden") || tab.Visible("no-such-element") {
		t.Errorf(`Visible: run %v, hidden %v, missing %v; want true, false, false`,
			tab.Visible("run"), tab.Visible("hidden"), tab.Visible("no-such-element"))
	}

	tab.Click("run")
	tab.PollState(`s.outcome.safe === true`, 5*time.Second) // throws until the outcome is there
	if got := tab.Text("outcome"); got != "Safe: run 1" {
		t.Errorf(`Text("outcome") after the run = %q`, got)
	}
	tab.PollJS(`document.querySelector('[data-testid="outcome"]').dataset.verdict === "safe"`, 0)

	tab.SetValue("ordering", "zombie-first")
	tab.SetValue("lease", "300")
	tab.SetChecked("guard-epoch-check", false)
	tab.SetChecked("guard-epoch-check", false) // already unchecked: no change
	s := tab.State()
	if s["ordering"] != "zombie-first" || s["epochCheck"] != false || s["lease"] != "300" || s["clicks"] != float64(1) {
		t.Errorf("state after the edits = %v", s)
	}
	if ev := fmt.Sprint(s["events"]); ev != "[input:zombie-first change:zombie-first]" {
		t.Errorf("select events = %s, want one input and one change", ev)
	}

	tab.Eval(`document.querySelector('[data-testid="step"]').focus()`, nil)
	if got := tab.Focused(); got != "step" {
		t.Errorf("Focused() = %q, want step", got)
	}
	for _, k := range []string{"ArrowRight", "ArrowLeft", " ", "r", "?", "Escape", "PageDown", "Tab"} {
		tab.Press(k)
	}
	tab.PollState(`s.keys.length === 8`, 5*time.Second)
	if got := fmt.Sprint(tab.State()["keys"]); got != "[ArrowRight ArrowLeft   r ? Escape PageDown Tab]" {
		t.Errorf("keys the page saw: %s", got)
	}
	if got := tab.Focused(); got != "ordering" {
		t.Errorf("Focused() after Tab = %q, want ordering (the next focusable element)", got)
	}

	path := tab.Screenshot("harness-fake-page-320")
	t.Cleanup(func() { os.Remove(path) })
	b, err := os.ReadFile(path)
	if err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
		t.Fatalf("the screenshot %s is not a PNG: %v", path, err)
	}
	// A full-page PNG: 320 wide, and taller than the 640px viewport (the
	// page is over 3000px tall). The PNG header holds width and height.
	w := int(b[16])<<24 | int(b[17])<<16 | int(b[18])<<8 | int(b[19])
	h := int(b[20])<<24 | int(b[21])<<16 | int(b[22])<<8 | int(b[23])
	if w != 320 || h < 3000 {
		t.Errorf("the screenshot is %dx%d, want 320 wide and the whole page (≥3000) tall", w, h)
	}
	if errs := tab.Errors(); len(errs) > 0 {
		t.Errorf("errors on the fake page: %q", errs)
	}
}
