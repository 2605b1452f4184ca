package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/server/run/child"
)

// TestPage_TheArticlesTable runs both orderings from the page, in auto and
// step mode, and checks the outcome panel shows the article's table, every
// cell marked as a correct build's.
func TestPage_TheArticlesTable(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	for _, tc := range []struct{ ordering, call string }{
		{"new-owner-first", "rejected"},
		{"zombie-first", "accepted, then superseded"},
	} {
		t.Run(tc.ordering, func(t *testing.T) {
			tab := e2etest.NewTab(t, 1280, 900)
			o := e2etest.RunFromPage(t, srv.WithT(t), tab, "ordering="+tc.ordering+"&mode=auto&lease=300&pace=0")
			if o["safe"] != true {
				t.Fatalf("outcome %v", o)
			}
			tab.Open("table-more")
			for _, cell := range []string{"call", "commit", "final"} {
				id := "outcome-" + tc.ordering + "-" + cell
				if ok := tab.Attr(id, "data-ok"); ok != "true" {
					t.Errorf("%s is marked %q: %s", id, ok, tab.Text(id))
				}
			}
			if got := tab.Text("outcome-" + tc.ordering + "-call"); !strings.Contains(got, tc.call) {
				t.Errorf("receiver call cell says %q, want %q", got, tc.call)
			}
			if got := tab.Text("outcome-" + tc.ordering + "-final"); !strings.Contains(got, "epoch 2, the new owner's result in the row and at the receiver") {
				t.Errorf("final cell says %q", got)
			}
			if got := tab.Text("verdict"); !strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(got, "✓")), "Safe") || tab.Attr("verdict", "data-state") != "safe" {
				t.Errorf("verdict %q (%s)", got, tab.Attr("verdict", "data-state"))
			}
			tab.Screenshot("article-" + tc.ordering + "-1280")
		})
	}
}

// TestPage_StepModeAndScrubbing steps a run from the page, then goes back
// through its events and forward again.
func TestPage_StepModeAndScrubbing(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 900)
	e2etest.OpenLive(tab, srv.URL+"/?ordering=new-owner-first&mode=step&lease=300")
	tab.Click("run")
	tab.PollState(`s.run && s.run.mode === "step" && s.run.stepIndex === 0 && s.workers.length === 2`, 30*time.Second)
	for i := 1; i <= 8; i++ {
		tab.Click("step")
		tab.PollState(fmt.Sprintf(`s.run.stepIndex >= %d`, i), 30*time.Second)
	}
	tab.PollState(`s.outcome && s.outcome.safe === true && s.outcome.zombie_receiver_call === "rejected"`, 30*time.Second)
	// The run's last events (the workers' exits, run_state) may still be
	// arriving after its verdict: Back is measured against the events the
	// page holds when it looks, not a count read before.
	tab.PollState(`s.run.ended`, 30*time.Second)
	tab.Click("back")
	tab.PollState(`s.view.scrub !== null && s.view.scrub < s.view.events`, 10*time.Second)
	n := int(tab.State()["view"].(map[string]any)["events"].(float64))
	for range 5 {
		tab.Click("back")
	}
	if got := tab.Text("scrub-pos"); !strings.HasPrefix(got, "event ") {
		t.Fatalf("the scrub position says %q", got)
	}
	tab.Screenshot("scrubbed-1280")
	tab.SetValue("scrub", strconv.Itoa(n))
	tab.PollState(`s.view.scrub === null`, 10*time.Second)
}

// expectedUnsafe is which ordering × guard cells the engine says are
// unsafe with two names for the workers (cmd/fencelab's matrix test and the
// README's table).
var expectedUnsafe = map[string]bool{
	"new-owner-first/epoch-increment":     true,
	"zombie-first/epoch-increment":        true,
	"owner-done-first/epoch-increment":    true,
	"crash-before-commit/epoch-increment": true,
	"new-owner-first/receiver-check":      true,
	"owner-done-first/receiver-check":     true,
	"clock-skew/db-clock":                 true,
}

