package e2etest

// Helpers that drive or read the playground page, shared by the suite's packages.

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// axeSource is axe-core, vendored for the tests only (axe/axe-core.LICENSE).
//
//go:embed axe/axe.min.js
var axeSource string

// OpenLive opens a page of the playground and waits until its socket is live.
func OpenLive(tab *Tab, url string) {
	tab.t.Helper()
	tab.Navigate(url)
	tab.WaitReady()
	tab.PollState(`s.connection === "live"`, 30*time.Second)
}

// RunFromPage opens the playground with a permalink, runs it from the page
// and waits for the outcome.
func RunFromPage(t *testing.T, srv *Server, tab *Tab, query string) map[string]any {
	t.Helper()
	OpenLive(tab, srv.URL+"/?"+query)
	tab.Click("run")
	tab.PollState(`s.outcome !== null && s.outcome !== undefined`, 60*time.Second)
	return tab.State()["outcome"].(map[string]any)
}

// AxeViolation is one finding of axe-core.
type AxeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target []any  `json:"target"`
		HTML   string `json:"html"`
	} `json:"nodes"`
}

// axe runs axe-core (vendored in testdata, for the tests only) on the tab's
// page and returns its serious and critical findings.
func Axe(t *testing.T, tab *Tab) []AxeViolation {
	t.Helper()
	tab.Eval(axeSource+"; true", nil)
	tab.Eval(`window.__axe = null; axe.run(document, {resultTypes: ["violations"]}).then(r => { window.__axe = JSON.stringify(r.violations); }); true`, nil)
	tab.PollJS(`window.__axe !== null`, 60*time.Second)
	var raw string
	tab.Eval(`window.__axe`, &raw)
	var all []AxeViolation
	if err := json.Unmarshal([]byte(raw), &all); err != nil {
		t.Fatal(err)
	}
	var bad []AxeViolation
	for _, v := range all {
		if v.Impact == "serious" || v.Impact == "critical" {
			bad = append(bad, v)
		} else {
			t.Logf("axe (%s, allowed): %s: %s", v.Impact, v.ID, v.Help)
		}
	}
	return bad
}

func ReportAxe(t *testing.T, where string, vs []AxeViolation) {
	t.Helper()
	for _, v := range vs {
		var nodes []string
		for i, n := range v.Nodes {
			if i == 3 {
				nodes = append(nodes, fmt.Sprintf("… and %d more", len(v.Nodes)-3))
				break
			}
			nodes = append(nodes, fmt.Sprintf("%v %.120s", n.Target, n.HTML))
		}
		t.Errorf("%s: axe %s (%s): %s\n    %s", where, v.ID, v.Impact, v.Help, strings.Join(nodes, "\n    "))
	}
}

// RectOf is an element's box in page coordinates (scroll included).
func RectOf(tab *Tab, testid string) (top, bottom float64) {
	tab.t.Helper()
	var r []float64
	tab.Eval(`(() => { const b = document.querySelector(`+JSString(Sel(testid))+`).getBoundingClientRect(); return [b.top + scrollY, b.bottom + scrollY]; })()`, &r)
	return r[0], r[1]
}

// ViewShot saves what the screen shows — the viewport alone, as a room or
// a reader sees it without scrolling — as e2e/artifacts/<name>.png.
func ViewShot(tab *Tab, name string) {
	tab.t.Helper()
	png, err := RunAction(tab, DefaultTimeout, chromedp.CaptureScreenshot())
	if err != nil {
		tab.t.Fatalf("e2e: ViewShot(%q): %v", name, err)
	}
	path := filepath.Join(ArtifactsDir, Sanitize(name)+".png")
	if err := os.MkdirAll(ArtifactsDir, 0o755); err != nil {
		tab.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tab.t.Fatal(err)
	}
	tab.t.Logf("e2e: the screen: %s", path)
}

// SecretKey is the first key of v, at any depth, that names a secret
// (token, key, secret, password, authorization), or "".
func SecretKey(v any) string {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			l := strings.ToLower(k)
			for _, bad := range []string{"token", "key", "secret", "password", "authorization"} {
				if strings.Contains(l, bad) {
					return k
				}
			}
			if k := SecretKey(x); k != "" {
				return k
			}
		}
	case []any:
		for _, x := range v {
			if k := SecretKey(x); k != "" {
				return k
			}
		}
	}
	return ""
}
