package engines

// The core of the page in three engines: Chromium (through the e2etest.Tab of
// harness_tab_test.go), WebKit (WebKitGTK's MiniBrowser, through W3C
// WebDriver classic: engine_webdriver_test.go) and Firefox ESR (through
// WebDriver BiDi: engine_bidi_test.go). Many readers are on an iPhone or in
// Firefox, so the predict reveal, a run in both orderings, the embed as a
// blog pastes it on a phone and present mode run in each, by the same test
// body, through one small interface (driver).
//
// Lifetimes: each engine's test starts its browser (and for WebKit an X
// server of its own) and stops it in its cleanup, so everything it started
// carries pgtest's suite mark and is covered by pgtest's check at the end
// of the suite; each engine's processes also carry an engine mark
// (FENCELAB_E2E_ENGINE) and run in process groups of their own, and the
// engine's cleanup kills the groups and fails the test if any marked
// process is still alive 10s later. Each process has a parent-death signal
// (Linux), so a test binary that dies takes them with it.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/e2e/e2etest"
)

// driver is one window of one engine, opened for one test. Every method
// takes a timeout; errors are returned, and the engineTab turns them into
// test failures. Nobody calls a driver's methods concurrently.
type driver interface {
	// Navigate loads url and waits for its load event.
	Navigate(url string, timeout time.Duration) error
	// Eval evaluates a JavaScript expression in the top page, awaits it
	// if it is a promise and returns JSON.stringify of its value ("null"
	// for undefined). An exception is an error.
	Eval(js string, timeout time.Duration) (json.RawMessage, error)
	// Click clicks the centre of the first element matching the CSS
	// selector with the pointer, as a person would; the caller has waited
	// for it to be visible.
	Click(css string, timeout time.Duration) error
	// Key presses and releases one key on whatever has the focus: a
	// single character, or a name of keyCodes.
	Key(key string, timeout time.Duration) error
	// SetViewport makes the page's viewport w×h CSS pixels, or as near as
	// the engine allows, and returns what it got.
	SetViewport(w, h int, timeout time.Duration) (int, int, error)
	// Screenshot returns a PNG of the viewport.
	Screenshot(timeout time.Duration) ([]byte, error)
	// Errors returns the JavaScript errors (uncaught exceptions, rejected
	// promises nobody handled, console.error) the engine reported so far.
	Errors() []string
}

// keyCodes are the WebDriver key values (W3C WebDriver, "Keyboard
// actions") of the keys the tests press by name.
var keyCodes = map[string]string{
	"PageUp":     "\uE00E",
	"PageDown":   "\uE00F",
	"End":        "\uE010",
	"Home":       "\uE011",
	"ArrowLeft":  "\uE012",
	"ArrowUp":    "\uE013",
	"ArrowRight": "\uE014",
	"ArrowDown":  "\uE015",
	"Escape":     "\uE00C",
	"Enter":      "\uE007",
	"Tab":        "\uE004",
	"Space":      " ",
}

// webdriverKey is key as a WebDriver key value.
func webdriverKey(key string) (string, error) {
	if k, ok := keyCodes[key]; ok {
		return k, nil
	}
	if len([]rune(key)) == 1 {
		return key, nil
	}
	return "", fmt.Errorf("key %q: not a single character nor a key name the tests know", key)
}

// engine is one browser engine under test.
type engine struct {
	name string
	// start starts the engine for the test t (an engine's test): it skips
	// t (or fails it, with CI=true) when the engine is missing, and stops
	// the engine in t's cleanup. It returns open, which opens a window of
	// the engine for a subtest, closed by the subtest's cleanup.
	start func(t *testing.T) (open func(t *testing.T, w, h int) driver)
}

var engines = []engine{
	{"chromium", startChromiumEngine},
	{"webkit", startWebKitEngine},
	{"firefox", startFirefoxEngine},
}

// skipOrFail skips t with what to install, or fails it with CI=true.
func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("e2e: %s; CI=true, so this is a failure, not a skip", msg)
	}
	t.Skip(msg)
}