// expectedUnsafeSameName is what else is unsafe when both workers have one
// name: the owner check no longer tells them apart, so the epoch check is
// all that stops the zombie in the article's two orderings.
var expectedUnsafeSameName = map[string]bool{
	"new-owner-first/epoch-check": true,
	"zombie-first/epoch-check":    true,
}

// TestPage_BreakEachGuard unticks each guard in turn, runs the ordering
// where it matters, and checks the page's verdict; then runs the whole
// matrix from its button and checks every cell.
func TestPage_BreakEachGuard(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	for _, tc := range []struct{ guard, ordering string }{
		{"status-check", "zombie-first"},
		{"owner-check", "zombie-first"},
		{"epoch-check", "zombie-first"},
		{"epoch-increment", "new-owner-first"},
		{"receiver-check", "new-owner-first"},
		{"db-clock", "clock-skew"},
		{"skip-locked", "zombie-first"},
	} {
		t.Run(tc.guard, func(t *testing.T) {
			t.Parallel()
			srv := srv.WithT(t)
			tab := e2etest.NewTab(t, 1280, 900)
			// Clock skew shows its guard only while A's lease is live when
			// B claims: a lease that a late heartbeat on a busy machine
			// cannot lose (as the matrix gives it: experiments.MinSkewLease).
			lease := "300"
			if tc.ordering == "clock-skew" {
				lease = "1000"
			}
			e2etest.OpenLive(tab, srv.URL+"/?ordering="+tc.ordering+"&mode=auto&lease="+lease+"&pace=0")
			tab.SetChecked("guard-"+tc.guard, false)
			tab.Click("run")
			tab.PollState(`s.outcome !== null`, 60*time.Second)
			o := tab.State()["outcome"].(map[string]any)
			wantUnsafe := expectedUnsafe[tc.ordering+"/"+tc.guard]
			if o["safe"] == wantUnsafe {
				t.Fatalf("%s off in %s: safe=%v, want %v (%v)", tc.guard, tc.ordering, o["safe"], !wantUnsafe, o["verdict"])
			}
			broken := fmt.Sprint(o["broken"])
			if !strings.Contains(broken, tc.guard) {
				t.Fatalf("the run did not break %s: %v", tc.guard, broken)
			}
			verdict := tab.Text("verdict")
			if wantUnsafe && (!strings.Contains(verdict, "Unsafe") || !strings.Contains(verdict, tc.guard) || tab.Attr("verdict", "data-state") != "unsafe") {
				t.Errorf("the verdict does not say the run was unsafe because %s was off: %q", tc.guard, verdict)
			}
			if wantUnsafe {
				tab.Open("table-more")
				bad := 0
				for _, c := range []string{"call", "commit", "final"} {
					if tab.Attr("outcome-"+tc.ordering+"-"+c, "data-ok") == "false" {
						bad++
					}
				}
				if bad == 0 && tc.guard != "epoch-increment" {
					t.Errorf("no cell of the table is marked wrong")
				}
				tab.Screenshot("unsafe-" + tc.guard)
			}
		})
	}
}

