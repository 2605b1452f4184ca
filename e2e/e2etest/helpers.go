package e2etest

// The Tab's helpers select by data-testid, the attribute the templates and
// the component tests share, and wait by polling a value the page exposes,
// never by sleeping: a test goes as fast as the page, and a failure says
// what it waited for and, where it can, what the page held instead.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// PollInterval is how often a poll re-evaluates its predicate in the page.
// (A timer, not requestAnimationFrame: a window that is not drawn gets no
// animation frames, and the poll would never return.)
const PollInterval = 20 * time.Millisecond

// sel is the CSS selector of a data-testid.
func Sel(testid string) string { return `[data-testid="` + cssEscape(testid) + `"]` }

// cssEscape escapes a value for a double-quoted CSS attribute selector.
func cssEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\a `).Replace(s)
}

// JSString is s as a JavaScript string literal.
func JSString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Navigate loads url in the tab and waits for its load event (≤30s). It
// fails on a network error or an HTTP status of 400 or more. (For a change
// of the fragment alone there is no load: use Eval("location.hash = …").)
func (tab *Tab) Navigate(url string) {
	tab.t.Helper()
	resp, err := RunAction(tab, DefaultTimeout, chromedp.NavigateResponse(url))
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
	if !tab.poll(`window.fencelab && window.fencelab.ready === true`, DefaultTimeout) {
		tab.t.Fatalf("e2e: WaitReady: window.fencelab.ready was not true within %v (window.fencelab: %s)",
			DefaultTimeout, tab.describe(`window.fencelab === undefined ? "undefined" : JSON.stringify(Object.keys(window.fencelab))`))
	}
}

// poll waits until the JavaScript expression is truthy, evaluating it in
// the page every PollInterval, and reports whether it became so in time.
func (tab *Tab) poll(expr string, timeout time.Duration) bool {
	tab.t.Helper()
	_, err := RunAction(tab, timeout+5*time.Second, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(PollInterval), chromedp.WithPollingTimeout(timeout)))
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
	v, err := RunAction(tab, 5*time.Second, chromedp.Evaluate[json.RawMessage](expr))
	return Described(v, err)
}

// described is an evaluated value as an error message says it: a string
// unquoted, anything else as JSON, cut at 2,000 bytes; or the error.
func Described(raw json.RawMessage, err error) string {
	if err != nil {
		return "(" + err.Error() + ")"
	}
	s := string(raw)
	var str string
	if json.Unmarshal(raw, &str) == nil {
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
		timeout = DefaultTimeout
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
		timeout = DefaultTimeout
	}
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
		if _, err := RunAction(tab, DefaultTimeout, chromedp.Evaluate[chromedp.Void](js, chromedp.EvalAwaitPromise)); err != nil {
			tab.t.Fatalf("e2e: Eval(%s): %v", js, err)
		}
		return
	}
	raw, err := RunAction(tab, DefaultTimeout, chromedp.Evaluate[json.RawMessage](js, chromedp.EvalAwaitPromise))
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
		const el = document.querySelector(` + JSString(Sel(testid)) + `);
		return el ? {v: (` + fn + `)(el)} : null;
	})()`
	res, err := RunAction(tab, DefaultTimeout+5*time.Second, chromedp.Poll[struct {
		V json.RawMessage `json:"v"`
	}](expr, chromedp.WithPollingInterval(PollInterval), chromedp.WithPollingTimeout(DefaultTimeout)))
	switch {
	case errors.Is(err, chromedp.ErrPollingTimeout), errors.Is(err, context.DeadlineExceeded):
		tab.t.Fatalf("e2e: %s(%q): no element %s within %v", what, testid, Sel(testid), DefaultTimeout)
	case err != nil:
		tab.t.Fatalf("e2e: %s(%q): %v", what, testid, err)
	}
	return res.V
}

// Click waits (≤30s) for the element to be visible, scrolls it into view
// and clicks its centre with the mouse, as a person would.
func (tab *Tab) Click(testid string) {
	tab.t.Helper()
	err := tab.Do(DefaultTimeout, chromedp.Click(chromedp.CSS(Sel(testid))))
	// The page may redraw the element between finding it and clicking it
	// (a lane re-rendered by the next event): a person would click the new
	// one, and so does the test.
	for try := 0; err != nil && try < 3 && (strings.Contains(err.Error(), "Could not find node") || strings.Contains(err.Error(), "detached")); try++ {
		err = tab.Do(DefaultTimeout, chromedp.Click(chromedp.CSS(Sel(testid))))
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		tab.t.Fatalf("e2e: Click(%q): no visible %s within %v (in the page: %s)", testid, Sel(testid), DefaultTimeout,
			tab.describe(`document.querySelector(`+JSString(Sel(testid))+`) ? "present, not visible" : "absent"`))
	case err != nil:
		tab.t.Fatalf("e2e: Click(%q): %v", testid, err)
	}
}

