package buildit

// Build it, check it: the article's Steps 2 and 3 on the page. The reader
// writes the four statements, the server checks them and runs the
// article's test on them with real workers, and the page names what the
// runs show broken; a refused statement is marked in its own editor, and a
// solution travels in a link.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/sandbox"
)

// openBuild opens a new session's page at url, unfolds Build it and
// waits for its editors.
func openBuild(tab *e2etest.Tab, url string) {
	tab.T().Helper()
	e2etest.OpenLive(tab, url)
	tab.Open("build")
	tab.PollState(`s.build !== null`, 10*time.Second)
}

// editor returns a statement's editor's text.
func editorText(tab *e2etest.Tab, kind string) string {
	tab.T().Helper()
	var s string
	tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-"+kind+"-text"))+`).value`, &s)
	return s
}

// buildShot saves a screenshot of one element of Build it (the section
// itself, or its result) as e2e/artifacts/<name>.png. The window grows to hold the whole section
// while it is taken (Chromium paints only what a window shows), then
// shrinks back.
func buildShot(tab *e2etest.Tab, testid, name string) {
	tab.T().Helper()
	var h float64
	tab.Eval(`document.documentElement.scrollHeight`, &h)
	if err := tab.Do(e2etest.DefaultTimeout, chromedp.EmulateViewport(int64(tab.Width), int64(max(h, float64(tab.Height))))); err != nil {
		tab.T().Fatalf("e2e: buildShot(%q): %v", name, err)
	}
	png, err := e2etest.RunAction(tab, e2etest.DefaultTimeout, chromedp.Screenshot(chromedp.CSS(e2etest.Sel(testid))))
	if err2 := tab.Do(e2etest.DefaultTimeout, chromedp.EmulateViewport(int64(tab.Width), int64(tab.Height))); err == nil {
		err = err2
	}
	if err != nil {
		tab.T().Fatalf("e2e: buildShot(%q): %v", name, err)
	}
	if err := os.MkdirAll(e2etest.ArtifactsDir, 0o755); err != nil {
		tab.T().Fatal(err)
	}
	path := filepath.Join(e2etest.ArtifactsDir, e2etest.Sanitize(name)+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tab.T().Fatal(err)
	}
	tab.T().Logf("e2e: Build it: %s", path)
}

// TestBuild_StartsFromLeasesAlone: the section has an editor a statement,
// each holding the sandbox's leases-alone text and listing the named
// parameters it may use; the tables' columns are there, and the
// presenter's keys do nothing while the reader types.
func TestBuild_StartsFromLeasesAlone(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	for _, w := range []int{375, 1280} {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			t.Parallel()
			tab := e2etest.NewTab(t, w, 900)
			openBuild(tab, srv.WithT(t).URL+"/")
			start := sandbox.Start()
			for _, k := range sandbox.Kinds() {
				if got := editorText(tab, k.String()); got != start.Text(k) {
					t.Errorf("the %s editor starts with %q, want the leases-alone %q", k, got, start.Text(k))
				}
				spec, _ := sandbox.SpecOf(k)
				var params []string
				tab.Eval(`[...document.querySelectorAll(`+e2etest.JSString(e2etest.Sel("build-"+k.String()+"-params")+" li")+`)].map(li => li.dataset.param)`, &params)
				var want []string
				for _, p := range spec.Params {
					want = append(want, p.Name)
				}
				if strings.Join(params, ",") != strings.Join(want, ",") {
					t.Errorf("the %s editor lists the parameters %v, want %v", k, params, want)
				}
				var attrs map[string]string
				tab.Eval(`(() => { const ta = document.querySelector(`+e2etest.JSString(e2etest.Sel("build-"+k.String()+"-text"))+`);
					return {spellcheck: ta.getAttribute("spellcheck"), autocapitalize: ta.getAttribute("autocapitalize"), label: ta.labels[0] ? ta.labels[0].textContent : "", font: getComputedStyle(ta).fontFamily}; })()`, &attrs)
				if attrs["spellcheck"] != "false" || attrs["autocapitalize"] != "off" || attrs["label"] == "" || !strings.Contains(attrs["font"], "mono") {
					t.Errorf("the %s editor is not a labelled monospace editor with spelling off: %v", k, attrs)
				}
			}
			tab.Open("build-tables")
			if txt := tab.Text("build-table-jobs"); !strings.Contains(txt, "lease_until") || !strings.Contains(txt, "max_attempts") {
				t.Errorf("the jobs table says %q", txt)
			}
			if txt := tab.Text("build-table-deliveries"); !strings.Contains(txt, "prev_epoch") {
				t.Errorf("the deliveries table says %q", txt)
			}
			if txt := tab.Text("build-claim-returns"); !strings.Contains(txt, "lease_until") {
				t.Errorf("the claim's columns to return say %q", txt)
			}
			// A page wider than its screen is a page that scrolls sideways.
			var over float64
			tab.Eval(`document.documentElement.scrollWidth - innerWidth`, &over)
			if over > 0 {
				t.Errorf("at %d px the page is %.0f px wider than the screen", w, over)
			}
			buildShot(tab, "build", fmt.Sprintf("build-%d", w))

			// Typing r, Space and ? in an editor writes them; it neither
			// resets, runs nor opens the help.
			tab.Eval(`(() => { const ta = document.querySelector(`+e2etest.JSString(e2etest.Sel("build-claim-text"))+`); ta.focus(); ta.setSelectionRange(0, 0); })()`, nil)
			for _, k := range []string{"r", "Space", "?", "ArrowRight"} {
				tab.Press(k)
			}
			if got := editorText(tab, "claim"); !strings.HasPrefix(got, "r ?") {
				t.Errorf("after typing r, Space, ? the claim begins %q", got[:min(len(got), 12)])
			}
			st := tab.State()
			if st["run"] != nil {
				t.Errorf("typing in the editor started a run: %v", st["run"])
			}
			if tab.Visible("help") {
				t.Error("typing ? in the editor opened the help")
			}
			// Reset brings the start back.
			tab.Click("build-reset")
			if got := editorText(tab, "claim"); got != start.Claim {
				t.Errorf("after Reset the claim is %q", got)
			}
		})
	}
}