// TestEngines runs the core of the page in Chromium, WebKit and Firefox:
// the predict reveal, both article orderings to their verdicts, the embed
// pasted in a blog on another origin at 375 px, present mode, and Build
// it: a refusal, then a check (engine_build_test.go).
func TestEngines(t *testing.T) {
	t.Parallel()
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel() // each engine has its browser and its server
			t0 := time.Now()
			open := eng.start(t)
			t.Logf("e2e: %s started in %v", eng.name, time.Since(t0).Round(time.Millisecond))
			blog := newBlog(t)
			srv := e2etest.StartServer(t, "--allow-origin", blog.URL)
			page := func(t *testing.T, w, h int) *engineTab {
				tab := &engineTab{t: t, engine: eng.name, d: open(t, w, h), w: w, h: h}
				// Runs before the window's own cleanup closes it.
				t.Cleanup(tab.finish)
				return tab
			}
			t.Run("predict", func(t *testing.T) { enginePredict(t, srv.WithT(t), page) })
			for _, ordering := range []string{"new-owner-first", "zombie-first"} {
				t.Run(ordering, func(t *testing.T) { engineOrdering(t, srv.WithT(t), page, ordering) })
			}
			t.Run("embed-375", func(t *testing.T) { engineEmbed(t, srv.WithT(t), blog, page) })
			t.Run("present", func(t *testing.T) { enginePresent(t, srv.WithT(t), page) })
			t.Run("build", func(t *testing.T) { engineBuild(t, srv.WithT(t), page) })
			t.Logf("e2e: %s: every case in %v", eng.name, time.Since(t0).Round(time.Millisecond))
		})
	}
}

// enginePredict: the article's question, a pick, "Run it with leases
// alone", and the answer revealed from that real run (as
// TestPredict_TheRevealComesFromARealLeasesAloneRun).
func enginePredict(t *testing.T, srv *e2etest.Server, page func(*testing.T, int, int) *engineTab) {
	tab := page(t, 1280, 800)
	tab.OpenLive(srv.URL + "/")
	if got := tab.Text("question"); !strings.Contains(got, "With leases alone, what happens to A's commit?") {
		t.Fatalf("the question is %q", got)
	}
	if tab.Attr("verdict", "data-state") != "none" || tab.Text("reveal") != "" || tab.Visible("compare") {
		t.Fatalf("before any run the page shows an outcome: %q / %q", tab.Text("verdict"), tab.Text("reveal"))
	}
	tab.Click("predict-succeeds")
	tab.Click("predict-run")
	tab.PollState(`s.alone !== null && s.alone !== undefined`, 60*time.Second)
	var alone map[string]any
	tab.Eval(`window.fencelab.state().alone`, &alone)
	if alone["answer"] != "succeeds" || alone["safe"] != false || alone["ordering"] != "new-owner-first" {
		t.Fatalf("the leases-alone run: answer %v, safe %v, ordering %v", alone["answer"], alone["safe"], alone["ordering"])
	}
	if got := tab.Text("predict-result"); !strings.Contains(got, "✓ Right.") || !strings.Contains(got, "With leases alone: It succeeds, and A's result replaces B's") {
		t.Errorf("the prediction's result says %q", got)
	}
	if got := tab.Attr("predict-result", "data-right"); got != "true" {
		t.Errorf("the right pick is marked right=%q", got)
	}
	reveal := tab.Text("compare-alone")
	for _, want := range []string{"Worker A's commit landed on top of worker B's work", "completed twice"} {
		if !strings.Contains(reveal, want) {
			t.Errorf("the leases-alone side does not say %q:\n%s", want, reveal)
		}
	}
	if got := tab.Attr("compare-alone", "data-state"); got != "unsafe" {
		t.Errorf("the leases-alone side is marked %q", got)
	}
	tab.Screenshot("predict")
}