// Open opens the <details> element with the testid by clicking its
// summary, as a person would; an open one stays open.
func (tab *Tab) Open(testid string) {
	tab.t.Helper()
	var open bool
	raw := tab.onElement("Open", testid, `(el) => el.tagName === "DETAILS" ? el.open : null`)
	if string(raw) == "null" {
		tab.t.Fatalf("e2e: Open(%q): %s is not a <details>", testid, Sel(testid))
	}
	if err := json.Unmarshal(raw, &open); err != nil {
		tab.t.Fatalf("e2e: Open(%q): %v", testid, err)
	}
	if open {
		return
	}
	if err := tab.Do(DefaultTimeout, chromedp.Click(chromedp.CSS(Sel(testid)+" > summary"))); err != nil {
		tab.t.Fatalf("e2e: Open(%q): click its summary: %v", testid, err)
	}
	if !tab.poll(`document.querySelector(`+JSString(Sel(testid))+`).open`, DefaultTimeout) {
		tab.t.Fatalf("e2e: Open(%q): clicking its summary did not open it", testid)
	}
}

// WaitVisible waits (≤30s) until the element exists and is visible.
func (tab *Tab) WaitVisible(testid string) {
	tab.t.Helper()
	if !tab.poll(VisibleJS(testid), DefaultTimeout) {
		tab.t.Fatalf("e2e: WaitVisible(%q): %s not visible within %v", testid, Sel(testid), DefaultTimeout)
	}
}

// VisibleJS is an expression: the element exists, has a box and is not
// hidden by display, visibility, content-visibility or opacity.
func VisibleJS(testid string) string {
	return `(() => {
		const el = document.querySelector(` + JSString(Sel(testid)) + `);
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
	tab.Eval(VisibleJS(testid), &v)
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
		el.value = `+JSString(value)+`;
		el.dispatchEvent(new Event("input", {bubbles: true}));
		el.dispatchEvent(new Event("change", {bubbles: true}));
		if (el.value !== `+JSString(value)+`) {
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
	// As a keyboard sends it (see Key): a Space the page
	// takes must not also scroll it.
	if err := tab.Key(key, DefaultTimeout); err != nil {
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
	_ = json.Unmarshal(tab.onElement("Attr", testid, `(el) => el.getAttribute(`+JSString(name)+`) ?? ""`), &s)
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

// Key sends the key as a keyboard does: one keyDown that carries the
// key's text, if it has one, then a keyUp. (chromedp.KeyEvent sends the
// text as a separate "char" event, which a keydown handler's
// preventDefault cannot cancel: Chromium then scrolls the page by a
// screen on Space, as no real keyboard would make it.)
func (tab *Tab) Key(key string, timeout time.Duration) error {
	k, ok := keyNames[key]
	if !ok {
		if len([]rune(key)) != 1 {
			return fmt.Errorf("key %q: not a single character nor a key name the tests know", key)
		}
		k = key
	}
	v, ok := kb.Keys[[]rune(k)[0]]
	if !ok {
		return tab.Do(timeout, chromedp.KeyEvent(k))
	}
	down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeRawKeyDown, Key: v.Key, Code: v.Code,
		NativeVirtualKeyCode: v.Native, WindowsVirtualKeyCode: v.Windows}
	if v.Print {
		down.Type, down.Text, down.UnmodifiedText = input.DispatchKeyEventTypeKeyDown, v.Text, v.Unmodified
	}
	up := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyUp, Key: v.Key, Code: v.Code,
		NativeVirtualKeyCode: v.Native, WindowsVirtualKeyCode: v.Windows}
	return tab.Do(timeout, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, down); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, up)
		return err
	}))
}

// Swipe drags one finger across the element's middle by dx CSS pixels
// (negative: to the left), in eight moves, as a person's swipe: touch
// events, not a mouse's.
func (tab *Tab) Swipe(testid string, dx float64) {
	tab.t.Helper()
	var at struct{ X, Y float64 }
	tab.Eval(`(() => { const r = document.querySelector(`+JSString(Sel(testid))+`).getBoundingClientRect(); return {X: r.left + r.width / 2, Y: r.top + r.height / 2}; })()`, &at)
	x0 := at.X - dx/2
	point := func(x float64) []*input.TouchPoint { return []*input.TouchPoint{{X: x, Y: at.Y}} }
	err := tab.Do(DefaultTimeout, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, input.DispatchTouchEvent, input.DispatchTouchEventParams{Type: input.DispatchTouchEventTypeTouchStart, TouchPoints: point(x0)}); err != nil {
			return err
		}
		for i := 1; i <= 8; i++ {
			if _, err := cdp.Call(ctx, tg, input.DispatchTouchEvent, input.DispatchTouchEventParams{Type: input.DispatchTouchEventTypeTouchMove, TouchPoints: point(x0 + dx*float64(i)/8)}); err != nil {
				return err
			}
		}
		_, err := cdp.Call(ctx, tg, input.DispatchTouchEvent, input.DispatchTouchEventParams{Type: input.DispatchTouchEventTypeTouchEnd, TouchPoints: []*input.TouchPoint{}})
		return err
	}))
	if err != nil {
		tab.t.Fatalf("e2e: Swipe(%q, %v): %v", testid, dx, err)
	}
}
