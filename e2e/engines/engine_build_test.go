package engines

// Build it in every engine: the section loads when it is opened, its
// editors hold the leases-alone start, a claim typed wrong is refused with
// the sentence beside its editor and the place selected, and a check of
// the start as is fails, with the article's table and what it breaks.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/sandbox"
)

// engineBuild plays Build it at 1280×900, as TestBuild_StartsFromLeasesAlone,
// TestBuild_ARefusalIsMarkedInItsEditor and TestBuild_CheckNamesWhatIsBroken.
func engineBuild(t *testing.T, srv *e2etest.Server, page func(*testing.T, int, int) *engineTab) {
	tab := page(t, 1280, 900)
	tab.Allow("400 (Bad Request)") // the refused claim's command, as the browser logs it
	tab.OpenLive(srv.URL + "/")
	// Opened as a person opens it: a click on its summary.
	tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build")+" > summary")+`).scrollIntoView({block: "center", behavior: "instant"}), true`, nil)
	if err := tab.d.Click(e2etest.Sel("build")+" > summary", e2etest.DefaultTimeout); err != nil {
		t.Fatalf("e2e (%s): click Build it's summary: %v", tab.engine, err)
	}
	tab.PollState(`s.build !== null && s.build.caughtUp === true`, 30*time.Second)
	start := sandbox.Start()
	for _, k := range sandbox.Kinds() {
		var got string
		tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-"+k.String()+"-text"))+`).value`, &got)
		if got != start.Text(k) {
			t.Errorf("the %s editor starts with %q, want the leases-alone %q", k, got, start.Text(k))
		}
	}
	// Each editor is as tall as its start text, and no wider than its column.
	var sizes []struct {
		Kind                         string
		Client, Scroll, Width, Right float64
	}
	tab.Eval(`[...document.querySelectorAll(".editor[data-kind] textarea")].map(ta => ({kind: ta.name, client: ta.clientHeight, scroll: ta.scrollHeight,
		width: ta.getBoundingClientRect().width, right: ta.getBoundingClientRect().right}))`, &sizes)
	for _, s := range sizes {
		if s.Scroll > s.Client+2 || s.Width < 200 || s.Right > float64(tab.w) {
			t.Errorf("the %s editor is %.0f px tall for %.0f px of text, %.0f px wide, ending at %.0f px", s.Kind, s.Client, s.Scroll, s.Width, s.Right)
		}
	}
	tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-tables")+" > summary")+`).scrollIntoView({block: "center", behavior: "instant"}), true`, nil)
	if err := tab.d.Click(e2etest.Sel("build-tables")+" > summary", e2etest.DefaultTimeout); err != nil {
		t.Fatalf("e2e (%s): click the tables' summary: %v", tab.engine, err)
	}
	tab.WaitVisible("build-table-jobs")
	if txt := tab.Text("build-table-jobs"); !strings.Contains(txt, "lease_until") {
		t.Errorf("the jobs table says %q", txt)
	}

	// A claim typed wrong: a second WHERE after its WHERE, which Postgres
	// cannot parse. The sentence is beside the claim's editor, which has
	// the focus and the word where Postgres stopped selected.
	line := strings.Index(start.Claim, "\n WHERE id") + 1
	if line == 0 {
		t.Fatalf("the start's claim has no line \" WHERE id\": %q", start.Claim)
	}
	caret := line + len(" WHERE")
	tab.Click("build-claim-text")
	tab.Eval(fmt.Sprintf(`(() => { const ta = document.querySelector(%s); ta.focus(); ta.setSelectionRange(%d, %d); return true; })()`, e2etest.JSString(e2etest.Sel("build-claim-text")), caret, caret), nil)
	for _, k := range []string{"Space", "W", "H", "E", "R", "E"} {
		tab.Press(k)
	}
	var claim string
	tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-claim-text"))+`).value`, &claim)
	if want := start.Claim[:caret] + " WHERE" + start.Claim[caret:]; claim != want {
		t.Fatalf("after typing \" WHERE\" the claim is\n%s\nwant\n%s", claim, want)
	}
	tab.Click("build-check")
	// The refusal, waited for on the page's state, so that a wait that
	// fails says where the check stood (its phase, the progress line, the
	// role), not only that no sentence came.
	tab.PollState(`s.build && s.build.phase === "refused" && s.build.refusal && s.build.refusal.kind === "claim"`, e2etest.DefaultTimeout)
	tab.WaitVisible("build-claim-error")
	where := fmt.Sprintf("line %d, column 8", strings.Count(start.Claim[:line], "\n")+1)
	if msg := tab.Text("build-claim-error"); !strings.Contains(msg, where) || !strings.Contains(msg, "syntax") {
		t.Errorf("the refusal says %q; want Postgres's syntax error at %s", msg, where)
	}
	var at map[string]any
	tab.Eval(`(() => { const ta = document.querySelector(`+e2etest.JSString(e2etest.Sel("build-claim-text"))+`), err = document.querySelector(`+e2etest.JSString(e2etest.Sel("build-claim-error"))+`);
		const a = ta.getBoundingClientRect(), b = err.getBoundingClientRect();
		return {focus: document.activeElement === ta, start: ta.selectionStart, end: ta.selectionEnd, invalid: ta.getAttribute("aria-invalid"), gap: b.top - a.bottom, left: b.left - a.left}; })()`, &at)
	if at["focus"] != true || at["start"] != float64(caret+1) || at["end"] != float64(caret+6) || at["invalid"] != "true" {
		t.Errorf("after the refusal the claim's editor: %v; want the focus, the second WHERE (%d–%d) selected, and marked invalid", at, caret+1, caret+6)
	}
	if gap := at["gap"].(float64); gap < -1 || gap > 40 || at["left"].(float64) != 0 {
		t.Errorf("the refusal is %.0f px under the claim's editor and %.0f px from its left: not beside it", gap, at["left"])
	}
	if tab.Visible("build-result") {
		t.Error("a refused check shows a result")
	}
	tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-claim"))+`).scrollIntoView({block: "center", behavior: "instant"}), true`, nil)
	settle(tab)
	tab.Screenshot("build-refused-1280")

	// The start as is: it fails, case by case, and names what is broken.
	tab.Click("build-reset")
	if tab.Visible("build-claim-error") {
		t.Error("Reset left the refusal")
	}
	tab.Click("build-check")
	tab.PollState(`s.build.phase === "finished" && s.build.report && s.build.report.pass === false`, e2etest.CheckTimeout)
	tab.WaitVisible("build-result")
	if txt := tab.Text("build-words"); !strings.Contains(txt, "✗") || !strings.Contains(txt, "fails") {
		t.Errorf("the headline says %q", txt)
	}
	var rows []struct {
		Case, State string
		Crosses     int
		Empty       int
	}
	tab.Eval(`[...document.querySelectorAll(`+e2etest.JSString(e2etest.Sel("build-result")+" tbody tr")+`)].map(tr => ({case: tr.dataset.case, state: tr.dataset.state,
		crosses: [...tr.querySelectorAll('td[data-ok="false"] .mark')].filter(m => m.textContent.includes("✗")).length,
		empty: [...tr.querySelectorAll("td[data-column]")].filter(td => !(td.innerText || td.textContent).trim()).length}))`, &rows)
	crosses := 0
	for _, r := range rows {
		crosses += r.Crosses
		if r.Empty > 0 {
			t.Errorf("case %s has %d empty cells", r.Case, r.Empty)
		}
	}
	if len(rows) != len(experiments.CheckCases()) || crosses == 0 {
		t.Errorf("the result table has %d rows and %d ✗ marks: %+v", len(rows), crosses, rows)
	}
	var broken []string
	tab.Eval(`[...document.querySelectorAll(`+e2etest.JSString(e2etest.Sel("build-broken")+" li")+`)].map(li => li.innerText || li.textContent)`, &broken)
	if len(broken) == 0 || !tab.Visible("build-broken-h") {
		t.Errorf("the result names no broken requirement: %q", broken)
	}
	var over float64
	tab.Eval(`document.documentElement.scrollWidth - innerWidth`, &over)
	if over > 0 {
		t.Errorf("with the result the page is %.0f px wider than the window", over)
	}
	tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-result"))+`).scrollIntoView({block: "start", behavior: "instant"}), true`, nil)
	settle(tab)
	tab.Screenshot("build-result-1280")
	tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-broken"))+`).scrollIntoView({block: "end", behavior: "instant"}), true`, nil)
	settle(tab)
	tab.Screenshot(fmt.Sprintf("build-broken-%d", tab.w))
}

// settle waits for two frames to be drawn, so that a screenshot shows the
// page as it is now (WebKit's otherwise may show an older frame).
func settle(tab *engineTab) {
	tab.t.Helper()
	tab.Eval(`new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(() => resolve(true))))`, nil)
}
