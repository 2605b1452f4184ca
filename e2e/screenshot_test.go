package e2e

// The README's picture: the page as a newcomer first sees it, made by a
// real run on every run of the suite, so it never drifts from the page.

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

// readmeShot is the screenshot README.md shows. It is tracked, and this
// test writes it again on each run.
const readmeShot = "screenshots/fencelab.png"

// maxShotBytes keeps the README's picture light for a blog reader on a
// phone; the test fails when the page grows past it.
const maxShotBytes = 300 << 10

// TestScreenshot_READMEPicture plays the article's zombie-first ordering
// with every guard on to its verdict, at 1280×800, and saves what the screen
// shows — the stage, the verdict above the lanes — as the README's picture.
// A build that upper-cases every text (fencelab_shout) leaves the picture
// alone: it is not the page a reader sees.
func TestScreenshot_READMEPicture(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 800)
	o := e2etest.RunFromPage(t, srv, tab, "ordering=zombie-first&mode=auto&pace=300")
	if o["safe"] != true || o["ordering"] != "zombie-first" {
		t.Fatalf("the correct build's zombie-first run: safe=%v ordering=%v (%v)", o["safe"], o["ordering"], o["verdict"])
	}
	tab.PollJS(`document.querySelector('[data-testid="verdict"]').dataset.state === "safe"`, 10*time.Second)
	// The stage at the top of the screen, once the page has stopped moving.
	tab.Eval(`document.querySelector('[data-testid="stage"]').scrollIntoView({block: "start", behavior: "instant"}); true`, nil)
	tab.PollJS(`(() => {
		const top = document.querySelector('[data-testid="stage"]').getBoundingClientRect().top;
		const still = window.__shotTop === top;
		window.__shotTop = top;
		return still;
	})()`, 10*time.Second)
	raw, err := e2etest.RunAction(tab, e2etest.DefaultTimeout, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("capture the screen: %v", err)
	}
	shot, err := recompress(raw)
	if err != nil {
		t.Fatalf("re-encode the screenshot: %v", err)
	}
	if len(shot) > maxShotBytes {
		t.Errorf("the README's picture is %d KiB, over %d KiB", len(shot)>>10, maxShotBytes>>10)
	}
	if e2etest.Shouting() {
		t.Logf("a fencelab_shout build: %s left as it was", readmeShot)
		return
	}
	if err := os.MkdirAll(filepath.Dir(readmeShot), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(readmeShot, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("e2e: the README's picture: %s (%d KiB)", readmeShot, len(shot)>>10)
}

// recompress encodes a PNG again at the best compression Go's encoder has:
// Chromium's is quick rather than small.
func recompress(raw []byte) ([]byte, error) {
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