// TestBuild_ARefusalIsMarkedInItsEditor: a claim Postgres cannot parse is
// refused before anything runs; the page says why beside the claim's
// editor, gives it the focus and selects where Postgres stopped, counted
// in code points as the server counts them (a character past U+FFFF
// before it takes two UTF-16 units in the editor).
func TestBuild_ARefusalIsMarkedInItsEditor(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 900, e2etest.AllowErrors("400"))
	openBuild(tab, srv.URL+"/")
	claim := "-- 🦀 mine\nUPDATE jobs SET owner = :owner WHERE WHERE id = 1 RETURNING id, owner, epoch, lease_until"
	tab.SetValue("build-claim-text", claim)
	tab.Click("build-check")
	tab.WaitVisible("build-claim-error")
	msg := tab.Text("build-claim-error")
	if msg == "" {
		t.Fatal("the refusal says nothing")
	}
	if f := tab.Focused(); f != "build-claim-text" {
		t.Errorf("after the refusal the focus is on %q, not the claim's editor", f)
	}
	st := tab.State()
	ref, _ := st["build"].(map[string]any)["refusal"].(map[string]any)
	if ref == nil || ref["kind"] != "claim" {
		t.Fatalf("the page holds the refusal %v", ref)
	}
	second := strings.LastIndex(claim, "WHERE")
	want := len([]rune(claim[:second])) + 1 // what the server says: 1-based code points
	if ref["position"] != float64(want) {
		t.Errorf("the refusal's position is %v, want %d (the second WHERE), in code points: %s", ref["position"], want, msg)
	}
	var selStart, selEnd int
	tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-claim-text"))+`).selectionStart`, &selStart)
	tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-claim-text"))+`).selectionEnd`, &selEnd)
	var utf16 int
	tab.Eval(`(() => { const s = `+e2etest.JSString(claim)+`; return s.lastIndexOf("WHERE"); })()`, &utf16)
	if selStart != utf16 || selEnd <= selStart {
		t.Errorf("the editor selects %d–%d, want from %d (the second WHERE in UTF-16 units)", selStart, selEnd, utf16)
	}
	if tab.Attr("build-claim-text", "aria-invalid") != "true" {
		t.Error("the refused editor is not marked invalid")
	}
	if tab.Visible("build-result") {
		t.Error("a refused check shows a result")
	}
	buildShot(tab, "build-claim", "build-refused-1280")
	e2etest.ReportAxe(t, "Build it with a refusal", e2etest.Axe(t, tab))
	// Editing the statement takes the refusal away.
	tab.SetValue("build-claim-text", sandbox.Start().Claim)
	if tab.Visible("build-claim-error") {
		t.Error("the refusal stays after the claim was edited")
	}
}