// engineOrdering runs one article ordering from the page to its verdict,
// and keeps a 1280×800 picture of it.
func engineOrdering(t *testing.T, srv *e2etest.Server, page func(*testing.T, int, int) *engineTab, ordering string) {
	call := map[string]string{"new-owner-first": "rejected", "zombie-first": "accepted_then_superseded"}[ordering]
	tab := page(t, 1280, 800)
	tab.OpenLive(srv.URL + "/?ordering=" + ordering + "&mode=auto&lease=300&pace=0")
	tab.Click("run")
	tab.PollState(`s.outcome !== null && s.outcome !== undefined`, 60*time.Second)
	var o map[string]any
	tab.Eval(`window.fencelab.state().outcome`, &o)
	if o["safe"] != true || o["ordering"] != ordering || o["zombie_receiver_call"] != call {
		t.Fatalf("outcome: safe %v, ordering %v, zombie's call %v; want true, %s, %s (%v)", o["safe"], o["ordering"], o["zombie_receiver_call"], ordering, call, o["verdict"])
	}
	if got := tab.Text("verdict"); !strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(got, "✓")), "Safe") || tab.Attr("verdict", "data-state") != "safe" {
		t.Errorf("verdict %q (%s)", got, tab.Attr("verdict", "data-state"))
	}
	if got := tab.Text("reveal"); got == "" {
		t.Errorf("no reveal after the verdict")
	}
	tab.Screenshot("verdict-" + ordering)
}

// engineEmbed pastes the page's own embed snippet into a blog post on
// another origin, read on a phone (375 px), and runs it from the blog;
// the frame tells the blog it is ready, its height and its verdict (as
// TestEmbed_HostPageOnAnotherOrigin).
func engineEmbed(t *testing.T, srv *e2etest.Server, blog *blogServer, page func(*testing.T, int, int) *engineTab) {
	tab := page(t, 375, 800)
	// The snippet, as the share dialog gives it.
	tab.OpenLive(srv.URL + "/?ordering=zombie-first&mode=auto&lease=300&pace=0")
	tab.Click("share")
	tab.WaitVisible("embed-code")
	var snippet string
	tab.Eval(`document.querySelector('[data-testid="embed-code"]').value`, &snippet)
	if !strings.Contains(snippet, "<iframe") || !strings.Contains(snippet, srv.URL+"/?embed=1&") {
		t.Fatalf("the embed snippet is %q", snippet)
	}
	blog.Set(fmt.Sprintf(`<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>A blog post</title>
<style>body{margin:0;font:16px/1.5 serif} article{max-width:375px;padding:0 8px;box-sizing:border-box}</style></head>
<body><article><h1>Fencing tokens</h1><p>A worker stalls past its lease. Try it:</p>
%s
<p>The end of the post.</p></article>
<script>
  window.msgs = [];
  addEventListener("message", (e) => {
    if (e.origin === %q && e.data && e.data.source === "fencelab") window.msgs.push(e.data);
  });
  window.start = () => document.querySelector("iframe").contentWindow.postMessage({type: "run", ordering: "zombie-first", mode: "auto", lease_ms: 300, pace_ms: 0}, %q);
</script></body></html>`, snippet, srv.URL, srv.URL))
	tab.Navigate(blog.URL + "/post")
	tab.Poll(`window.msgs && window.msgs.some(m => m.type === "ready") && window.msgs.some(m => m.type === "height")`, 30*time.Second)
	var h0, w float64
	tab.Eval(`document.querySelector("iframe").getBoundingClientRect().height`, &h0)
	tab.Eval(`document.querySelector("iframe").getBoundingClientRect().width`, &w)
	// width="100%" of the column, less its padding (and, where the engine
	// draws one, less the page's scroll bar).
	if w < 320 || w > 359 {
		t.Errorf("the frame is %v px wide in a 375 px column, want 320–359", w)
	}
	t.Logf("e2e (%s): the frame is %v px wide", tab.engine, w)
	tab.Eval(`window.start(), true`, nil)
	tab.Poll(`window.msgs.some(m => m.type === "verdict")`, 60*time.Second)
	var v map[string]any
	tab.Eval(`window.msgs.find(m => m.type === "verdict")`, &v)
	o, _ := v["outcome"].(map[string]any)
	if v["safe"] != true || o == nil || o["ordering"] != "zombie-first" || o["zombie_receiver_call"] != "accepted_then_superseded" {
		t.Fatalf("verdict message: %v", v)
	}
	var all []any
	tab.Eval(`window.msgs`, &all)
	if k := e2etest.SecretKey(all); k != "" {
		t.Fatalf("a message to the blog carries a %q field: %v", k, all)
	}
	// The frame grows to its content as the run unfolds.
	tab.Poll(fmt.Sprintf(`document.querySelector("iframe").getBoundingClientRect().height > %v`, h0), 10*time.Second)
	var overflow bool
	tab.Eval(`document.documentElement.scrollWidth > innerWidth + 1`, &overflow)
	if overflow {
		t.Errorf("the blog scrolls sideways with the embed in it")
	}
	tab.Screenshot("embed-375")
}

