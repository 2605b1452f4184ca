package engines

// Firefox as an engine of TestEngines: Firefox ESR, headless, driven over
// WebDriver BiDi (its Remote Agent's WebSocket; there is no geckodriver in
// Debian, and BiDi needs none). One Firefox per engine test, in a
// throwaway profile; each case gets a tab in a user context of its own
// (its own cookies and storage), closed with it.
//
// JavaScript errors come as log.entryAdded events (uncaught exceptions and
// console.error, from every frame, the embed's cross-origin iframe
// included), from the first moment of every page.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

// firefoxNotFound is the skip message when there is no Firefox ESR.
const firefoxNotFound = "Firefox ESR not found: apt-get install firefox-esr (CI installs it)"

// findFirefox returns the path of Firefox ESR, or "".
func findFirefox() string {
	for _, name := range []string{"firefox-esr", "firefox"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// firefoxPrefs go in the profile's user.js: a quiet browser that calls
// nobody (the Remote Agent adds its own recommended preferences).
const firefoxPrefs = `user_pref("browser.shell.checkDefaultBrowser", false);
user_pref("app.update.disabledForTesting", true);
user_pref("browser.aboutwelcome.enabled", false);
user_pref("datareporting.policy.dataSubmissionEnabled", false);
user_pref("toolkit.telemetry.reportingpolicy.firstRun", false);
user_pref("browser.safebrowsing.malware.enabled", false);
user_pref("browser.safebrowsing.phishing.enabled", false);
user_pref("extensions.update.enabled", false);
user_pref("remote.active-protocols", 1);
`

var bidiListening = regexp.MustCompile(`WebDriver BiDi listening on (ws://\S+)`)

func startFirefoxEngine(t *testing.T) func(*testing.T, int, int) driver {
	t.Helper()
	path := findFirefox()
	if path == "" {
		skipOrFail(t, firefoxNotFound)
	}
	profile, err := os.MkdirTemp("", "fencelab-e2e-firefox-*")
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the processes' cleanup, so it runs after it.
	t.Cleanup(func() {
		for i := 0; ; i++ { // a dying child can still write in it for a moment
			err := os.RemoveAll(profile)
			if err == nil {
				return
			}
			if i == 20 {
				t.Errorf("e2e (firefox): removing the profile: %v", err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	if err := os.WriteFile(filepath.Join(profile, "user.js"), []byte(firefoxPrefs), 0o644); err != nil {
		t.Fatal(err)
	}
	ep := newEngineProcs(t, "firefox")
	t0 := time.Now()
	p, err := ep.start("firefox", path, []string{"--headless", "--remote-debugging-port=0", "--profile", profile, "--no-remote", "about:blank"},
		[]string{"MOZ_CRASHREPORTER_DISABLE=1"})
	if err != nil {
		t.Fatalf("e2e (firefox): %v", err)
	}
	// Port 0: Firefox takes a free port and says which on stderr.
	var url string
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	for url == "" {
		if m := bidiListening.FindStringSubmatch(p.stderr.String()); m != nil {
			url = m[1]
			break
		}
		if p.exited() || time.Now().After(deadline) {
			tick.Stop()
			t.Fatalf("e2e (firefox): no \"WebDriver BiDi listening\" line within 60s (exited: %v):\n%s", p.exited(), e2etest.Indent(p.stderr.String()))
		}
		<-tick.C
	}
	tick.Stop()
	listening := time.Since(t0)
	b, err := dialBiDi(strings.TrimSuffix(url, "/") + "/session")
	if err != nil {
		t.Fatalf("e2e (firefox): %v", err)
	}
	t.Cleanup(func() { // before the processes' cleanup
		_, _ = b.call(5*time.Second, "session.end", map[string]any{})
		b.close()
	})
	var sess struct {
		Capabilities struct {
			BrowserVersion string `json:"browserVersion"`
		} `json:"capabilities"`
	}
	// Firefox opens its first window while it answers session.new: on a
	// loaded CI machine that once took more than 30 s (the renderer's
	// "RenderCompositorSWGL failed mapping default framebuffer" was the
	// last thing it said). A passing run pays nothing for the wait.
	if err := b.callInto(3*e2etest.DefaultTimeout, "session.new", map[string]any{"capabilities": map[string]any{
		"alwaysMatch": map[string]any{"unhandledPromptBehavior": map[string]any{"default": "dismiss"}},
	}}, &sess); err != nil {
		t.Fatalf("e2e (firefox): session.new: %v", err)
	}
	if _, err := b.call(e2etest.DefaultTimeout, "session.subscribe", map[string]any{"events": []string{"log.entryAdded", "browsingContext.contextCreated"}}); err != nil {
		t.Fatalf("e2e (firefox): session.subscribe: %v", err)
	}
	t.Logf("e2e (firefox): %s %s over WebDriver BiDi at %s (listening after %v, a session after %v)", path, sess.Capabilities.BrowserVersion, url,
		listening.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	return func(t *testing.T, w, h int) driver {
		t.Helper()
		var uc struct {
			UserContext string `json:"userContext"`
		}
		if err := b.callInto(e2etest.DefaultTimeout, "browser.createUserContext", map[string]any{}, &uc); err != nil {
			t.Fatalf("e2e (firefox): browser.createUserContext: %v", err)
		}
		var bc struct {
			Context string `json:"context"`
		}
		if err := b.callInto(e2etest.DefaultTimeout, "browsingContext.create", map[string]any{"type": "tab", "userContext": uc.UserContext}, &bc); err != nil {
			t.Fatalf("e2e (firefox): browsingContext.create: %v", err)
		}
		d := &bidiTab{b: b, context: bc.Context}
		b.watch(bc.Context)
		t.Cleanup(func() {
			if _, err := b.call(e2etest.DefaultTimeout, "browsingContext.close", map[string]any{"context": bc.Context}); err != nil {
				t.Errorf("e2e (firefox): browsingContext.close: %v", err)
			}
			if _, err := b.call(e2etest.DefaultTimeout, "browser.removeUserContext", map[string]any{"userContext": uc.UserContext}); err != nil {
				t.Errorf("e2e (firefox): browser.removeUserContext: %v", err)
			}
		})
		if _, _, err := d.SetViewport(w, h, e2etest.DefaultTimeout); err != nil {
			t.Fatalf("e2e (firefox): SetViewport(%d, %d): %v", w, h, err)
		}
		return d
	}
}

// ---------------------------------------------------------------------------
// A WebDriver BiDi client: commands, their answers and events over one
// WebSocket; what the tests use, no more.

type bidiConn struct {
	ws     *websocket.Conn
	ctx    context.Context // the connection's; cancelled by close
	cancel context.CancelFunc
	nextID atomic.Int64
	done   chan struct{} // closed when the reading loop ends

	mu      sync.Mutex
	pending map[int64]chan bidiMessage
	parent  map[string]string   // browsing context → its parent, for frames
	errs    map[string][]string // top-level browsing context → its errors
	readErr error
}

// bidiMessage is any message from the remote end.
type bidiMessage struct {
	Type    string          `json:"type"` // success, error, event
	ID      *int64          `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   string          `json:"error"`
	Message string          `json:"message"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

func dialBiDi(url string) (*bidiConn, error) {
	ctx, cancel := context.WithCancel(context.Background())
	dctx, dcancel := context.WithTimeout(ctx, e2etest.DefaultTimeout)
	defer dcancel()
	ws, _, err := websocket.Dial(dctx, url, nil)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	ws.SetReadLimit(64 << 20) // screenshots
	b := &bidiConn{ws: ws, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		pending: map[int64]chan bidiMessage{}, parent: map[string]string{}, errs: map[string][]string{}}
	go b.read()
	return b, nil
}

// read delivers answers to their callers and handles events, until the
// connection ends.
func (b *bidiConn) read() {
	defer close(b.done)
	for {
		_, data, err := b.ws.Read(b.ctx)
		if err != nil {
			b.mu.Lock()
			b.readErr = err
			for id, ch := range b.pending {
				close(ch)
				delete(b.pending, id)
			}
			b.mu.Unlock()
			return
		}
		var m bidiMessage
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		if m.Type == "event" {
			b.event(m.Method, m.Params)
			continue
		}
		if m.ID == nil {
			continue
		}
		b.mu.Lock()
		ch := b.pending[*m.ID]
		delete(b.pending, *m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// event records frames' parents and JavaScript errors.
func (b *bidiConn) event(method string, params json.RawMessage) {
	switch method {
	case "browsingContext.contextCreated":
		var p struct {
			Context string  `json:"context"`
			Parent  *string `json:"parent"`
		}
		if json.Unmarshal(params, &p) == nil && p.Parent != nil {
			b.mu.Lock()
			b.parent[p.Context] = *p.Parent
			b.mu.Unlock()
		}
	case "log.entryAdded":
		var p struct {
			Type   string `json:"type"` // console, javascript
			Level  string `json:"level"`
			Text   string `json:"text"`
			Method string `json:"method"`
			Source struct {
				Context string `json:"context"`
			} `json:"source"`
			StackTrace *struct {
				CallFrames []struct {
					URL          string `json:"url"`
					LineNumber   int    `json:"lineNumber"`
					ColumnNumber int    `json:"columnNumber"`
				} `json:"callFrames"`
			} `json:"stackTrace"`
		}
		if json.Unmarshal(params, &p) != nil || p.Level != "error" {
			return
		}
		msg := p.Text
		switch p.Type {
		case "javascript":
			msg = "uncaught exception: " + msg
		case "console":
			msg = "console." + p.Method + ": " + msg
		}
		if st := p.StackTrace; st != nil && len(st.CallFrames) > 0 {
			f := st.CallFrames[0]
			msg += fmt.Sprintf(" (%s:%d:%d)", f.URL, f.LineNumber+1, f.ColumnNumber+1)
		}
		b.mu.Lock()
		top := p.Source.Context
		for i := 0; i < 16 && b.parent[top] != ""; i++ {
			top = b.parent[top]
		}
		if _, ok := b.errs[top]; ok {
			b.errs[top] = append(b.errs[top], msg)
		}
		b.mu.Unlock()
	}
}

// watch starts recording the errors of a top-level browsing context.
func (b *bidiConn) watch(context string) {
	b.mu.Lock()
	b.errs[context] = []string{}
	b.mu.Unlock()
}

// errors returns the errors recorded for a top-level browsing context.
func (b *bidiConn) errorsOf(context string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.errs[context])
}

// call sends one command and waits (≤timeout) for its answer.
func (b *bidiConn) call(timeout time.Duration, method string, params any) (json.RawMessage, error) {
	id := b.nextID.Add(1)
	msg, err := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	ch := make(chan bidiMessage, 1)
	b.mu.Lock()
	if b.readErr != nil {
		err := b.readErr
		b.mu.Unlock()
		return nil, fmt.Errorf("%s: the connection is closed: %w", method, err)
	}
	b.pending[id] = ch
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := b.ws.Write(ctx, websocket.MessageText, msg); err != nil {
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("%s: the connection closed before the answer", method)
		}
		if m.Type == "error" {
			return nil, fmt.Errorf("%s: %s: %s", method, m.Error, m.Message)
		}
		return m.Result, nil
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
		return nil, fmt.Errorf("%s: no answer within %v", method, timeout)
	}
}

// callInto is call, decoding the result into out.
func (b *bidiConn) callInto(timeout time.Duration, method string, params, out any) error {
	raw, err := b.call(timeout, method, params)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// close closes the connection and waits for its reading loop.
func (b *bidiConn) close() {
	_ = b.ws.Close(websocket.StatusNormalClosure, "")
	b.cancel()
	<-b.done
}

// bidiTab is one tab of the Firefox: a driver.
type bidiTab struct {
	b       *bidiConn
	context string
}

func (d *bidiTab) Navigate(url string, timeout time.Duration) error {
	_, err := d.b.call(timeout, "browsingContext.navigate", map[string]any{"context": d.context, "url": url, "wait": "complete"})
	return err
}

// evaluate runs script.evaluate in the tab's top page.
func (d *bidiTab) evaluate(expr string, await bool, timeout time.Duration) (json.RawMessage, error) {
	var res struct {
		Type             string          `json:"type"` // success, exception
		Result           json.RawMessage `json:"result"`
		ExceptionDetails struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := d.b.callInto(timeout, "script.evaluate", map[string]any{
		"expression": expr, "target": map[string]any{"context": d.context}, "awaitPromise": await, "resultOwnership": "none",
	}, &res); err != nil {
		return nil, err
	}
	if res.Type == "exception" {
		return nil, errors.New(res.ExceptionDetails.Text)
	}
	return res.Result, nil
}

func (d *bidiTab) Eval(js string, timeout time.Duration) (json.RawMessage, error) {
	raw, err := d.evaluate(jsonOf(js), true, timeout)
	if err != nil {
		return nil, err
	}
	var v struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	}
	if err := json.Unmarshal(raw, &v); err != nil || v.Type != "string" {
		return nil, fmt.Errorf("the value is not JSON text: %s", raw)
	}
	return json.RawMessage(v.Value), nil
}

func (d *bidiTab) Click(css string, timeout time.Duration) error {
	raw, err := d.evaluate(`document.querySelector(`+e2etest.JSString(css)+`)`, false, timeout)
	if err != nil {
		return err
	}
	var node struct {
		Type     string `json:"type"`
		SharedID string `json:"sharedId"`
	}
	if err := json.Unmarshal(raw, &node); err != nil || node.Type != "node" || node.SharedID == "" {
		return fmt.Errorf("no such element %s (%s)", css, raw)
	}
	// The pointer moves to the element's centre (its in-view centre point)
	// and clicks there.
	_, err = d.b.call(timeout, "input.performActions", map[string]any{"context": d.context, "actions": []any{map[string]any{
		"type": "pointer", "id": "mouse", "parameters": map[string]any{"pointerType": "mouse"},
		"actions": []any{
			map[string]any{"type": "pointerMove", "x": 0, "y": 0, "origin": map[string]any{"type": "element", "element": map[string]any{"sharedId": node.SharedID}}},
			map[string]any{"type": "pointerDown", "button": 0},
			map[string]any{"type": "pointerUp", "button": 0},
		},
	}}})
	if err != nil {
		return err
	}
	_, err = d.b.call(timeout, "input.releaseActions", map[string]any{"context": d.context})
	return err
}

func (d *bidiTab) Key(key string, timeout time.Duration) error {
	k, err := webdriverKey(key)
	if err != nil {
		return err
	}
	_, err = d.b.call(timeout, "input.performActions", map[string]any{"context": d.context, "actions": []any{map[string]any{
		"type": "key", "id": "keyboard",
		"actions": []any{map[string]any{"type": "keyDown", "value": k}, map[string]any{"type": "keyUp", "value": k}},
	}}})
	if err != nil {
		return err
	}
	_, err = d.b.call(timeout, "input.releaseActions", map[string]any{"context": d.context})
	return err
}

func (d *bidiTab) SetViewport(w, h int, timeout time.Duration) (int, int, error) {
	_, err := d.b.call(timeout, "browsingContext.setViewport", map[string]any{"context": d.context, "viewport": map[string]any{"width": w, "height": h}})
	if err != nil {
		return 0, 0, err
	}
	return w, h, nil
}

func (d *bidiTab) Screenshot(timeout time.Duration) ([]byte, error) {
	var res struct {
		Data string `json:"data"`
	}
	if err := d.b.callInto(timeout, "browsingContext.captureScreenshot", map[string]any{"context": d.context}, &res); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(res.Data)
}

func (d *bidiTab) Errors() []string { return d.b.errorsOf(d.context) }