// TestBuild_CheckNamesWhatIsBroken is the article's challenge played: the
// start's claim, which does not raise the epoch, with our complete, fail
// and receiver, fails the check, and the page names the requirement — every
// claim raises the epoch — from the runs' own history; with the epoch
// raised again the same statements pass, and ours are shown beside them.
// Each case opens its run on the stage.
func TestBuild_CheckNamesWhatIsBroken(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	for _, w := range []int{1280, 375} {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			tab := e2etest.NewTab(t, w, 900)
			openBuild(tab, srv.WithT(t).URL+"/")
			// The start is leases alone: its claim raises no epoch.
			noRaise, raised := sandbox.Start().Claim, sandbox.Ours().Claim
			if strings.Contains(noRaise, "epoch = epoch + 1") || !strings.Contains(raised, "epoch = epoch + 1") {
				t.Fatal("the start's claim raises the epoch, or ours does not")
			}
			tab.SetValue("build-claim-text", noRaise)
			for _, k := range []string{"complete", "fail", "receiver"} {
				var ours string
				tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-"+k+"-ours")+" pre")+`).textContent`, &ours)
				tab.SetValue("build-"+k+"-text", ours)
			}
			tab.Click("build-check")
			// While it runs, the page says which case.
			tab.PollState(`s.build.phase === "running" || s.build.phase === "finished"`, 60*time.Second)
			if tab.State()["build"].(map[string]any)["phase"] == "running" {
				tab.PollJS(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-progress"))+`).textContent.startsWith("Running")`, 10*time.Second)
			}
			tab.PollState(`s.build.phase === "finished"`, e2etest.CheckTimeout)
			tab.PollState(`s.build.report && s.build.report.pass === false && s.build.report.broken.some(b => b.requirement === "epoch-raised")`, 5*time.Second)
			tab.WaitVisible("build-result")
			var li string
			tab.Eval(`(() => { const li = document.querySelector(`+e2etest.JSString(e2etest.Sel("build-broken")+` li[data-requirement="epoch-raised"]`)+`); return li ? li.textContent : ""; })()`, &li)
			if !strings.Contains(li, "epoch") {
				t.Errorf("the broken list says %q for epoch-raised", li)
			}
			// The article's table for their code: every case's row has its
			// three cells, and a cell not as a correct build shows a ✗ and
			// what a correct build shows.
			var rows []struct {
				Case, State string
				Cells       []string
				Bad         int
			}
			tab.Eval(`[...document.querySelectorAll(`+e2etest.JSString(e2etest.Sel("build-result")+" tbody tr")+`)].map(tr => ({case: tr.dataset.case, state: tr.dataset.state,
				cells: [...tr.querySelectorAll("td[data-column]")].map(td => td.innerText.trim()),
				bad: tr.querySelectorAll('td[data-ok="false"] .expected.shown').length}))`, &rows)
			bad := 0
			for _, r := range rows {
				for i, c := range r.Cells {
					if c == "" {
						t.Errorf("case %s: cell %d is empty", r.Case, i)
					}
				}
				bad += r.Bad
			}
			if bad == 0 {
				t.Errorf("no cell shows what a correct build shows: %+v", rows)
			}
			// Each row shows the mark the report gives its case, by name:
			// the page works out no mark of its own.
			var marks map[string]string
			tab.Eval(`Object.fromEntries(window.fencelab.state().build.report.cases.map(c => [c.case, c.mark]))`, &marks)
			for _, r := range rows {
				if m, ok := marks[r.Case]; !ok || r.State != m || m == "" {
					t.Errorf("case %s's row is %q: the report's mark for it is %q", r.Case, r.State, m)
				}
			}
			if txt := tab.Text("build-words"); !strings.Contains(txt, "fails") {
				t.Errorf("the headline says %q", txt)
			}
			// What is broken sits right under the headline, before the
			// table, at every width.
			_, wordsBottom := e2etest.RectOf(tab, "build-words")
			brokenTop, _ := e2etest.RectOf(tab, "build-broken-h")
			if gap := brokenTop - wordsBottom; gap < 0 || gap > 60 {
				t.Errorf("what the runs show broken starts %.0f px below the headline: want it right under it", gap)
			}
			// Nothing of a statement hides past its editor's edge: the
			// fail's CASE … ELSE 'pending' wraps at 375 px.
			var hidden []string
			tab.Eval(`[...document.querySelectorAll(".editor textarea")].filter(ta => ta.scrollWidth > ta.clientWidth + 1).map(ta => ta.name)`, &hidden)
			if len(hidden) > 0 {
				t.Errorf("editors with text past their edge: %v", hidden)
			}
			buildShot(tab, "build", fmt.Sprintf("build-fails-%d", w))
			buildShot(tab, "build-result", fmt.Sprintf("build-fails-result-%d", w))

			// The case's run, opened on the stage, shows their claim as it ran.
			var failed string
			tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-case-new-owner-first-open"))+`).dataset.openRun`, &failed)
			tab.Click("build-case-new-owner-first-open")
			tab.PollState(fmt.Sprintf(`s.view.replay === true && s.view.run === %s && s.view.events > 0`, e2etest.JSString(failed)), 30*time.Second)
			// The page draws the run it opened at its next frame.
			tab.PollJS(`document.querySelectorAll(`+e2etest.JSString(e2etest.Sel("timeline")+" details.sql")+`).length > 0`, 10*time.Second)
			var sqls []string
			tab.Eval(`[...document.querySelectorAll(`+e2etest.JSString(e2etest.Sel("timeline")+" details.sql pre code:not(.args)")+`)].map(c => c.textContent)`, &sqls)
			claims := 0
			for _, q := range sqls {
				if strings.Contains(q, "attempts = attempts + 1") {
					claims++
					if strings.Contains(q, "epoch = epoch + 1") {
						t.Errorf("the run's claim raises the epoch: it is not the reader's: %s", q)
					}
				}
			}
			if claims == 0 {
				t.Errorf("the opened run's timeline shows no claim among its %d statements", len(sqls))
			}
			if txt := tab.Text("narration"); strings.Contains(txt, "guards") {
				t.Errorf("a run of the reader's statements is narrated as the engine's: %q", txt)
			}
			// And the stage comes into view.
			tab.PollJS(`(() => { const r = document.querySelector(`+e2etest.JSString(e2etest.Sel("stage"))+`).getBoundingClientRect(); return r.top > -2 && r.top < innerHeight / 2; })()`, 10*time.Second)
			e2etest.ViewShot(tab, fmt.Sprintf("build-run-on-stage-%d", w))

			// The epoch raised again: it passes, and ours are shown beside.
			// The stage was just brought into view and is still drawing the
			// run it opened: at 375 px its layout moves the button between
			// the mouse's aim and its press, and CI once clicked beside it.
			// This click is the button's own; the mouse's is tested above.
			tab.SetValue("build-claim-text", raised)
			tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-check"))+`).click()`, nil)
			tab.PollState(`s.build.phase !== "finished"`, 30*time.Second)
			tab.PollState(`s.build.phase === "finished"`, e2etest.CheckTimeout)
			tab.PollState(`s.build.report && s.build.report.pass === true && s.build.report.broken.length === 0`, 5*time.Second)
			if txt := tab.Text("build-words"); !strings.Contains(txt, "passes") {
				t.Errorf("the headline says %q", txt)
			}
			// Compare with ours stays as the reader left it (off), and
			// shows what differs, line by line.
			if c := tab.State()["build"].(map[string]any)["comparing"]; c != false {
				t.Errorf("after a pass comparing is %v: a pass does not press the reader's button", c)
			}
			tab.Click("build-compare")
			tab.PollState(`s.build.comparing === true`, 5*time.Second)
			tab.WaitVisible("build-claim-ours")
			for _, k := range []string{"claim", "complete", "fail", "receiver"} {
				if got := tab.Text("build-" + k + "-ours"); !strings.HasPrefix(got, "Ours: the same as yours") {
					t.Errorf("the %s is ours, and the comparison says %q", k, got)
				}
			}
			tab.SetValue("build-claim-text", noRaise)
			var diff struct{ Ins, Del []string }
			tab.Eval(`(() => { const p = document.querySelector(`+e2etest.JSString(e2etest.Sel("build-claim-ours")+" pre.diff")+`);
				return {ins: [...p.querySelectorAll("ins")].map(e => e.textContent), del: [...p.querySelectorAll("del")].map(e => e.textContent)}; })()`, &diff)
			if len(diff.Ins) != 1 || !strings.Contains(diff.Ins[0], "epoch = epoch + 1") || len(diff.Del) != 0 {
				t.Errorf("the start's claim against ours shows + %q, − %q: want the increment alone, ours", diff.Ins, diff.Del)
			}
			tab.SetValue("build-claim-text", raised)
			e2etest.ReportAxe(t, fmt.Sprintf("Build it with its result and ours, at %d px", w), e2etest.Axe(t, tab))
			buildShot(tab, "build", fmt.Sprintf("build-passes-%d", w))
			buildShot(tab, "build-result", fmt.Sprintf("build-passes-result-%d", w))

			// A case's run opens on the stage, the reader's statements in it.
			var run string
			tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-case-zombie-first-open"))+`).dataset.openRun`, &run)
			tab.Click("build-case-zombie-first-open")
			tab.PollState(fmt.Sprintf(`s.view.replay === true && s.view.run === %s && s.view.events > 0`, e2etest.JSString(run)), 30*time.Second)
		})
	}
}