// TestPage_TheMatrixFillsAsTheEngineSays runs the guard matrix from its
// button: every ordering, with each guard off in turn, with two names and
// with one, 80 real runs; every cell must say what the engine says, and a
// cell opens its run.
func TestPage_TheMatrixFillsAsTheEngineSays(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1920, 1080)
	e2etest.OpenLive(tab, srv.URL+"/")
	tab.Open("experiments")
	tab.Open("matrix")
	tab.Click("matrix-run")
	tab.PollState(`Object.keys(s.matrix).length === 80 && Object.values(s.matrix).every(v => v === "safe" || v === "unsafe" || v === "error")`, 4*time.Minute)
	m := tab.State()["matrix"].(map[string]any)
	unsafe := 0
	for cell, v := range m {
		parts := strings.SplitN(cell, "/", 3)
		key := parts[0] + "/" + parts[1]
		want := "safe"
		if expectedUnsafe[key] || (parts[2] == "same" && expectedUnsafeSameName[key]) {
			want = "unsafe"
			unsafe++
		}
		if v != want {
			t.Errorf("matrix %s: %v, want %s; its run says: %s", cell, v, want, matrixRunSays(srv, tab, parts))
		}
		if got := tab.Attr("matrix-"+strings.Join(parts, "-"), "data-state"); got != want {
			t.Errorf("the grid's cell %s shows %q", cell, got)
		}
	}
	tab.PollState(`s.batches.matrix && s.batches.matrix.phase === "finished"`, 30*time.Second)
	if got, want := tab.Text("matrix-answer"), fmt.Sprintf("%d of 80 runs were unsafe.", unsafe); got != want {
		t.Errorf("the matrix's answer says %q, want %q", got, want)
	}
	tab.Screenshot("matrix-1920")
	// A cell opens its run.
	tab.Click("matrix-new-owner-first-receiver-check-distinct")
	tab.PollState(`s.view.replay === true && s.view.events > 10`, 30*time.Second)
	tab.PollJS(`document.querySelector('[data-testid="verdict"]').dataset.state === "unsafe" && document.querySelectorAll('[data-testid="timeline"] li').length > 10`, 10*time.Second)
	tab.Screenshot("matrix-cell-opened-1920")
	tab.Click("back-live")
	tab.PollState(`s.view.replay === false`, 10*time.Second)
}

// matrixRunSays finds the run of a matrix cell (ordering, guard, "same"
// or "distinct") in the tab's session and returns its verdict and the
// invariants it broke, for a failure message.
func matrixRunSays(srv *e2etest.Server, tab *e2etest.Tab, cell []string) string {
	id, _ := tab.State()["sessionId"].(string)
	var runs []any
	if _, body := srv.Request(http.MethodGet, "/api/sessions/"+id+"/runs", "", ""); json.Unmarshal(body, &runs) != nil {
		return "(its runs could not be read)"
	}
	for _, r := range runs {
		o, _ := r.(map[string]any)["outcome"].(map[string]any)
		if o == nil || o["ordering"] != cell[0] || o["same_identity"] != (cell[2] == "same") {
			continue
		}
		broken, _ := o["broken"].([]any)
		if (cell[1] == "" && len(broken) != 0) || (cell[1] != "" && (len(broken) != 1 || broken[0] != cell[1])) {
			continue
		}
		var inv []string
		vs, _ := o["violations"].([]any)
		for _, v := range vs {
			inv = append(inv, fmt.Sprint(v.(map[string]any)["invariant"]))
		}
		b, _ := json.Marshal(o["effects"])
		runID, _ := r.(map[string]any)["id"].(string)
		return fmt.Sprintf("%v (invariants %v; receiver effects %s)\n  its events:\n%s", o["verdict"], inv, b, runEvents(srv, id, runID))
	}
	return "(no run of this cell in the session)"
}

// runEvents is the text of one run's events in the session's log, one a
// line, for a failure message: what each worker and the runner did.
func runEvents(srv *e2etest.Server, session, run string) string {
	_, body := srv.Request(http.MethodGet, "/api/sessions/"+session+"/events.ndjson", "", "")
	var lines []string
	for _, l := range strings.Split(string(body), "\n") {
		var e struct{ Run, Actor, Kind, Text string }
		if json.Unmarshal([]byte(l), &e) == nil && e.Run == run && run != "" {
			lines = append(lines, "    "+e.Actor+" "+e.Kind+": "+e.Text)
		}
	}
	if len(lines) == 0 {
		return "    (none found)"
	}
	return strings.Join(lines, "\n")
}