// enginePresent: the projector view at 1920×1080, started by Space and
// stepped by PageDown to its verdict, PageUp going back (as
// TestPresent_StepsByPageDown).
func enginePresent(t *testing.T, srv *e2etest.Server, page func(*testing.T, int, int) *engineTab) {
	tab := page(t, 1920, 1080)
	tab.Navigate(srv.URL + "/?present=1&ordering=new-owner-first&mode=step&lease=300")
	tab.WaitReady()
	tab.PollState(`s.connection === "live" && s.present === true`, 30*time.Second)
	if tab.Visible("guard-epoch-check") {
		t.Error("present mode shows the guard switches")
	}
	tab.Press(" ")
	tab.PollState(`s.run && s.run.mode === "step" && s.workers.length === 2`, 30*time.Second)
	for i := 1; i <= 8; i++ {
		tab.Press("PageDown")
		tab.PollState(fmt.Sprintf(`s.run.stepIndex >= %d`, i), 30*time.Second)
	}
	tab.PollState(`s.outcome && s.outcome.safe === true`, 30*time.Second)
	var at map[string]any
	tab.Eval(`({scrollY, height: document.documentElement.scrollHeight, focus: document.activeElement && (document.activeElement.dataset.testid || document.activeElement.tagName)})`, &at)
	t.Logf("e2e (%s): at the verdict the page is scrolled to %v of %v px, the focus on %v", tab.engine, at["scrollY"], at["height"], at["focus"])
	tab.Screenshot("present-1920")
	tab.Press("PageUp")
	tab.PollState(`s.view.scrub !== null`, 5*time.Second)
}

// ---------------------------------------------------------------------------
// The blog: a host page on an origin of its own.

// blogServer serves one page, set by the test, on another origin than the
// playground's: it must exist before the server starts, which allows it.
type blogServer struct {
	URL  string
	mu   sync.Mutex
	html string
}

func newBlog(t *testing.T) *blogServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blogServer{URL: "http://" + ln.Addr().String(), html: "<!doctype html><title>blog</title>"}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/favicon.ico" {
			w.Header().Set("Content-Type", "image/svg+xml")
			fmt.Fprint(w, `<svg xmlns="http://www.w3.org/2000/svg"/>`)
			return
		}
		b.mu.Lock()
		html := b.html
		b.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, html)
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return b
}

// Set replaces the blog's page.
func (b *blogServer) Set(html string) {
	b.mu.Lock()
	b.html = html
	b.mu.Unlock()
}

// ---------------------------------------------------------------------------
// engineTab: the e2etest.Tab's helpers, over a driver.

// engineTab is a window of one engine in one test. Its helpers fail the
// test when what they wait for does not happen in time. At the test's end
// it fails the test on any JavaScript error the engine reported or the
// page recorded (window.fencelab.state().errors).
type engineTab struct {
	t      *testing.T
	engine string
	d      driver
	w, h   int
	// allow are substrings of the errors the test expects (a refused
	// command's 400, as the browser logs it); finish lets them pass. Set
	// them with Allow.
	allow []string
}

// Allow makes errors containing any of substrings harmless, in this
// engine's own list and, for Chromium, in its e2etest.Tab's.
func (tab *engineTab) Allow(substrings ...string) {
	tab.allow = append(tab.allow, substrings...)
	if c, ok := tab.d.(*chromiumDriver); ok {
		c.tab.Allow(substrings...)
	}
}

// Navigate loads url (≤30s).
func (tab *engineTab) Navigate(url string) {
	tab.t.Helper()
	if err := tab.d.Navigate(url, e2etest.DefaultTimeout); err != nil {
		tab.t.Fatalf("e2e (%s): Navigate(%s): %v", tab.engine, url, err)
	}
}

