package e2e

// Chromium as an engine of TestEngines: the test binary's one Chromium
// (harness_browser_test.go), a Tab per case, so the Tab's own error
// recording, failure screenshots and cleanup order apply unchanged.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

func startChromiumEngine(t *testing.T) func(*testing.T, int, int) driver {
	t.Helper()
	requireBrowser(t) // skips, or fails with CI=true, without Chromium
	return func(t *testing.T, w, h int) driver {
		return &chromiumDriver{tab: newTab(t, w, h)}
	}
}

// chromiumDriver is a driver over a Tab. Errors returns nothing: the Tab
// records them itself, and fails its test on them at its end.
type chromiumDriver struct{ tab *Tab }

func (d *chromiumDriver) Navigate(url string, timeout time.Duration) error {
	resp, err := runAction(d.tab, timeout, chromedp.NavigateResponse(url))
	if err != nil {
		return err
	}
	if resp != nil && resp.Status >= 400 {
		return fmt.Errorf("HTTP %d %s", resp.Status, resp.StatusText)
	}
	return nil
}

func (d *chromiumDriver) Eval(js string, timeout time.Duration) (json.RawMessage, error) {
	s, err := runAction(d.tab, timeout, chromedp.Evaluate[string](jsonOf(js), chromedp.EvalAwaitPromise))
	if err != nil {
		return nil, err
	}
	return json.RawMessage(s), nil
}

func (d *chromiumDriver) Click(css string, timeout time.Duration) error {
	return d.tab.do(timeout, chromedp.Click(chromedp.CSS(css)))
}

// Key sends the key as a keyboard does: one keyDown that carries the
// key's text, if it has one, then a keyUp. (chromedp.KeyEvent sends the
// text as a separate "char" event, which a keydown handler's
// preventDefault cannot cancel: Chromium then scrolls the page by a
// screen on Space, as no real keyboard would make it.)
func (d *chromiumDriver) Key(key string, timeout time.Duration) error {
	k, ok := keyNames[key]
	if !ok {
		if len([]rune(key)) != 1 {
			return fmt.Errorf("key %q: not a single character nor a key name the tests know", key)
		}
		k = key
	}
	v, ok := kb.Keys[[]rune(k)[0]]
	if !ok {
		return d.tab.do(timeout, chromedp.KeyEvent(k))
	}
	down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeRawKeyDown, Key: v.Key, Code: v.Code,
		NativeVirtualKeyCode: v.Native, WindowsVirtualKeyCode: v.Windows}
	if v.Print {
		down.Type, down.Text, down.UnmodifiedText = input.DispatchKeyEventTypeKeyDown, v.Text, v.Unmodified
	}
	up := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyUp, Key: v.Key, Code: v.Code,
		NativeVirtualKeyCode: v.Native, WindowsVirtualKeyCode: v.Windows}
	return d.tab.do(timeout, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, down); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, up)
		return err
	}))
}

func (d *chromiumDriver) SetViewport(w, h int, timeout time.Duration) (int, int, error) {
	if err := d.tab.do(timeout, chromedp.EmulateViewport(int64(w), int64(h))); err != nil {
		return 0, 0, err
	}
	d.tab.Width, d.tab.Height = w, h
	return w, h, nil
}

func (d *chromiumDriver) Screenshot(timeout time.Duration) ([]byte, error) {
	return runAction(d.tab, timeout, chromedp.CaptureScreenshot())
}

func (d *chromiumDriver) Errors() []string { return nil }

// jsonOf wraps a JavaScript expression so that it evaluates, awaited, to
// the JSON text of its value ("null" for undefined): every engine returns
// that one string, whatever its protocol's own way of serializing values.
func jsonOf(js string) string {
	return `(async () => { const v = await (` + js + "\n" + `); return v === undefined ? "null" : JSON.stringify(v); })()`
}