// procState reads a process's state letter from /proc ("" when gone).
func procState(pid int) string {
	if st := child.State(pid); st != 0 {
		return string(st)
	}
	return ""
}

// TestPage_PauseReallyStopsTheWorker pauses a worker from the page and reads
// /proc: the process is stopped (T); resuming it continues it.
func TestPage_PauseReallyStopsTheWorker(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 900)
	e2etest.OpenLive(tab, srv.URL+"/?ordering=free-play&lease=2000")
	tab.Click("run")
	tab.PollState(`s.workers.length === 2 && s.workers.every(w => w.pid > 0)`, 30*time.Second)
	var pid int
	tab.Eval(`window.fencelab.state().workers[0].pid`, &pid)
	tab.Click("worker-A-pause")
	tab.PollState(`s.workers[0].frozen === true`, 10*time.Second)
	if st := procState(pid); st != "T" {
		t.Fatalf("after Pause, /proc/%d says %q, want T", pid, st)
	}
	if got := tab.Text("worker-A-state"); !strings.Contains(got, "stopped") {
		t.Errorf("the page shows %q for the paused worker", got)
	}
	tab.Screenshot("paused-1280")
	tab.Click("worker-A-resume")
	tab.PollState(`s.workers[0].frozen === false`, 10*time.Second)
	if st := procState(pid); st == "T" || st == "" {
		t.Fatalf("after Resume, /proc/%d says %q", pid, st)
	}
	tab.Click("worker-A-kill")
	tab.PollState(`s.workers[0].exited === true`, 10*time.Second)
	if st := procState(pid); st != "" && st != "Z" {
		t.Fatalf("after Kill, /proc/%d says %q", pid, st)
	}
}

// TestPage_DroppedSocketCatchesUp drops the page's socket in the middle of
// a run; it reconnects, says how many events it caught up, and holds every
// event once, in order.
func TestPage_DroppedSocketCatchesUp(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 900)
	e2etest.OpenLive(tab, srv.URL+"/?ordering=zombie-first&mode=auto&lease=400&pace=400")
	tab.Click("run")
	tab.PollState(`s.run && s.run.stepIndex >= 2`, 30*time.Second)
	tab.Eval(`window.fencelab.stream.drop(); true`, nil)
	tab.PollState(`s.reconnects >= 1 && s.connection === "live"`, 30*time.Second)
	tab.PollState(`s.outcome !== null`, 60*time.Second)
	if txt := tab.Text("connection"); !strings.Contains(txt, "reconnected, caught up") {
		t.Errorf("the connection status says %q", txt)
	}
	st := tab.State()
	run := st["run"].(map[string]any)["id"].(string)
	var seqs []float64
	for _, s := range st["seqs"].([]any) {
		seqs = append(seqs, s.(float64))
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("seq %v after %v: a duplicate or out of order", seqs[i], seqs[i-1])
		}
	}
	server := srv.GetJSON("/api/sessions/" + st["sessionId"].(string) + "/events?run=" + run + "&limit=10000")
	var want []float64
	for _, e := range server["events"].([]any) {
		want = append(want, e.(map[string]any)["seq"].(float64))
	}
	// The page may have more if events arrived after the request; it must
	// hold every one the server had, with no gap.
	if len(seqs) < len(want) || fmt.Sprint(seqs[:len(want)]) != fmt.Sprint(want) {
		t.Fatalf("the page holds %d events, the server %d: gap or duplicate\npage   %v\nserver %v", len(seqs), len(want), seqs, want)
	}
}

