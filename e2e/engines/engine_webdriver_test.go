package engines

// WebKit as an engine of TestEngines: WebKitGTK's MiniBrowser, driven by
// WebKitWebDriver (Debian's webkit2gtk-driver) over W3C WebDriver classic,
// JSON over HTTP, on an X server of the test's own (Xvfb, on the first
// free display: -displayfd). One WebDriver session, so one MiniBrowser,
// per case: each case gets a fresh browser and its data.
//
// WebDriver classic has no events, so JavaScript errors are caught by a
// listener the harness puts in each page once it has loaded (errors,
// unhandled rejections, console.error); before that, the page's own
// listener (window.fencelab.state().errors) has them from the end of its
// module on, and a module that throws before its end never becomes ready,
// which fails WaitReady.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/e2e/e2etest"
)

// webkitNotFound is the skip message when WebKit cannot be driven here.
const webkitNotFound = "apt-get install webkit2gtk-driver xvfb xauth (CI installs them)"

// findMiniBrowser returns the path of WebKitGTK's MiniBrowser, or "": it
// lives in the library's folder, which is named for the architecture and
// the API version (webkit2gtk-4.1 or 4.0).
func findMiniBrowser() string {
	var found []string
	for _, pattern := range []string{"/usr/lib/*/webkit2gtk-4.*/MiniBrowser", "/usr/lib/webkit2gtk-4.*/MiniBrowser", "/usr/libexec/webkit2gtk-4.*/MiniBrowser"} {
		m, _ := filepath.Glob(pattern)
		found = append(found, m...)
	}
	slices.Sort(found)
	for i := len(found) - 1; i >= 0; i-- { // 4.1 before 4.0
		if fi, err := os.Stat(found[i]); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return found[i]
		}
	}
	return ""
}

func startWebKitEngine(t *testing.T) func(*testing.T, int, int) driver {
	t.Helper()
	driverPath, _ := exec.LookPath("WebKitWebDriver")
	xvfb, _ := exec.LookPath("Xvfb")
	mini := findMiniBrowser()
	var missing []string
	if driverPath == "" {
		missing = append(missing, "WebKitWebDriver")
	}
	if mini == "" {
		missing = append(missing, "MiniBrowser")
	}
	if xvfb == "" {
		missing = append(missing, "Xvfb")
	}
	if len(missing) > 0 {
		skipOrFail(t, "WebKit: no "+strings.Join(missing, ", no ")+": "+webkitNotFound)
	}
	ep := newEngineProcs(t, "webkit")
	display, err := startXvfb(ep, xvfb)
	if err != nil {
		t.Fatalf("e2e (webkit): %v", err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ep.start("WebKitWebDriver", driverPath, []string{"--port=" + strconv.Itoa(port)}, []string{"DISPLAY=" + display}); err != nil {
		t.Fatalf("e2e (webkit): %v", err)
	}
	wd := &wdClient{base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	if err := wd.waitReady(30 * time.Second); err != nil {
		t.Fatalf("e2e (webkit): WebKitWebDriver: %v", err)
	}
	// MiniBrowser is the driver's child: setpriv gives it a parent-death
	// signal too, so that it dies with the driver, should the driver die
	// first.
	binary, args := mini, []string{"--automation"}
	if setpriv, err := exec.LookPath("setpriv"); err == nil {
		binary, args = setpriv, []string{"--pdeathsig", "KILL", "--", mini, "--automation"}
	}
	t.Logf("e2e (webkit): %s on %s, %s", driverPath, display, mini)
	return func(t *testing.T, w, h int) driver {
		t.Helper()
		t0 := time.Now()
		s, err := wd.newSession(binary, args)
		if err != nil {
			t.Fatalf("e2e (webkit): new session: %v", err)
		}
		t.Logf("e2e (webkit): a MiniBrowser session in %v", time.Since(t0).Round(time.Millisecond))
		t.Cleanup(func() {
			if err := s.close(); err != nil {
				t.Errorf("e2e (webkit): closing the session: %v", err)
			}
		})
		gw, gh, err := s.SetViewport(w, h, e2etest.DefaultTimeout)
		if err != nil {
			t.Fatalf("e2e (webkit): SetViewport(%d, %d): %v", w, h, err)
		}
		if (gw != w || gh != h) && w >= 480 {
			t.Fatalf("e2e (webkit): the viewport is %d×%d, not %d×%d", gw, gh, w, h)
		}
		if gw != w || gh != h {
			t.Logf("e2e (webkit): the viewport is %d×%d, not %d×%d: MiniBrowser's window is no narrower than its toolbar", gw, gh, w, h)
		}
		return s
	}
}

// startXvfb starts an X server on the first free display, which it names
// itself (-displayfd), and returns ":N" once it accepts connections.
func startXvfb(ep *engineProcs, path string) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	defer r.Close()
	_, err = ep.start("Xvfb", path, []string{"-displayfd", "3", "-screen", "0", "2048x1536x24", "-nolisten", "tcp", "-noreset"}, nil, w)
	w.Close()
	if err != nil {
		return "", err
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(r).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case s := <-line:
		if _, err := strconv.Atoi(s); err != nil {
			return "", fmt.Errorf("Xvfb named no display (%q)", s)
		}
		return ":" + s, nil
	case <-time.After(30 * time.Second):
		return "", errors.New("Xvfb named no display within 30s")
	}
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ---------------------------------------------------------------------------
// A W3C WebDriver (classic) client: what the tests use, no more.

type wdClient struct{ base string }

var wdHTTP = &http.Client{}

// wdError is an error the remote end answered with.
type wdError struct {
	Code    string `json:"error"`
	Message string `json:"message"`
}

func (e *wdError) Error() string { return e.Code + ": " + e.Message }

// call sends one command and decodes its "value" into out (may be nil).
func (c *wdClient) call(timeout time.Duration, method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
	}
	resp, err := wdHTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	var env struct{ Value json.RawMessage }
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("%s %s: HTTP %d, not WebDriver's JSON: %.200s", method, path, resp.StatusCode, b)
	}
	if resp.StatusCode != http.StatusOK {
		we := &wdError{}
		if json.Unmarshal(env.Value, we) != nil || we.Code == "" {
			return fmt.Errorf("%s %s: HTTP %d: %.200s", method, path, resp.StatusCode, b)
		}
		return fmt.Errorf("%s %s: %w", method, path, we)
	}
	if out != nil {
		return json.Unmarshal(env.Value, out)
	}
	return nil
}

// waitReady waits until the remote end answers GET /status.
func (c *wdClient) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var st struct{ Ready bool }
		err := c.call(2*time.Second, http.MethodGet, "/status", nil, &st)
		if err == nil && st.Ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v (%v)", timeout, err)
		}
		<-tick.C
	}
}