// TestBuild_ASolutionTravelsInTheLink: statements the reader edited go in
// the address's fragment and its Permalink; a page opened on that link
// starts from them. A link whose solution cannot be read is ignored with
// a note, and the editors start from the start.
func TestBuild_ASolutionTravelsInTheLink(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 900)
	openBuild(tab, srv.URL+"/")
	mine := "-- mine: ünïcode and 🦀\n" + sandbox.Ours().Complete
	tab.SetValue("build-complete-text", mine)
	tab.PollJS(`location.hash.startsWith("#sol=") && document.querySelector(`+e2etest.JSString(e2etest.Sel("permalink"))+`).href.includes("#sol=")`, 10*time.Second)
	link := tab.Attr("permalink", "href")
	if !tab.Visible("build-link") || tab.Attr("build-link", "href") != link {
		t.Errorf("Build it's own link is %q (visible %v), want the permalink %q", tab.Attr("build-link", "href"), tab.Visible("build-link"), link)
	}

	other := e2etest.NewTab(t, 375, 800)
	e2etest.OpenLive(other, srv.URL+link)
	other.PollState(`s.build.fromLink === true`, 10*time.Second)
	if !other.Visible("build-complete-text") {
		t.Error("a link with a solution leaves Build it folded")
	}
	if got := editorText(other, "complete"); got != mine {
		t.Errorf("the linked page's complete is %q, want %q", got, mine)
	}
	if got := editorText(other, "claim"); got != sandbox.Start().Claim {
		t.Errorf("the linked page's claim is %q, want the start's", got)
	}
	// The sender's address bar, /s/<their session>…#sol=, given instead:
	// it opens as the recipient's own copy, a session of their own that
	// they drive, with the statements, and not the sender's result.
	var sender struct{ Href, Session string }
	tab.Eval(`({href: location.href, session: window.fencelab.state().sessionId})`, &sender)
	if !strings.Contains(sender.Href, "/s/"+sender.Session) || !strings.Contains(sender.Href, "#sol=") {
		t.Fatalf("the sender's address bar is %q", sender.Href)
	}
	copied := e2etest.NewTab(t, 375, 800)
	e2etest.OpenLive(copied, sender.Href)
	copied.PollState(`s.build.fromLink === true`, 10*time.Second)
	var st struct{ Session, Role, Path string }
	copied.Eval(`({session: window.fencelab.state().sessionId, role: window.fencelab.state().role, path: location.pathname})`, &st)
	if st.Session == sender.Session || st.Role != "driver" || strings.HasPrefix(st.Path, "/s/"+sender.Session) {
		t.Errorf("the sender's address opened as %+v: want a session of the recipient's own, driven (the sender's is %s)", st, sender.Session)
	}
	if got := editorText(copied, "complete"); got != mine {
		t.Errorf("the copy's complete is %q, want %q", got, mine)
	}
	if copied.Attr("build-check", "disabled") != "" {
		t.Error("Check it is disabled in the recipient's copy")
	}

	// Back to the start: the link carries no solution.
	other.Click("build-reset")
	other.PollJS(`!location.hash.includes("sol=")`, 10*time.Second)
	if other.Visible("build-link") {
		t.Error("at the start, Build it offers a link to the reader's statements")
	}

	// not base64url, not JSON, an array, a claim that is a number, a claim
	// with a right-to-left override in it
	hidden := base64.RawURLEncoding.EncodeToString([]byte(`{"claim":"UPDATE jobs SET owner = 'a' -- \u202e;)di = di EREHW"}`))
	for _, bad := range []string{"%%%", "bm90IGpzb24", "WyJhIl0", "eyJjbGFpbSI6MX0", hidden} {
		t.Run(bad, func(t *testing.T) {
			bt := e2etest.NewTab(t, 375, 800)
			e2etest.OpenLive(bt, srv.URL+"/#sol="+bad)
			bt.WaitVisible("build-note")
			if txt := bt.Text("build-note"); !strings.Contains(txt, "ignored") {
				t.Errorf("the note says %q", txt)
			}
			if got := editorText(bt, "claim"); got != sandbox.Start().Claim {
				t.Errorf("after a bad link the claim is %q", got)
			}
		})
	}
}