// TestPage_KeyboardAlone drives a whole run without a mouse: open the
// setup, choose the scenario and the mode with the keyboard, run, step, go
// back, open the help, reset.
func TestPage_KeyboardAlone(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 900)
	e2etest.OpenLive(tab, srv.URL+"/?lease=300")
	tabTo := func(testid string, max int) {
		t.Helper()
		for i := 0; i < max && tab.Focused() != testid; i++ {
			tab.Press("Tab")
		}
		if tab.Focused() != testid {
			t.Fatalf("Tab never reached %s (focus on %q)", testid, tab.Focused())
		}
	}
	// Tab to "Set it up yourself" and open it.
	tabTo("more-summary", 80)
	tab.Press("Enter")
	tab.PollJS(`document.querySelector('[data-testid="more"]').open === true`, 5*time.Second)
	// The scenario picker: choose "new owner first" (the first).
	tab.Press("Tab")
	if tab.Focused() != "ordering" {
		t.Fatalf("after the setup's summary, focus is on %q", tab.Focused())
	}
	tab.Press("ArrowUp")
	tab.Press("Tab")
	if tab.Focused() != "mode" {
		t.Fatalf("after the picker, focus is on %q", tab.Focused())
	}
	tab.Press("ArrowDown") // step by step
	tab.PollJS(`document.querySelector('[data-testid="ordering"]').value === "new-owner-first" && document.querySelector('[data-testid="mode"]').value === "step"`, 5*time.Second)
	// Keys are ignored while typing in a field: → on the lease slider moves
	// the slider and steps nothing.
	tabTo("lease", 40)
	tab.Press("ArrowRight")
	tab.PollJS(`document.querySelector('[data-testid="lease"]').value === "400"`, 5*time.Second)
	if st := tab.State(); st["run"] != nil {
		t.Fatalf("a key pressed in a field started a run: %v", st["run"])
	}
	tabTo("run-setup", 10)
	tab.Press(" ") // the focused "Run this setup" button
	tab.PollState(`s.run && s.run.mode === "step" && s.workers.length === 2`, 30*time.Second)
	for i := 1; i <= 8; i++ {
		tab.Press("ArrowRight")
		tab.PollState(fmt.Sprintf(`s.run.stepIndex >= %d`, i), 30*time.Second)
	}
	tab.PollState(`s.outcome && s.outcome.safe === true && s.outcome.ordering === "new-owner-first"`, 30*time.Second)
	tab.Press("ArrowLeft")
	tab.Press("ArrowLeft")
	tab.PollState(`s.view.scrub !== null`, 5*time.Second)
	tab.Press("?")
	tab.PollJS(`document.querySelector('[data-testid="help"]').open === true`, 5*time.Second)
	tab.Screenshot("help-1280")
	tab.Press("Escape")
	tab.PollJS(`document.querySelector('[data-testid="help"]').open === false`, 5*time.Second)
	tab.Press("r")
	tab.PollState(`s.run && s.run.ended === true`, 20*time.Second)
	// A visible focus ring: the focused element has an outline.
	var outline string
	tab.Press("Tab")
	tab.Eval(`getComputedStyle(document.activeElement).outlineStyle`, &outline)
	if outline == "none" || outline == "" {
		t.Errorf("the focused element has no visible outline (%q)", outline)
	}
}

// TestPage_Screenshots keeps pictures of a live run at the three widths.
func TestPage_Screenshots(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	for _, w := range []int{320, 1280, 1920} {
		t.Run(strconv.Itoa(w), func(t *testing.T) {
			t.Parallel()
			srv := srv.WithT(t)
			id, token := srv.NewSession()
			srv.Command(id, token, `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":3000}`)
			for range 4 {
				srv.Command(id, token, `{"action":"step"}`)
			}
			tab := e2etest.NewTab(t, w, 1000)
			tab.Navigate(srv.DriveURL(id, token))
			tab.WaitReady()
			tab.PollState(`s.connection === "live" && s.workers.length === 2`, 30*time.Second)
			var overflow bool
			tab.Eval(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow)
			if overflow {
				t.Errorf("the page scrolls sideways at %d px", w)
			}
			tab.Screenshot(fmt.Sprintf("live-%d", w))
		})
	}
}