// OpenLive opens a page of the playground and waits until its socket is live.
func (tab *engineTab) OpenLive(url string) {
	tab.t.Helper()
	tab.Navigate(url)
	tab.WaitReady()
	tab.PollState(`s.connection === "live"`, 30*time.Second)
}

// Eval evaluates js and decodes its JSON value into out (nil: ignore it).
func (tab *engineTab) Eval(js string, out any) {
	tab.t.Helper()
	raw, err := tab.d.Eval(js, e2etest.DefaultTimeout)
	if err != nil {
		tab.t.Fatalf("e2e (%s): Eval(%s): %v", tab.engine, js, err)
	}
	if out == nil {
		return
	}
	if err := json.Unmarshal(raw, out); err != nil {
		tab.t.Fatalf("e2e (%s): Eval(%s): cannot decode %s into %T: %v", tab.engine, js, raw, out, err)
	}
}

// describe evaluates js for an error message; it never fails the test.
func (tab *engineTab) describe(js string) string {
	raw, err := tab.d.Eval(js, 5*time.Second)
	return e2etest.Described(raw, err)
}

// pollChunk is how long one evaluation waits in the page for a predicate,
// re-checking it every e2etest.PollInterval, before the harness asks again: short
// enough that a navigation or a slow engine costs one chunk at most.
const pollChunk = time.Second