// wdSession is one WebDriver session: one MiniBrowser and its one window.
// It is a driver.
type wdSession struct {
	c    *wdClient
	id   string
	errs []string // errors collected from pages the session has left

	frameSeen map[string]bool // frames' errors already in errs
}

// newSession starts a browser (binary with args) in a new session.
func (c *wdClient) newSession(binary string, args []string) (*wdSession, error) {
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"pageLoadStrategy":        "normal",
		"unhandledPromptBehavior": "dismiss",
		"webkitgtk:browserOptions": map[string]any{
			"binary": binary,
			"args":   args,
		},
	}}}
	var v struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.call(60*time.Second, http.MethodPost, "/session", caps, &v); err != nil {
		return nil, err
	}
	s := &wdSession{c: c, id: v.SessionID, frameSeen: map[string]bool{}}
	if err := s.call(e2etest.DefaultTimeout, http.MethodPost, "/timeouts", map[string]any{"script": 60_000, "pageLoad": 30_000, "implicit": 0}, nil); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *wdSession) call(timeout time.Duration, method, path string, body, out any) error {
	return s.c.call(timeout, method, "/session/"+s.id+path, body, out)
}

// close ends the session, which closes its browser.
func (s *wdSession) close() error {
	return s.call(e2etest.DefaultTimeout, http.MethodDelete, "", nil, nil)
}

// wdErrorsJS puts the harness's listener in the page, once, and keeps
// what the page's own listener saw before it.
const wdErrorsJS = `(() => {
	if (window.__e2eErrs) return true;
	const errs = window.__e2eErrs = [];
	const where = (e) => e.filename ? " (" + e.filename + ":" + e.lineno + ":" + e.colno + ")" : "";
	addEventListener("error", (e) => errs.push("uncaught exception: " + e.message + where(e)));
	addEventListener("unhandledrejection", (e) => errs.push("unhandled rejection: " + (e.reason && e.reason.stack || e.reason)));
	const ce = console.error.bind(console);
	console.error = (...a) => { errs.push("console.error: " + a.map(String).join(" ")); ce(...a); };
	const ca = console.assert.bind(console);
	console.assert = (c, ...a) => { if (!c) errs.push("console.assert failed: " + a.map(String).join(" ")); ca(c, ...a); };
	return true;
})()`

// collect moves the errors the current page's listener recorded into
// s.errs, and those its frames' pages recorded themselves (the embed's
// window.fencelab.state().errors: WebDriver classic reaches a frame only
// by switching to it).
func (s *wdSession) collect() {
	var got []string
	raw, err := s.exec(`window.__e2eErrs ? window.__e2eErrs.splice(0) : []`, 5*time.Second)
	if err == nil && json.Unmarshal(raw, &got) == nil {
		s.errs = append(s.errs, got...)
	}
	var frames []map[string]string
	if err := s.call(5*time.Second, http.MethodPost, "/elements", map[string]any{"using": "css selector", "value": "iframe"}, &frames); err != nil {
		return
	}
	for i, f := range frames {
		if err := s.call(5*time.Second, http.MethodPost, "/frame", map[string]any{"id": f}, nil); err != nil {
			continue
		}
		var errs []string
		raw, err := s.exec(`window.fencelab && typeof window.fencelab.state === "function" ? window.fencelab.state().errors : []`, 5*time.Second)
		if err == nil && json.Unmarshal(raw, &errs) == nil {
			for _, e := range errs {
				msg := fmt.Sprintf("in frame %d: uncaught: %s", i, e)
				if !s.frameSeen[msg] { // the frame's list is read again at each collect
					s.frameSeen[msg] = true
					s.errs = append(s.errs, msg)
				}
			}
		}
		_ = s.call(5*time.Second, http.MethodPost, "/frame/parent", map[string]any{}, nil)
	}
}

