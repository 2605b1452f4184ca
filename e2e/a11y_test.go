package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// axeViolation is one finding of axe-core.
type axeViolation struct {
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
func axe(t *testing.T, tab *Tab) []axeViolation {
	t.Helper()
	src, err := os.ReadFile("testdata/axe.min.js")
	if err != nil {
		t.Fatal(err)
	}
	tab.Eval(string(src)+"; true", nil)
	tab.Eval(`window.__axe = null; axe.run(document, {resultTypes: ["violations"]}).then(r => { window.__axe = JSON.stringify(r.violations); }); true`, nil)
	tab.PollJS(`window.__axe !== null`, 60*time.Second)
	var raw string
	tab.Eval(`window.__axe`, &raw)
	var all []axeViolation
	if err := json.Unmarshal([]byte(raw), &all); err != nil {
		t.Fatal(err)
	}
	var bad []axeViolation
	for _, v := range all {
		if v.Impact == "serious" || v.Impact == "critical" {
			bad = append(bad, v)
		} else {
			t.Logf("axe (%s, allowed): %s: %s", v.Impact, v.ID, v.Help)
		}
	}
	return bad
}

func reportAxe(t *testing.T, where string, vs []axeViolation) {
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

// TestA11y_NoSeriousFindings checks the main page after a run, the embed
// and the projector view, light and dark, with axe-core.
func TestA11y_NoSeriousFindings(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	for _, tc := range []struct{ name, query string }{
		{"main", "ordering=zombie-first&mode=auto&lease=300&pace=0"},
		{"embed", "embed=1&ordering=new-owner-first&mode=auto&lease=300&pace=0"},
		{"present", "present=1&ordering=new-owner-first&mode=auto&lease=300&pace=0"},
	} {
		for _, scheme := range []string{"light", "dark"} {
			t.Run(tc.name+"/"+scheme, func(t *testing.T) {
				t.Parallel()
				tab := newTab(t, 1280, 900)
				tab.EmulateMedia(map[string]string{"prefers-color-scheme": scheme})
				openLive(tab, srv.WithT(t).URL+"/?"+tc.query)
				reportAxe(t, tc.name+" before a run", axe(t, tab))
				tab.Press(" ")
				tab.PollState(`s.outcome !== null`, 60*time.Second)
				reportAxe(t, tc.name+" after a run", axe(t, tab))
			})
		}
	}
}

// TestScreenshots_LightAndDark keeps pictures of a finished, unsafe run at
// 320, 375, 1280 and 1920 px, light and dark, for people to look at; the
// page never scrolls sideways.
func TestScreenshots_LightAndDark(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	for _, w := range []int{320, 375, 1280, 1920} {
		for _, scheme := range []string{"light", "dark"} {
			t.Run(strconv.Itoa(w)+"-"+scheme, func(t *testing.T) {
				t.Parallel()
				tab := newTab(t, w, 1000)
				tab.EmulateMedia(map[string]string{"prefers-color-scheme": scheme})
				runFromPage(t, srv.WithT(t), tab, "ordering=zombie-first&mode=auto&lease=300&pace=0&break=epoch-check&same=1")
				tab.PollJS(`document.querySelector('[data-testid="verdict"]').dataset.state === "unsafe"`, 10*time.Second)
				var overflow bool
				tab.Eval(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow)
				if overflow {
					t.Errorf("the page scrolls sideways at %d px", w)
				}
				tab.Screenshot(fmt.Sprintf("unsafe-%d-%s", w, scheme))
			})
		}
	}
}
