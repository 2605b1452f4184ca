package engines

// Chromium as an engine of TestEngines: the test binary's one Chromium
// (e2etest/browser.go), an e2etest.Tab per case, so the e2etest.Tab's own error
// recording, failure screenshots and cleanup order apply unchanged.

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

func startChromiumEngine(t *testing.T) func(*testing.T, int, int) driver {
	t.Helper()
	e2etest.RequireBrowser(t) // skips, or fails with CI=true, without Chromium
	return func(t *testing.T, w, h int) driver {
		return &chromiumDriver{tab: e2etest.NewTab(t, w, h)}
	}
}

// chromiumDriver is a driver over an e2etest.Tab. Errors returns nothing: the e2etest.Tab
// records them itself, and fails its test on them at its end.
type chromiumDriver struct{ tab *e2etest.Tab }

func (d *chromiumDriver) Navigate(url string, timeout time.Duration) error {
	resp, err := e2etest.RunAction(d.tab, timeout, chromedp.NavigateResponse(url))
	if err != nil {
		return err
	}
	if resp != nil && resp.Status >= 400 {
		return fmt.Errorf("HTTP %d %s", resp.Status, resp.StatusText)
	}
	return nil
}

func (d *chromiumDriver) Eval(js string, timeout time.Duration) (json.RawMessage, error) {
	s, err := e2etest.RunAction(d.tab, timeout, chromedp.Evaluate[string](jsonOf(js), chromedp.EvalAwaitPromise))
	if err != nil {
		return nil, err
	}
	return json.RawMessage(s), nil
}

func (d *chromiumDriver) Click(css string, timeout time.Duration) error {
	return d.tab.Do(timeout, chromedp.Click(chromedp.CSS(css)))
}

// Key sends the key as a keyboard does (Tab.Key).
func (d *chromiumDriver) Key(key string, timeout time.Duration) error { return d.tab.Key(key, timeout) }

func (d *chromiumDriver) SetViewport(w, h int, timeout time.Duration) (int, int, error) {
	if err := d.tab.Do(timeout, chromedp.EmulateViewport(int64(w), int64(h))); err != nil {
		return 0, 0, err
	}
	d.tab.Width, d.tab.Height = w, h
	return w, h, nil
}

func (d *chromiumDriver) Screenshot(timeout time.Duration) ([]byte, error) {
	return e2etest.RunAction(d.tab, timeout, chromedp.CaptureScreenshot())
}

func (d *chromiumDriver) Errors() []string { return nil }

// jsonOf wraps a JavaScript expression so that it evaluates, awaited, to
// the JSON text of its value ("null" for undefined): every engine returns
// that one string, whatever its protocol's own way of serializing values.
func jsonOf(js string) string {
	return `(async () => { const v = await (` + js + "\n" + `); return v === undefined ? "null" : JSON.stringify(v); })()`
}