// poll waits until the JavaScript expression is truthy and reports whether
// it became so within timeout. It polls in the page (a timer every
// e2etest.PollInterval, in a promise of ≤pollChunk), asking again until the
// deadline; an evaluation that fails (the page is navigating) counts as
// false.
func (tab *engineTab) poll(expr string, timeout time.Duration) bool {
	js := fmt.Sprintf(`new Promise((resolve) => {
		const t0 = Date.now();
		const check = () => {
			let v = false;
			try { v = !!(%s); } catch (e) { v = false; }
			if (v) resolve(true);
			else if (Date.now() - t0 >= %d) resolve(false);
			else setTimeout(check, %d);
		};
		check();
	})`, expr, pollChunk.Milliseconds(), e2etest.PollInterval.Milliseconds())
	deadline := time.Now().Add(timeout)
	for {
		raw, err := tab.d.Eval(js, pollChunk+10*time.Second)
		if err == nil && string(raw) == "true" {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// Poll waits until the JavaScript expression is truthy (≤timeout).
func (tab *engineTab) Poll(expr string, timeout time.Duration) {
	tab.t.Helper()
	if !tab.poll(expr, timeout) {
		tab.t.Fatalf("e2e (%s): Poll(%s): not true within %v", tab.engine, expr, timeout)
	}
}

// WaitReady waits (≤30s) until window.fencelab.ready === true.
func (tab *engineTab) WaitReady() {
	tab.t.Helper()
	if !tab.poll(`window.fencelab && window.fencelab.ready === true`, e2etest.DefaultTimeout) {
		tab.t.Fatalf("e2e (%s): WaitReady: window.fencelab.ready was not true within %v (errors: %q)", tab.engine, e2etest.DefaultTimeout, tab.d.Errors())
	}
}

// PollState waits until jsExpr, over s = window.fencelab.state(), is true
// (as e2etest.Tab.PollState).
func (tab *engineTab) PollState(jsExpr string, timeout time.Duration) {
	tab.t.Helper()
	expr := `(() => {
		const f = window.fencelab;
		if (!f || f.ready !== true || typeof f.state !== "function") { window.__e2ePollError = "window.fencelab is not ready"; return false; }
		let s;
		try { s = f.state(); } catch (e) { window.__e2ePollError = "window.fencelab.state() threw: " + e; return false; }
		try { if (!(` + jsExpr + `)) return false; } catch (e) { window.__e2ePollError = String(e); return false; }
		// What the state holds is on the page only once a frame has drawn it.
		if (s.drawn === false) { window.__e2ePollError = "the page has not drawn this state yet"; return false; }
		return true;
	})()`
	if !tab.poll(expr, timeout) {
		tab.t.Fatalf("e2e (%s): PollState(%s): not true within %v\n  last exception: %s\n  last state: %s", tab.engine, jsExpr, timeout,
			tab.describe(`window.__e2ePollError || "none"`),
			tab.describe(`window.fencelab && typeof window.fencelab.state === "function" ? window.fencelab.state() : "no window.fencelab.state"`))
	}
}

// WaitVisible waits (≤30s) until the element exists and is visible.
func (tab *engineTab) WaitVisible(testid string) {
	tab.t.Helper()
	if !tab.poll(engineVisibleJS(testid), e2etest.DefaultTimeout) {
		tab.t.Fatalf("e2e (%s): WaitVisible(%q): not visible within %v", tab.engine, testid, e2etest.DefaultTimeout)
	}
}

// Visible reports, now, whether the element exists and is visible.
func (tab *engineTab) Visible(testid string) bool {
	tab.t.Helper()
	var v bool
	tab.Eval(engineVisibleJS(testid), &v)
	return v
}

// engineVisibleJS is visibleJS for every engine: Element.checkVisibility
// where there is one, the computed style where there is not.
func engineVisibleJS(testid string) string {
	return `(() => {
		const el = document.querySelector(` + e2etest.JSString(e2etest.Sel(testid)) + `);
		if (!el) return false;
		const r = el.getBoundingClientRect();
		if (r.width === 0 && r.height === 0) return false;
		if (el.checkVisibility) return el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true, opacityProperty: true, visibilityProperty: true, contentVisibilityAuto: true});
		for (let e = el; e; e = e.parentElement) {
			const cs = getComputedStyle(e);
			if (cs.display === "none" || cs.visibility === "hidden" || cs.opacity === "0") return false;
		}
		return true;
	})()`
}

// Click waits (≤30s) for the element to be visible, scrolls it into the
// middle of the viewport and clicks its centre with the pointer. It then
// waits for the click to arrive: on a slow machine a pointer press can
// land while the page is still laying out (the element moved between the
// driver reading its place and the press), and then no click event fires.
// A person would click again; so does the test, at most three times, and
// each miss is logged with the element that was at the centre.
func (tab *engineTab) Click(testid string) {
	tab.t.Helper()
	sel := e2etest.JSString(e2etest.Sel(testid))
	for try := 0; ; try++ {
		tab.WaitVisible(testid)
		tab.Eval(`(() => { const el = document.querySelector(`+sel+`); el.scrollIntoView({block: "center", inline: "center", behavior: "instant"});
			const seen = window.__fencelabClick = {n: 0};
			addEventListener("click", (e) => { const now = document.querySelector(`+sel+`); if (now && now.contains(e.target)) seen.n++; }, {capture: true});
			return true; })()`, nil)
		err := tab.d.Click(e2etest.Sel(testid), e2etest.DefaultTimeout)
		// The page may redraw the element between finding it and clicking
		// it: a person would click the new one, and so does the test.
		if err != nil && try < 3 && isStale(err) {
			continue
		}
		if err != nil {
			tab.t.Fatalf("e2e (%s): Click(%q): %v", tab.engine, testid, err)
		}
		arrived, onTop := tab.clickArrived(sel)
		if arrived {
			return
		}
		if try == 3 {
			tab.t.Fatalf("e2e (%s): Click(%q): no click reached it in 4 tries; at its centre: %s", tab.engine, testid, onTop)
		}
		tab.t.Logf("e2e (%s): Click(%q): the click did not reach it (at its centre: %s); clicking again", tab.engine, testid, onTop)
	}
}

// clickArrived waits (≤3s) for the click Click armed to be seen, and says
// what element is at the centre of sel when it is not. A page that went
// on to another document took the click.
func (tab *engineTab) clickArrived(sel string) (bool, string) {
	var onTop string
	deadline := time.Now().Add(3 * time.Second)
	for {
		raw, err := tab.d.Eval(`window.__fencelabClick ? window.__fencelabClick.n : -1`, e2etest.DefaultTimeout)
		if err != nil && navigating(err) {
			return true, "" // the document went as it was asked: the click took it elsewhere
		}
		var n int
		if err != nil || json.Unmarshal(raw, &n) != nil {
			tab.t.Fatalf("e2e (%s): the click's arrival: %v %s", tab.engine, err, raw)
		}
		if n != 0 {
			return true, ""
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	tab.Eval(`(() => { const el = document.querySelector(`+sel+`); if (!el) return "nothing: it is gone";
		const r = el.getBoundingClientRect(), top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
		return top ? top.outerHTML.slice(0, 160) : "nothing"; })()`, &onTop)
	return false, onTop
}

// navigating reports whether an evaluation failed because the document
// went away under it: a click that submitted a form or followed a link.
func navigating(err error) bool {
	s := err.Error()
	for _, sub := range []string{"navigated or closed", "Execution context was destroyed", "Cannot find context", "no such frame", "context was discarded"} {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// isStale reports whether a click failed because the element was redrawn.
func isStale(err error) bool {
	s := err.Error()
	for _, sub := range []string{"stale element", "no such element", "no such node", "Could not find node", "detached", "intercepted"} {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// Press presses one key: a single character or a name of keyCodes.
func (tab *engineTab) Press(key string) {
	tab.t.Helper()
	if err := tab.d.Key(key, e2etest.DefaultTimeout); err != nil {
		tab.t.Fatalf("e2e (%s): Press(%q): %v", tab.engine, key, err)
	}
}

// Text waits (≤30s) for the element and returns its innerText, trimmed.
func (tab *engineTab) Text(testid string) string {
	tab.t.Helper()
	var s string
	tab.onElement("Text", testid, `(el) => el.innerText ?? el.textContent`, &s)
	return strings.TrimSpace(s)
}

// Attr waits (≤30s) for the element and returns its attribute, or "".
func (tab *engineTab) Attr(testid, name string) string {
	tab.t.Helper()
	var s string
	tab.onElement("Attr", testid, `(el) => el.getAttribute(`+e2etest.JSString(name)+`) ?? ""`, &s)
	return s
}

// onElement waits (≤30s) for the element and decodes fn(el) into out.
func (tab *engineTab) onElement(what, testid, fn string, out any) {
	tab.t.Helper()
	if !tab.poll(`document.querySelector(`+e2etest.JSString(e2etest.Sel(testid))+`)`, e2etest.DefaultTimeout) {
		tab.t.Fatalf("e2e (%s): %s(%q): no element %s within %v", tab.engine, what, testid, e2etest.Sel(testid), e2etest.DefaultTimeout)
	}
	tab.Eval(`(`+fn+`)(document.querySelector(`+e2etest.JSString(e2etest.Sel(testid))+`))`, out)
}

// Screenshot saves the viewport as e2e/artifacts/engine-<engine>-<name>.png
// and logs its path.
func (tab *engineTab) Screenshot(name string) string {
	tab.t.Helper()
	path, err := tab.saveScreenshot(name)
	if err != nil {
		tab.t.Fatalf("e2e (%s): Screenshot(%q): %v", tab.engine, name, err)
	}
	tab.t.Logf("e2e: screenshot %s", path)
	return path
}

func (tab *engineTab) saveScreenshot(name string) (string, error) {
	png, err := tab.d.Screenshot(e2etest.DefaultTimeout)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(e2etest.ArtifactsDir, 0o755); err != nil {
		return "", err
	}
	path, err := filepath.Abs(filepath.Join(e2etest.ArtifactsDir, e2etest.Sanitize("engine-"+tab.engine+"-"+name)+".png"))
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, png, 0o644)
}

// finish is run by the driver's cleanup while the page is still up: it
// fails the test on any JavaScript error, and saves a screenshot of a
// failed test.
func (tab *engineTab) finish() {
	t := tab.t
	var pageErrs []string
	if raw, err := tab.d.Eval(`window.fencelab && typeof window.fencelab.state === "function" ? window.fencelab.state().errors : []`, 5*time.Second); err == nil {
		_ = json.Unmarshal(raw, &pageErrs)
	}
	var errs []string
	for _, e := range append(tab.d.Errors(), pageErrs...) {
		if !slices.ContainsFunc(tab.allow, func(a string) bool { return strings.Contains(e, a) }) {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		t.Errorf("e2e (%s): the page reported %d JavaScript error(s):\n  %s", tab.engine, len(errs), strings.Join(errs, "\n  "))
	}
	if t.Failed() {
		if path, err := tab.saveScreenshot("FAILED-" + e2etest.Sanitize(t.Name())); err == nil {
			t.Logf("e2e (%s): screenshot of the failed test: %s", tab.engine, path)
		}
	}
}