// TestBuild_OnAProjectorAndInABlog: in present mode at 1920×1080 the
// opened section sets no visible text under 20 px; in a blog's iframe it
// waits folded, in half a row, and on a phone, where the embed has no room
// to spare, it is the full page's.
func TestBuild_OnAProjectorAndInABlog(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	t.Run("present", func(t *testing.T) {
		tab := e2etest.NewTab(t, 1920, 1080)
		openBuild(tab, srv.WithT(t).URL+"/?present=1")
		tab.Open("build-tables")
		var small []string
		tab.Eval(`(() => {
			const out = [];
			const root = document.querySelector(`+e2etest.JSString(e2etest.Sel("build"))+`);
			const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
			for (let n = walk.nextNode(); n; n = walk.nextNode()) {
				const el = n.parentElement;
				if (!n.textContent.trim() || !el || !el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) continue;
				if (el.closest(".sr-only, [hidden]")) continue;
				const px = parseFloat(getComputedStyle(el).fontSize);
				if (px < 19.5) out.push(px.toFixed(1) + "px <" + el.tagName.toLowerCase() + " class=" + el.className + ">: " + n.textContent.trim().slice(0, 40));
			}
			return out;
		})()`, &small)
		if len(small) > 0 {
			t.Errorf("%d visible texts of Build it are under 20 px in present mode; the first: %s", len(small), strings.Join(small[:min(len(small), 8)], "\n"))
		}
		buildShot(tab, "build", "build-present-1920")
	})
	t.Run("embed", func(t *testing.T) {
		// On a phone an embed has no room for it; wider, it waits folded.
		phone := e2etest.NewTab(t, 375, 667)
		e2etest.OpenLive(phone, srv.WithT(t).URL+"/?embed=1")
		if phone.Visible("build") {
			t.Error("an embed on a phone shows Build it")
		}
		tab := e2etest.NewTab(t, 720, 1024)
		e2etest.OpenLive(tab, srv.WithT(t).URL+"/?embed=1")
		top, bottom := e2etest.RectOf(tab, "build")
		if h := bottom - top; h > 80 {
			t.Errorf("folded in an embed, Build it is %.0f px tall", h)
		}
		tab.Open("build")
		tab.PollState(`s.build !== null`, 10*time.Second)
		if tab.Visible("build-tables") {
			t.Error("an embed shows the tables' columns")
		}
		buildShot(tab, "build", "build-embed-720")
	})
}

// TestBuild_AServerThatRunsNoReadersSQL: started with --no-custom-sql,
// the server says so in Build it, whose Check button is disabled; the
// editors stay, to write and share.
func TestBuild_AServerThatRunsNoReadersSQL(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t, "--no-custom-sql")
	tab := e2etest.NewTab(t, 375, 800)
	openBuild(tab, srv.URL+"/")
	tab.WaitVisible("build-off")
	if txt := tab.Text("build-off"); !strings.Contains(txt, "--no-custom-sql") {
		t.Errorf("the section says %q", txt)
	}
	var disabled bool
	tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-check"))+`).disabled`, &disabled)
	if !disabled {
		t.Error("Check it is enabled on a server that runs no reader's SQL")
	}
	tab.SetValue("build-complete-text", sandbox.Ours().Complete)
	tab.PollJS(`location.hash.startsWith("#sol=")`, 10*time.Second)
}

// checkShown waits until the tab's Build it shows a finished check of the
// leases-alone start: it fails, the table has a ✗ and what a correct build
// shows, and something is named broken.
func checkShown(t *testing.T, tab *e2etest.Tab) {
	t.Helper()
	tab.PollState(`s.build && s.build.phase === "finished" && s.build.report && s.build.report.pass === false && s.build.report.broken.length > 0`, e2etest.CheckTimeout)
	tab.WaitVisible("build-result")
	if txt := tab.Text("build-words"); !strings.Contains(txt, "fails") {
		t.Errorf("the headline says %q", txt)
	}
	var bad, broken int
	tab.Eval(`document.querySelectorAll(`+e2etest.JSString(e2etest.Sel("build-result")+` td[data-ok="false"] .expected.shown`)+`).length`, &bad)
	tab.Eval(`document.querySelectorAll(`+e2etest.JSString(e2etest.Sel("build-broken")+" li")+`).length`, &broken)
	if bad == 0 || broken == 0 {
		t.Errorf("the result shows %d cells not as a correct build's and %d broken requirements", bad, broken)
	}
}