func (s *wdSession) Navigate(url string, timeout time.Duration) error {
	s.collect()
	if err := s.call(timeout, http.MethodPost, "/url", map[string]any{"url": url}, nil); err != nil {
		return err
	}
	_, err := s.exec(wdErrorsJS, timeout)
	return err
}

// exec runs js (an expression) as an async script and returns the JSON
// text of its value.
func (s *wdSession) exec(js string, timeout time.Duration) (json.RawMessage, error) {
	script := `const done = arguments[arguments.length - 1];
	(` + jsonOf(js) + `).then((v) => done({v}), (e) => done({err: String(e && e.stack || e)}));`
	var res struct {
		V   string `json:"v"`
		Err string `json:"err"`
	}
	if err := s.call(timeout, http.MethodPost, "/execute/async", map[string]any{"script": script, "args": []any{}}, &res); err != nil {
		return nil, err
	}
	if res.Err != "" {
		return nil, errors.New(res.Err)
	}
	return json.RawMessage(res.V), nil
}

func (s *wdSession) Eval(js string, timeout time.Duration) (json.RawMessage, error) {
	return s.exec(js, timeout)
}

// wdElementKey is the key of a web element reference (W3C WebDriver).
const wdElementKey = "element-6066-11e4-a52e-4f735466cecf"

func (s *wdSession) Click(css string, timeout time.Duration) error {
	var el map[string]string
	if err := s.call(timeout, http.MethodPost, "/element", map[string]any{"using": "css selector", "value": css}, &el); err != nil {
		return err
	}
	// Element Click scrolls the element into view, checks that nothing
	// covers its centre, and clicks there with the pointer.
	return s.call(timeout, http.MethodPost, "/element/"+el[wdElementKey]+"/click", map[string]any{}, nil)
}

func (s *wdSession) Key(key string, timeout time.Duration) error {
	k, err := webdriverKey(key)
	if err != nil {
		return err
	}
	actions := map[string]any{"actions": []any{map[string]any{
		"type": "key", "id": "keyboard",
		"actions": []any{map[string]any{"type": "keyDown", "value": k}, map[string]any{"type": "keyUp", "value": k}},
	}}}
	if err := s.call(timeout, http.MethodPost, "/actions", actions, nil); err != nil {
		return err
	}
	return s.call(timeout, http.MethodDelete, "/actions", nil, nil)
}

// SetViewport sizes the window so that its viewport is w×h: the window's
// size less what its own chrome takes, measured. MiniBrowser's window is
// no narrower than its toolbar, so a narrow viewport comes out wider. The
// page learns of a new size after the command has answered: each
// measurement waits for the page's resize event (≤2s).
func (s *wdSession) SetViewport(w, h int, timeout time.Duration) (int, int, error) {
	ow, oh := w, h
	var got [2]int
	for range 4 {
		if _, err := s.exec(`(window.__e2eResized = new Promise((r) => addEventListener("resize", () => requestAnimationFrame(() => r(true)), {once: true}))), true`, timeout); err != nil {
			return 0, 0, err
		}
		var before, after struct{ Width, Height int }
		if err := s.call(timeout, http.MethodGet, "/window/rect", nil, &before); err != nil {
			return 0, 0, err
		}
		if err := s.call(timeout, http.MethodPost, "/window/rect", map[string]any{"x": 0, "y": 0, "width": ow, "height": oh}, &after); err != nil {
			return 0, 0, err
		}
		wait := "Promise.resolve(true)"
		if before != after {
			wait = `Promise.race([window.__e2eResized, new Promise((r) => setTimeout(() => r(false), 2000))])`
		}
		raw, err := s.exec(wait+`.then(() => [innerWidth, innerHeight])`, timeout)
		if err != nil {
			return 0, 0, err
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			return 0, 0, err
		}
		if got[0] == w && got[1] == h {
			break
		}
		ow, oh = ow+w-got[0], oh+h-got[1]
	}
	return got[0], got[1], nil
}

func (s *wdSession) Screenshot(timeout time.Duration) ([]byte, error) {
	var b64 string
	if err := s.call(timeout, http.MethodGet, "/screenshot", nil, &b64); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(b64)
}

func (s *wdSession) Errors() []string {
	s.collect()
	return slices.Clone(s.errs)
}
