package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/fencelab/fencelab/e2e/e2etest"
)

// TestA11y_NoSeriousFindings checks the main page after a run, the embed
// and the projector view, light and dark, with axe-core.
func TestA11y_NoSeriousFindings(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	for _, tc := range []struct{ name, query string }{
		{"main", "ordering=zombie-first&mode=auto&lease=300&pace=0"},
		{"embed", "embed=1&ordering=new-owner-first&mode=auto&lease=300&pace=0"},
		{"present", "present=1&ordering=new-owner-first&mode=auto&lease=300&pace=0"},
	} {
		for _, scheme := range []string{"light", "dark"} {
			t.Run(tc.name+"/"+scheme, func(t *testing.T) {
				t.Parallel()
				tab := e2etest.NewTab(t, 1280, 900)
				tab.EmulateMedia(map[string]string{"prefers-color-scheme": scheme})
				e2etest.OpenLive(tab, srv.WithT(t).URL+"/?"+tc.query)
				e2etest.ReportAxe(t, tc.name+" before a run", e2etest.Axe(t, tab))
				tab.Press(" ")
				tab.PollState(`s.outcome !== null`, 60*time.Second)
				e2etest.ReportAxe(t, tc.name+" after a run", e2etest.Axe(t, tab))
			})
		}
	}
}

// TestScreenshots_LightAndDark keeps pictures of a finished, unsafe run at
// 320, 375, 1280 and 1920 px, light and dark, for people to look at; the
// page never scrolls sideways.
func TestScreenshots_LightAndDark(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	for _, w := range []int{320, 375, 1280, 1920} {
		for _, scheme := range []string{"light", "dark"} {
			t.Run(strconv.Itoa(w)+"-"+scheme, func(t *testing.T) {
				t.Parallel()
				tab := e2etest.NewTab(t, w, 1000)
				tab.EmulateMedia(map[string]string{"prefers-color-scheme": scheme})
				e2etest.RunFromPage(t, srv.WithT(t), tab, "ordering=zombie-first&mode=auto&lease=300&pace=0&break=epoch-check&same=1")
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