// TestBuild_AReloadedPageShowsTheCheck: a check's events came before the
// section loaded — the page was reloaded after it, or during it, or the
// reader came by the watch link — and the section still shows it: its
// progress while it runs, then its report, read back from the session's
// log. A watcher sees it with Check it disabled, and why, on one line.
func TestBuild_AReloadedPageShowsTheCheck(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	t.Run("after", func(t *testing.T) {
		tab := e2etest.NewTab(t, 1280, 900)
		openBuild(tab, srv.WithT(t).URL+"/")
		tab.Click("build-check") // the leases-alone start: it fails
		checkShown(t, tab)
		var report string
		tab.Eval(`JSON.stringify(window.fencelab.state().build.report)`, &report)
		var here string
		tab.Eval(`location.href`, &here)
		e2etest.OpenLive(tab, here)
		// The page opens Build it by itself, since the session has a check.
		tab.PollState(`s.build !== null && s.build.caughtUp === true`, 10*time.Second)
		checkShown(t, tab)
		// The check's runs are Build it's, not cells of the guard matrix.
		if m, _ := tab.State()["matrix"].(map[string]any); len(m) > 0 {
			t.Errorf("after a reload the guard matrix shows the check's runs: %v", m)
		}
		var again string
		tab.Eval(`JSON.stringify(window.fencelab.state().build.report)`, &again)
		if again != report {
			t.Errorf("after a reload the report is\n%s\nwant\n%s", again, report)
		}
		var disabled bool
		tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-check"))+`).disabled`, &disabled)
		if disabled || tab.Visible("build-why") || tab.Attr("build-check", "aria-describedby") != "" {
			t.Errorf("after a reload the driver's Check it is disabled (%v) or says why not (%v, described by %q)", disabled, tab.Visible("build-why"), tab.Attr("build-check", "aria-describedby"))
		}
		// The watch link: the same check, and Check it off, with its reason.
		id := tab.State()["sessionId"].(string)
		viewer := e2etest.NewTab(t, 375, 800)
		e2etest.OpenLive(viewer, srv.WatchURL(id))
		viewer.PollState(`s.role === "viewer" && s.build !== null && s.build.caughtUp === true`, 10*time.Second)
		checkShown(t, viewer)
		viewer.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-check"))+`).disabled`, &disabled)
		if !disabled {
			t.Error("a watcher's Check it is enabled")
		}
		viewer.WaitVisible("build-why")
		if txt := viewer.Text("build-why"); !strings.Contains(txt, "watching") {
			t.Errorf("a watcher is told %q", txt)
		}
		if d := viewer.Attr("build-check", "aria-describedby"); d != "build-why" {
			t.Errorf("a watcher's Check it is described by %q, not its reason", d)
		}
		var lines float64
		viewer.Eval(`(() => { const el = document.querySelector(`+e2etest.JSString(e2etest.Sel("build-why"))+`); return el.getBoundingClientRect().height / parseFloat(getComputedStyle(el).lineHeight); })()`, &lines)
		t.Logf("e2e: at 375 px the watcher's reason takes %.1f lines", lines)
		buildShot(viewer, "build-root", "build-watcher-375")
	})
	// A watcher whose page was open before the check began, Build it
	// closed: the driver's check opens it there and is shown as it goes,
	// with no reload.
	t.Run("watched", func(t *testing.T) {
		srv := srv.WithT(t)
		tab := e2etest.NewTab(t, 1280, 900)
		openBuild(tab, srv.URL+"/")
		viewer := e2etest.NewTab(t, 375, 800)
		e2etest.OpenLive(viewer, srv.WatchURL(tab.State()["sessionId"].(string)))
		viewer.PollState(`s.role === "viewer"`, 10*time.Second)
		if b := viewer.State()["build"]; b != nil {
			t.Fatalf("a watcher of a session with no check has Build it loaded already: %v", b)
		}
		tab.Click("build-check")
		checkShown(t, viewer)
		checkShown(t, tab)
		var mine, theirs string
		tab.Eval(`JSON.stringify(window.fencelab.state().build.report)`, &mine)
		viewer.Eval(`JSON.stringify(window.fencelab.state().build.report)`, &theirs)
		if mine != theirs {
			t.Errorf("the watcher's report is\n%s\nthe driver's\n%s", theirs, mine)
		}
	})
	t.Run("during", func(t *testing.T) {
		srv := srv.WithT(t)
		tab := e2etest.NewTab(t, 1280, 900)
		openBuild(tab, srv.URL+"/")
		// The page's check, sent with a 4 s lease rather than the default
		// 1 s: each case waits for its lease to run out once, so the check
		// outlasts a reload however busy the machine (a loaded CI machine's
		// reload once outlasted the default check).
		id := tab.State()["sessionId"].(string)
		var token string
		tab.Eval(`window.fencelab.api.token`, &token)
		sol := map[string]string{}
		for _, k := range []string{"claim", "complete", "fail", "receiver"} {
			sol[k] = editorText(tab, k)
		}
		body, _ := json.Marshal(map[string]any{"action": "check", "solution": sol, "lease_ms": 4000})
		srv.Command(id, token, string(body))
		tab.PollState(`s.build.phase === "running"`, 60*time.Second)
		var here string
		tab.Eval(`location.href`, &here)
		e2etest.OpenLive(tab, here)
		tab.PollState(`s.build !== null && s.build.caughtUp === true`, 10*time.Second)
		st := tab.State()["build"].(map[string]any)
		if st["phase"] != "running" {
			t.Fatalf("reloaded during the check, Build it is %v, not running (the check took less than a reload?)", st["phase"])
		}
		if n := len(st["runs"].(map[string]any)); n != len(experiments.CheckCases()) {
			t.Errorf("reloaded during the check, Build it follows %d runs, want the check's %d", n, len(experiments.CheckCases()))
		}
		tab.PollJS(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-progress"))+`).textContent.startsWith("Running")`, 10*time.Second)
		checkShown(t, tab)
	})
}

// smallTextJS lists the visible texts under px pixels inside the element
// with the testid, with their size and element, for a projector's check.
func smallTextJS(testid string, px float64) string {
	return `(() => {
		const out = [];
		const root = document.querySelector(` + e2etest.JSString(e2etest.Sel(testid)) + `);
		const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
		for (let n = walk.nextNode(); n; n = walk.nextNode()) {
			const el = n.parentElement;
			if (!n.textContent.trim() || !el || !el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) continue;
			if (el.closest(".sr-only, [hidden]")) continue;
			const size = parseFloat(getComputedStyle(el).fontSize);
			if (size < ` + fmt.Sprint(px) + `) out.push(size.toFixed(1) + "px <" + el.tagName.toLowerCase() + " class=" + el.className + ">: " + n.textContent.trim().slice(0, 40));
		}
		return out;
	})()`
}

// TestBuild_TheResultOnEveryScreen: one check of the start, seen in a blog
// column (320 px), on a laptop (1280 px) and on a projector (1920 px in
// present mode, where no visible text of it is under 20 px); the page
// never scrolls sideways, and the case table's cells are not squeezed
// into a word a line. The pictures are for people to look at.
func TestBuild_TheResultOnEveryScreen(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 900)
	openBuild(tab, srv.URL+"/")
	tab.Click("build-check")
	checkShown(t, tab)
	id := tab.State()["sessionId"].(string)
	var token string
	tab.Eval(`window.fencelab.api.token`, &token)
	for _, c := range []struct {
		w, h  int
		query string
	}{{320, 640, ""}, {1280, 900, ""}, {1920, 1080, "?present=1"}} {
		t.Run(fmt.Sprint(c.w), func(t *testing.T) {
			tab := e2etest.NewTab(t, c.w, c.h)
			u := srv.WatchURL(id) + c.query + "#token=" + token
			e2etest.OpenLive(tab, u)
			tab.PollState(`s.role === "driver" && s.build !== null && s.build.caughtUp === true`, 10*time.Second)
			checkShown(t, tab)
			var over float64
			tab.Eval(`document.documentElement.scrollWidth - innerWidth`, &over)
			if over > 0 {
				t.Errorf("at %d px the page is %.0f px wider than the screen", c.w, over)
			}
			// A cell as narrow as a word is a table squeezed out of shape.
			var narrow []string
			tab.Eval(`[...document.querySelectorAll(`+e2etest.JSString(e2etest.Sel("build-result")+" td[data-column]")+`)].filter(td => td.getBoundingClientRect().width < 9 * parseFloat(getComputedStyle(td).fontSize)).map(td => td.dataset.testid + " " + Math.round(td.getBoundingClientRect().width) + " px")`, &narrow)
			if len(narrow) > 0 {
				t.Errorf("at %d px %d cells are narrower than nine of their letters: %v", c.w, len(narrow), narrow)
			}
			if c.query != "" {
				var small []string
				tab.Eval(smallTextJS("build", 19.5), &small)
				if len(small) > 0 {
					t.Errorf("%d visible texts of Build it with its result are under 20 px in present mode; the first: %s", len(small), strings.Join(small[:min(len(small), 8)], "\n"))
				}
			}
			name := fmt.Sprintf("build-result-%d", c.w)
			if c.query != "" {
				name = fmt.Sprintf("build-result-present-%d", c.w)
			}
			buildShot(tab, "build", name)
			buildShot(tab, "build-result", name+"-table")
		})
	}
}

