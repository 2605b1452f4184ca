package loadlab

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/e2e/e2etest"
)

// TestLoadLab_TheChartAndTableAreTheCheckersCounts runs the load lab from
// the page, for real: worker processes frozen at random past their lease,
// once per queue style in each of five rounds, every style in every place
// of a round once. The table pairs each live count with the checker's that
// must equal it, and they agree, cell by cell; the charts draw a line per
// style; the verdict is the server's, with the spread of the rounds. Then,
// with the server's one load lab taken, a reader at 375 px asks for one
// and is shown the lab just recorded, replayed, with the same verdict.
func TestLoadLab_TheChartAndTableAreTheCheckersCounts(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 1000)
	e2etest.OpenLive(tab, srv.URL+"/")
	tab.Open("loadlab")
	tab.SetValue("load-workers", "8") // the lab's default crew: 200 jobs end sooner
	tab.SetValue("load-jobs", "200")
	tab.Click("load-run")
	tab.PollState(`s.load.phase === "finished"`, 4*time.Minute)
	st := tab.State()["load"].(map[string]any)
	verdict := st["verdict"].(string)
	if !strings.Contains(verdict, "fencelab: 0") || !strings.Contains(verdict, "over 5 rounds") || tab.Text("load-verdict") != verdict {
		t.Errorf("verdict %q, shown %q", verdict, tab.Text("load-verdict"))
	}
	styles := st["styles"].(map[string]any)
	if len(styles) != 5 {
		t.Fatalf("%d styles, want 5", len(styles))
	}
	for name, v := range styles {
		res := v.(map[string]any)["result"].(map[string]any)
		tally, check := res["tally"].(map[string]any), res["check"].(map[string]any)
		if res["agrees"] != true || tally["late_row"] != check["stale_writes"] || tally["late_receiver"] != check["older_accepted"] {
			t.Errorf("%s: live %v/%v, checker %v/%v", name, tally["late_row"], tally["late_receiver"], check["stale_writes"], check["older_accepted"])
		}
		// Five rounds, one in each place.
		places := map[float64]bool{}
		for _, rd := range res["rounds"].([]any) {
			places[rd.(map[string]any)["position"].(float64)] = true
		}
		if len(places) != 5 || v.(map[string]any)["ended"] != true {
			t.Errorf("%s ran in places %v of 5 rounds", name, places)
		}
		cell := func(k string) string {
			var s string
			tab.Eval(fmt.Sprintf(`document.querySelector('[data-testid="load-row-%s"] [data-k="%s"]').textContent`, name, k), &s)
			return s
		}
		// Each pair of cells: the live count, and beside it the checker's,
		// the same number.
		for _, p := range []struct{ live, checked string }{{"row", "row-check"}, {"rcv", "rcv-check"}} {
			if l, c := cell(p.live), cell(p.checked); l != c {
				t.Errorf("%s: the table's live %s says %q, the checker's %q", name, p.live, l, c)
			}
		}
		for k, want := range map[string]any{"row": tally["late_row"], "row-check": check["stale_writes"], "rcv": tally["late_receiver"], "rcv-check": check["older_accepted"], "zombie": check["zombie_result"]} {
			if got := cell(k); got != fmt.Sprint(want) {
				t.Errorf("%s: the table's %s says %q, the lab %v", name, k, got, want)
			}
		}
		if name == "fencelab" && (check["broken"] != 0.0 || check["zombie_result"] != 0.0) {
			t.Errorf("fencelab: %v", check)
		}
	}
	var lines [2]int
	tab.Eval(`[document.querySelectorAll('[data-testid="load-chart-rate"] polyline').length, document.querySelectorAll('[data-testid="load-chart-zombie"] polyline').length]`, &lines)
	if lines != [2]int{5, 10} {
		t.Errorf("the charts draw %v lines, want 5 rates and 10 zombie counts", lines)
	}
	tab.Eval(`document.querySelector('[data-testid="loadlab"]').scrollIntoView()`, nil)
	tab.Screenshot("load-lab-1280")

	// The one load lab this server runs at a time is taken.
	id, token := srv.NewSession()
	srv.Command(id, token, `{"action":"load","workers":2,"jobs":5000,"styles":["fencelab"]}`)
	small := e2etest.NewTab(t, 375, 800, e2etest.AllowErrors("503"))
	e2etest.OpenLive(small, srv.URL+"/")
	small.Open("loadlab")
	small.Click("load-run")
	small.PollState(`s.load.recorded && s.load.phase === "finished"`, 2*time.Minute)
	if got := small.State()["load"].(map[string]any)["verdict"]; got != verdict {
		t.Errorf("the replayed lab's verdict %q, the run's %q", got, verdict)
	}
	if txt := small.Text("load-recorded"); !strings.Contains(txt, "cannot run a load lab") || !strings.Contains(txt, "replayed") {
		t.Errorf("the replay's note: %q", txt)
	}
	var overflow bool
	small.Eval(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow)
	if overflow {
		t.Errorf("the page scrolls sideways at 375 px")
	}
	small.Eval(`document.querySelector('[data-testid="loadlab"]').scrollIntoView()`, nil)
	small.Screenshot("load-lab-375")
	srv.Command(id, token, `{"action":"reset"}`)
}