// TestBuild_TheChallengeToItsEnd plays the article's challenge in the page
// as a reader does, from the leases-alone start in the editors: each
// requirement added in turn (ours's statement typed over the start's),
// checked after each, and every check's first broken item names the next
// requirement missing, until the last check passes. Then SKIP LOCKED is
// dropped and checked: named; then the fail is made unfenced again and
// checked: named.
func TestBuild_TheChallengeToItsEnd(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 900)
	openBuild(tab, srv.URL+"/")
	start, ours := sandbox.Start(), sandbox.Ours()
	for _, k := range sandbox.Kinds() {
		if got := editorText(tab, k.String()); got != start.Text(k) {
			t.Fatalf("the %s editor does not start with the start's statement: %q", k, got)
		}
	}
	check := func(what, want string) {
		t.Helper()
		tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-check"))+`).click()`, nil)
		tab.PollState(`s.build.phase !== "finished"`, 30*time.Second)
		tab.PollState(`s.build.phase === "finished"`, e2etest.CheckTimeout)
		tab.PollState(`s.build.report !== null`, 5*time.Second)
		var first struct{ Requirement, Words string }
		tab.Eval(`(() => { const li = document.querySelector(`+e2etest.JSString(e2etest.Sel("build-broken")+" li")+`);
			return li ? {requirement: li.dataset.requirement, words: li.textContent} : {requirement: "", words: ""}; })()`, &first)
		headline := tab.Text("build-words")
		switch {
		case want == "" && (first.Requirement != "" || !strings.Contains(headline, "passes")):
			t.Fatalf("%s: the page says %q and names %q first, want a pass", what, headline, first.Requirement)
		case want != "" && first.Requirement != want:
			t.Fatalf("%s: the page names %q first (%q), want %s; it says %q", what, first.Requirement, first.Words, want, headline)
		}
		t.Logf("%s: %s %s", what, headline, first.Words)
	}
	for _, s := range []struct {
		add  sandbox.Kind
		want string // named first before ours's statement is typed in
	}{
		{sandbox.Claim, string(experiments.ReqEpochRaised)},
		{sandbox.Complete, string(experiments.ReqCompleteFence)},
		{sandbox.Fail, string(experiments.ReqFailFence)},
		{sandbox.Receiver, string(experiments.ReqReceiverOlder)},
	} {
		check("before ours's "+s.add.String(), s.want)
		tab.SetValue("build-"+s.add.String()+"-text", ours.Text(s.add))
	}
	check("every requirement added", "")
	buildShot(tab, "build-result", "build-challenge-passes-1280")
	tab.SetValue("build-claim-text", strings.Replace(ours.Claim, "FOR UPDATE SKIP LOCKED", "FOR UPDATE", 1))
	check("SKIP LOCKED dropped", string(experiments.ReqSkipLocked))
	tab.SetValue("build-claim-text", ours.Claim)
	tab.SetValue("build-fail-text", start.Fail)
	check("the fail unfenced", string(experiments.ReqFailFence))
}

// TestBuild_ACheckWaitsInLineAndSaysWhere: on a server that starts one
// check at a time (--max-checks 1: a check holds the slot for its first
// 2 s, and at most three play at once), with three other readers' long
// checks playing, a reader whose check must wait is told where it stands
// ("Your check is next in line."), and the page moves on to the check's
// progress and report when its turn comes.
func TestBuild_ACheckWaitsInLineAndSaysWhere(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t, "--max-checks", "1")
	sol, err := json.Marshal(sandbox.Ours())
	if err != nil {
		t.Fatal(err)
	}
	// The reader's page and Build it first: the others' checks last some
	// 20 s, and a page that loaded after the first of them had ended (a
	// loaded machine, ci16) found a slot free and was never in line.
	tab := e2etest.NewTab(t, 375, 900)
	openBuild(tab, srv.URL+"/")
	type other struct{ cmds, token string }
	var others []other
	for range 3 {
		id, token := srv.NewSession()
		o := other{"/api/sessions/" + id + "/commands", token}
		// Its command is answered when its turn comes: the second and
		// third about 2 s after the one before.
		if st, b := srv.Request("POST", o.cmds, o.token, `{"action":"check","lease_ms":5000,"solution":`+string(sol)+`}`); st != 200 {
			t.Fatalf("another reader's check: %d %s", st, b)
		}
		others = append(others, o)
	}
	tab.Click("build-check")
	tab.PollJS(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-progress"))+`).textContent.toLowerCase() === "your check is next in line."`, 30*time.Second) // the narration is the server's: the shout suite upper-cases it
	buildShot(tab, "build-progress", "build-in-line-375")
	for _, o := range others {
		if st, b := srv.Request("POST", o.cmds, o.token, `{"action":"reset"}`); st != 200 {
			t.Fatalf("another reader's reset: %d %s", st, b)
		}
	}
	checkShown(t, tab) // the start is leases alone: its report names what is broken
}

// TestBuild_BeyondTheArticleIsANote: a fail fenced as the article asks
// that never retries (it always ends the job failed) passes; what
// fencelab asks beyond the article is a note under the verdict, never in
// the list of what is broken.
func TestBuild_BeyondTheArticleIsANote(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 375, 800)
	openBuild(tab, srv.URL+"/")
	sol := sandbox.Ours()
	retry := "CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END"
	if !strings.Contains(sol.Fail, retry) {
		t.Fatalf("our fail has no retry: %s", sol.Fail)
	}
	sol.Fail = strings.Replace(sol.Fail, retry, "'failed'", 1)
	for _, k := range sandbox.Kinds() {
		tab.SetValue("build-"+k.String()+"-text", sol.Text(k))
	}
	tab.Click("build-check")
	tab.PollState(`s.build.phase === "finished" && s.build.report !== null`, e2etest.CheckTimeout)
	var rep struct {
		Pass   bool
		Broken []any
		Beyond []struct{ Requirement string }
	}
	tab.Eval(`window.fencelab.state().build.report`, &rep)
	if !rep.Pass || len(rep.Broken) != 0 || len(rep.Beyond) != 1 || rep.Beyond[0].Requirement != "fail-retries" {
		t.Fatalf("a fenced fail with no retry: %+v", rep)
	}
	tab.WaitVisible("build-beyond")
	if got := tab.Text("build-words"); !strings.Contains(strings.ToLower(got), "passes the article's test") {
		t.Errorf("the verdict says %q", got)
	}
	var li string
	tab.Eval(`(() => { const li = document.querySelector(`+e2etest.JSString(e2etest.Sel("build-beyond-list")+` li[data-requirement="fail-retries"]`)+`); return li ? li.textContent : ""; })()`, &li)
	if !strings.Contains(strings.ToLower(li), "attempt") {
		t.Errorf("the note says %q", li)
	}
	if tab.Visible("build-broken-h") {
		t.Error("what the runs show broken is shown for a pass")
	}
	tab.Eval(`document.querySelector(`+e2etest.JSString(e2etest.Sel("build-beyond"))+`).scrollIntoView({block: "center"})`, nil)
	e2etest.ViewShot(tab, "build-beyond-the-article-375")
}

// TestBuild_ACheckReportOpensOffline: `fencelab check --report DIR` on the
// leases-alone start writes an index, the failing cases first, whose
// links open each case's run as a replay with no server at all: the
// replay's verdict is the run's, and it plays.
func TestBuild_ACheckReportOpensOffline(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	start, dir := filepath.Join(tmp, "start"), filepath.Join(tmp, "report")
	run := func(args ...string) (string, int) {
		cmd := exec.CommandContext(t.Context(), e2etest.Binary(t), args...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+pgtest.DSN(t))
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	if out, code := run("check", "--write-start", start); code != 0 {
		t.Fatalf("--write-start: %d %s", code, out)
	}
	args := []string{"check", "--report", dir}
	for _, k := range sandbox.Kinds() {
		args = append(args, "--"+k.String(), filepath.Join(start, k.String()+".sql"))
	}
	if out, code := run(args...); code != 1 || !strings.Contains(out, filepath.Join(dir, "index.html")) {
		t.Fatalf("the start's check with --report: exit %d\n%s", code, out)
	}

	tab := e2etest.NewTab(t, 375, 800)
	tab.Navigate("file://" + filepath.Join(dir, "index.html"))
	tab.PollJS(`document.readyState === "complete" && !!document.querySelector('[data-testid="report-cases"] li')`, 10*time.Second) // no script: a page to read
	var first struct{ OK, Href, Words string }
	tab.Eval(`(() => { const li = document.querySelector('[data-testid="report-cases"] li'); const a = li.querySelector("a");
		return {ok: li.dataset.ok, href: a ? a.href : "", words: li.textContent}; })()`, &first)
	if first.OK != "false" || first.Href == "" || !strings.Contains(first.Words, "epoch") {
		t.Fatalf("the index's first case: %+v", first)
	}
	e2etest.ViewShot(tab, "check-report-index-375")
	tab.Navigate(first.Href)
	tab.WaitReady()
	tab.PollState(`s.replay === true && s.outcome !== null`, 10*time.Second)
	var safe bool
	tab.Eval(`window.fencelab.state().outcome.safe`, &safe)
	if safe {
		t.Error("the start's first case replays as safe")
	}
	tab.Click("play")
	tab.PollState(`s.pos > 3 && s.pos < s.events`, 10*time.Second)
	e2etest.ViewShot(tab, "check-report-case-375")
}
