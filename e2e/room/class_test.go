package room

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/sandbox"
)

// boardWait bounds how long a board may take to show what the API holds:
// it polls every two seconds, so three polls and some slack.
const boardWait = 8 * time.Second

// joinAs opens the join page at path in tab, types code and name and
// presses Join; it does not wait for the answer.
func joinAs(tab *e2etest.Tab, base, path, code, name string) {
	tab.T().Helper()
	tab.Navigate(base + path)
	tab.WaitReady()
	if code != "" {
		tab.SetValue("class-join-code", code)
	}
	tab.SetValue("class-join-name", name)
	tab.Click("class-join-submit")
}

// waitAcross waits (≤timeout) until the JavaScript expression is truthy in
// tab, across a navigation the page itself makes (a join going on to the
// student's page, the start going on to the board): Tab.PollJS fails when
// the document it polls goes away, so a poll cut short by the page's
// going is polled again in the next one.
func waitAcross(tab *e2etest.Tab, expr string, timeout time.Duration) {
	tab.T().Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			tab.T().Fatalf("waiting for %s across a navigation: not true within %v", expr, timeout)
		}
		_, err := e2etest.RunAction(tab, left+5*time.Second, chromedp.Poll[chromedp.Void](expr,
			chromedp.WithPollingInterval(e2etest.PollInterval), chromedp.WithPollingTimeout(left)))
		if err == nil {
			return
		}
		if m := err.Error(); !strings.Contains(m, "navigated or closed") && !strings.Contains(m, "context was destroyed") && !strings.Contains(m, "Cannot find context") {
			tab.T().Fatalf("waiting for %s across a navigation: %v", expr, err)
		}
	}
}

// arrived waits until tab is on a student's own page, as its driver, with
// Build it open and loaded, and returns the session's id.
func arrived(tab *e2etest.Tab) string {
	tab.T().Helper()
	waitAcross(tab, `location.pathname.startsWith("/s/") && document.readyState === "complete"`, 30*time.Second)
	tab.WaitReady()
	tab.PollState(`s.role === "driver" && s.connection === "live" && s.build !== null`, 30*time.Second)
	if !tab.Visible("build-claim-text") {
		tab.T().Fatalf("the student's page did not arrive with Build it open")
	}
	return tab.State()["sessionId"].(string)
}

// apiError is the sentence of an error answer of the API.
func apiError(t *testing.T, status int, body []byte, want int) string {
	t.Helper()
	var e struct{ Error string }
	if status != want || json.Unmarshal(body, &e) != nil || e.Error == "" {
		t.Fatalf("the API answered %d %s, want a %d with a sentence", status, body, want)
	}
	return e.Error
}

// noSideScroll fails the test if the page in tab scrolls sideways, and
// names the elements that stick out past the viewport's right edge.
func noSideScroll(tab *e2etest.Tab, where string) {
	tab.T().Helper()
	var out []string
	tab.Eval(`(() => {
		if (document.documentElement.scrollWidth <= innerWidth) return [];
		return [String(document.documentElement.scrollWidth) + " px wide"].concat([...document.body.querySelectorAll("*")]
			.filter((el) => el.getBoundingClientRect().right > innerWidth + 0.5 && el.checkVisibility())
			.slice(0, 6).map((el) => "<" + el.tagName.toLowerCase() + (el.dataset.testid ? " " + el.dataset.testid : "") + " class=" + el.className + ">"));
	})()`, &out)
	if len(out) > 0 {
		tab.T().Errorf("%s scrolls sideways in a %d px viewport: %s", where, tab.Width, strings.Join(out, ", "))
	}
}

// sideFitsJS is true when the board's side column (the code, the class,
// Everyone: run, the tools) shows all it holds, scrolled neither way.
const sideFitsJS = `(() => { const s = document.querySelector(".board-side");
	return s.scrollHeight <= s.clientHeight + 1 && s.scrollWidth <= s.clientWidth + 1 && s.scrollLeft === 0 && s.scrollTop === 0; })()`

// rowJS evaluates to the board's row of the student named name.
// smallTextJS lists the text the page shows in type under 20 px (screen
// readers' text, clipped to nothing, aside): "font-size px: text".
const smallTextJS = `(() => {
	const out = [];
	const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
	for (let n = walk.nextNode(); n; n = walk.nextNode()) {
		const el = n.parentElement, text = n.textContent.trim();
		if (!text || !el.checkVisibility() || el.closest(".sr-only, dialog:not([open])")) continue;
		const px = parseFloat(getComputedStyle(el).fontSize);
		if (px < 19.95) out.push(px.toFixed(1) + "px: " + text.slice(0, 40));
	}
	return out;
})()`

func rowJS(name string) string {
	return `[...document.querySelectorAll('[data-testid="board-row"]')].find(r => r.querySelector('[data-testid="board-name"]').textContent === ` + e2etest.JSString(name) + `)`
}

// TestClass_ToItsEnd plays a class from its start to its end: the teacher
// starts it and lands on the board; two students join from phones by the
// code, one typing it in lower case with the dash, and a name already
// taken is refused beside the name; the board shows both; one checks ours
// (typed into the four editors) and one the leases-alone start that Build
// it holds; the board shows one passing and one failing row with each
// case's mark, the requirement named and the counts, and a mark opens its
// run on the stage; Hide names hides them; the CSV export holds both; a
// reload of the join page is the same student; a wrong teacher's token is
// refused in the server's words; End class ends it, and a later join says
// so in the server's words. On the way it keeps pictures of the student's
// page just after the join (375 px), the join page's refusal at 375 and
// 320 px, and the board with thirty students at 1920×1080, names shown and
// hidden, and at 375 px: none scrolls sideways, and the projector's board
// scrolls not at all.
func TestClass_ToItsEnd(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)

	// The teacher starts a class and lands on its board.
	board := e2etest.NewTab(t, 1920, 1080)
	board.Navigate(srv.URL + "/classes/new")
	board.WaitReady()
	if f := board.Focused(); f != "class-start" {
		t.Errorf("Start a class does not have the focus (%q has): a teacher at a keyboard presses Enter", f)
	}
	board.Press("Enter")
	waitAcross(board, `location.pathname.startsWith("/classes/c") && location.hash.startsWith("#token=") && document.readyState === "complete"`, 10*time.Second)
	board.WaitReady()
	board.PollState(`s.polls >= 1 && s.board !== null`, 10*time.Second)
	var classID, teacher, code string
	board.Eval(`location.pathname.slice("/classes/".length)`, &classID)
	board.Eval(`new URLSearchParams(location.hash.slice(1)).get("token")`, &teacher)
	board.Eval(`window.fencelab.state().board.class.code`, &code)
	shown := code[:3] + "-" + code[3:]
	if got := board.Text("board-code"); got != shown {
		t.Errorf("the board shows the code %q, want %q", got, shown)
	}
	if got := board.Attr("board-qr", "src"); got != "/join/qr.svg?code="+code {
		t.Errorf("the QR code's source is %q", got)
	}
	if st, body := srv.Request(http.MethodGet, "/join/qr.svg?code="+code, "", ""); st != http.StatusOK || !strings.Contains(string(body), "/join?code="+code) {
		t.Errorf("GET /join/qr.svg: %d, not the join link's QR code: %.200s", st, body)
	}

	// Two students join on phones; the second types the code in lower
	// case with its dash, and first tries a name the class has.
	ada := e2etest.NewTab(t, 375, 800, e2etest.AllowErrors("404"))
	joinAs(ada, srv.URL, "/join?code="+code, "", "Ada")
	adaSession := arrived(ada)
	// Her page says, at its top, which class and under which name.
	ada.PollState(`s.seat !== null && s.seat.ended !== true`, 10*time.Second)
	if got, want := ada.Text("class-seat"), "Class "+shown+" · you are Ada"; got != want {
		t.Errorf("Ada's page says %q at its top, want %q", got, want)
	}
	noSideScroll(ada, "a student's own page just after joining, at 375 px")
	e2etest.ViewShot(ada, "class-student-joined-375")

	grace := e2etest.NewTab(t, 375, 800, e2etest.AllowErrors("409"))
	joinAs(grace, srv.URL, "/join", strings.ToLower(shown), "ada")
	grace.PollState(`s.page === "join" && s.phase === "ready" && s.status === 409`, 10*time.Second)
	st, body := srv.Request(http.MethodPost, "/api/classes/join", "", `{"code":"`+code+`","name":"ada"}`)
	taken := apiError(t, st, body, http.StatusConflict)
	if got := grace.Text("class-join-name-error"); got != taken {
		t.Errorf("beside the name the join page says %q, want the server's %q", got, taken)
	}
	if got := grace.Text("class-join-code-error"); got != "" {
		t.Errorf("a name taken is also shown beside the code: %q", got)
	}
	if f := grace.Focused(); f != "class-join-name" || grace.Attr("class-join-name", "aria-invalid") != "true" {
		t.Errorf("after a name taken the focus is on %q, the name's aria-invalid %q", f, grace.Attr("class-join-name", "aria-invalid"))
	}
	if got := grace.Attr("class-join-code", "value"); !strings.EqualFold(got, shown) && got != "" {
		t.Errorf("the code field changed: %q", got)
	}
	grace.Screenshot("class-join-name-taken-375")
	e2etest.ReportAxe(t, "the join page with a refusal", e2etest.Axe(t, grace))
	// At 320 px, the narrowest phone, the form and the refusal fit.
	narrow := e2etest.NewTab(t, 320, 640, e2etest.AllowErrors("409"))
	joinAs(narrow, srv.URL, "/join?code="+code, "", "Ada")
	narrow.PollState(`s.page === "join" && s.phase === "ready" && s.status === 409`, 10*time.Second)
	noSideScroll(narrow, "the join page with a refusal, at 320 px")
	narrow.Screenshot("class-join-name-taken-320")
	grace.SetValue("class-join-name", "Grace")
	grace.Click("class-join-submit")
	graceSession := arrived(grace)
	if graceSession == adaSession {
		t.Fatal("two students share a session")
	}

	board.PollJS(`document.querySelectorAll('[data-testid="board-row"]').length === 2 && !!(`+rowJS("Ada")+`) && !!(`+rowJS("Grace")+`)`, boardWait)
	if got := board.Text("board-pass"); got != "0 of 2 pass" {
		t.Errorf("before any check the board says %q", got)
	}

	// Ada checks ours, typed into the four editors; Grace checks the
	// leases-alone start as Build it holds it.
	ours := sandbox.Ours()
	for _, k := range sandbox.Kinds() {
		ada.SetValue("build-"+k.String()+"-text", ours.Text(k))
	}
	ada.Click("build-check")
	grace.Click("build-check")
	ada.PollState(`s.build.phase === "finished" && s.build.report !== null`, e2etest.CheckTimeout)
	grace.PollState(`s.build.phase === "finished" && s.build.report !== null`, e2etest.CheckTimeout)
	ada.PollState(`s.build.report.pass === true && s.build.board === `+e2etest.JSString(shown), time.Second)
	grace.PollState(`s.build.report.pass === false`, time.Second)

	// The board shows it, as the API's board has it.
	board.PollJS(rowJS("Ada")+`?.dataset.state === "pass" && `+rowJS("Grace")+`?.dataset.state === "fail"`, boardWait)
	st, body = srv.Request(http.MethodGet, "/api/classes/"+classID+"/board", teacher, "")
	var api struct {
		Students []struct {
			Name, Session, Requirement, Words string
			Cases                             []struct{ Case, Mark, Run string }
		}
		Summary struct {
			Requirements []struct{ Words string }
		}
	}
	if st != http.StatusOK || json.Unmarshal(body, &api) != nil || len(api.Students) != 2 {
		t.Fatalf("GET the board: %d %s", st, body)
	}
	cases := append(experiments.CheckCases(), experiments.ProbeCases()...) // every case, then every probe
	for _, s := range api.Students {
		var marks map[string]string
		board.Eval(`Object.fromEntries([...`+rowJS(s.Name)+`.querySelectorAll("td[data-case]")].map(td => [td.dataset.case, td.dataset.mark || ""]))`, &marks)
		if len(marks) != len(cases) || len(s.Cases) != len(cases) {
			t.Errorf("%s's row has %d case cells and the API %d cases, want %d", s.Name, len(marks), len(s.Cases), len(cases))
		}
		for _, c := range s.Cases {
			if marks[c.Case] != c.Mark {
				t.Errorf("%s's %s shows the mark %q, the API says %q", s.Name, c.Case, marks[c.Case], c.Mark)
			}
			if want := map[string]string{"Ada": "as-correct"}[s.Name]; want != "" && c.Mark != want {
				t.Errorf("Ada checked ours, and her %s is %q", c.Case, c.Mark)
			}
		}
		var req string
		board.Eval(rowJS(s.Name)+`.querySelector(".col-req").textContent`, &req)
		if s.Name == "Grace" && (s.Requirement == "" || !strings.Contains(req, s.Words)) {
			t.Errorf("Grace's row says %q of her last check, the API %q (%s)", req, s.Words, s.Requirement)
		}
		if s.Name == "Ada" && (s.Requirement != "" || strings.Contains(req, "your")) {
			t.Errorf("Ada's row says %q, the API names %q", req, s.Requirement)
		}
	}
	if got := board.Text("board-pass"); got != "1 of 2 pass" {
		t.Errorf("the board says %q, want 1 of 2 pass", got)
	}
	if reqs := board.Text("board-reqs"); len(api.Summary.Requirements) == 0 || !strings.Contains(reqs, api.Summary.Requirements[0].Words) {
		t.Errorf("the board's requirements say %q, the API's %v", reqs, api.Summary.Requirements)
	}
	var notAsCorrect int
	board.Eval(rowJS("Grace")+`.querySelectorAll('td[data-mark="not-as-correct"] .mark.bad').length`, &notAsCorrect)
	if notAsCorrect == 0 {
		t.Error("Grace's failing check shows no ✗ in a bad tone")
	}
	// A failing check says so in its own words' cell too, with how long
	// she has been on it; Ada's says when she first passed.
	var cells struct{ Verdict, Stuck, AdaStuck, AdaPassed, GracePassed string }
	board.Eval(`({verdict: `+rowJS("Grace")+`.querySelector(".col-req .mark.bad")?.textContent || "",
		stuck: `+rowJS("Grace")+`.querySelector(".col-stuck").textContent, adaStuck: `+rowJS("Ada")+`.querySelector(".col-stuck").textContent,
		adaPassed: `+rowJS("Ada")+`.querySelector(".col-passed").textContent, gracePassed: `+rowJS("Grace")+`.querySelector(".col-passed").textContent})`, &cells)
	if cells.Verdict == "" || !regexp.MustCompile(`^(<1|\d+) min$`).MatchString(cells.Stuck) || cells.AdaStuck != "" || !regexp.MustCompile(`\d:\d\d`).MatchString(cells.AdaPassed) || cells.GracePassed != "" {
		t.Errorf("the rows' verdict, stuck and passed cells: %+v", cells)
	}
	// Stuck longest first (the Stuck heading, pressed): Grace, who has not
	// passed, above Ada, who joined first; pressed again, the order they
	// joined.
	order := func() []string {
		var names []string
		board.Eval(`[...document.querySelectorAll('[data-testid="board-name"]')].map(n => n.textContent)`, &names)
		return names
	}
	if got := order(); !slices.Equal(got, []string{"Ada", "Grace"}) {
		t.Errorf("the board's rows are %v, want the order they joined", got)
	}
	board.Click("board-stuck-first")
	if got := order(); !slices.Equal(got, []string{"Grace", "Ada"}) || board.Attr("board-stuck-first", "aria-pressed") != "true" {
		t.Errorf("stuck longest first, the rows are %v", got)
	}
	board.Click("board-stuck-first")
	if got := order(); !slices.Equal(got, []string{"Ada", "Grace"}) {
		t.Errorf("pressed again, the rows are %v, want the order they joined", got)
	}
	board.Screenshot("class-board-1920x1080")
	e2etest.ReportAxe(t, "the board", e2etest.Axe(t, board))
	var fits bool
	board.Eval(`document.documentElement.scrollHeight <= innerHeight && document.documentElement.scrollWidth <= innerWidth`, &fits)
	if !fits {
		t.Error("the board scrolls at 1920×1080")
	}

	// A mark opens its run on the stage of the student's page, for the
	// teacher to present.
	var href string
	board.Eval(rowJS("Grace")+`.querySelector('td[data-mark="not-as-correct"] a').getAttribute("href")`, &href)
	u, err := url.Parse(href)
	if err != nil || u.Path != "/s/"+graceSession || u.Query().Get("present") != "1" || u.Query().Get("run") == "" {
		t.Fatalf("a case's mark links to %q", href)
	}
	// The focus on a mark outlives the board's next polls: the keyboard
	// walks the marks while the board keeps reading.
	var polls float64
	board.Eval(`(() => { `+rowJS("Grace")+`.querySelector("a").focus(); return window.fencelab.state().polls; })()`, &polls)
	board.PollState(fmt.Sprintf(`s.polls >= %d`, int(polls)+2), boardWait)
	if f := board.Focused(); f != "board-case-link" {
		t.Errorf("after two more polls the focus is on %q, not the mark it was on", f)
	}
	stage := e2etest.NewTab(t, 1920, 1080)
	e2etest.OpenLive(stage, srv.URL+href)
	stage.PollState(`s.role === "viewer" && s.view.replay === true && s.view.run === `+e2etest.JSString(u.Query().Get("run"))+` && s.view.events > 0`, 15*time.Second)

	// Hide names: the rows say Student 1 and Student 2. The box is ticked
	// while a poll is on its way (each held 1.5 s here), whose answer, with
	// the names, must not put them back.
	board.Eval(`(() => { const f = window.fetch; window.slowFetch = f; window.fetch = (...a) => new Promise((r) => setTimeout(r, 1500)).then(() => f(...a)); return true; })()`, nil)
	board.PollJS(`window.fencelab.state().asking === true`, boardWait)
	board.SetChecked("board-anonymous", true)
	board.PollJS(`window.fencelab.state().board.anonymous === true`, boardWait)
	if rows := board.Text("board-rows"); strings.Contains(rows, "Ada") || strings.Contains(rows, "Grace") || !strings.Contains(rows, "Student 1") || !strings.Contains(rows, "Student 2") {
		t.Errorf("with names hidden the rows say %q", rows)
	}
	board.Eval(`(() => { window.fetch = window.slowFetch; return true; })()`, nil)

	// The CSV export, fetched with the teacher's header: while names are
	// hidden it hides them too, and "CSV with names" has them.
	board.Eval(`(() => { const make = URL.createObjectURL; URL.createObjectURL = (b) => { b.text().then(t => { window.__exported = t; }); return make.call(URL, b); }; return true; })()`, nil)
	export := func(button string) string {
		board.Eval(`(() => { window.__exported = undefined; return true; })()`, nil)
		board.Click(button)
		board.PollJS(`typeof window.__exported === "string"`, 10*time.Second)
		var csv string
		board.Eval(`window.__exported`, &csv)
		return csv
	}
	if csv := export("board-csv"); !strings.HasPrefix(csv, "student,") || strings.Contains(csv, "Ada") || strings.Contains(csv, "Grace") || !strings.Contains(csv, "\nStudent 1,") {
		t.Errorf("the CSV export with names hidden is %q", csv)
	}
	if csv := export("board-csv-names"); !strings.Contains(csv, "\nAda,") || !strings.Contains(csv, "\nGrace,") {
		t.Errorf("the CSV export with names is %q", csv)
	}
	board.SetChecked("board-anonymous", false)
	board.PollJS(`window.fencelab.state().board.anonymous === false && !!(`+rowJS("Ada")+`)`, boardWait)
	if board.Visible("board-csv-names") {
		t.Error("with names shown, a second export with names is offered")
	}
	if csv := export("board-csv"); !strings.HasPrefix(csv, "student,") || !strings.Contains(csv, "\nAda,") || !strings.Contains(csv, "\nGrace,") {
		t.Errorf("the CSV export is %q", csv)
	}

	// A third joins on the narrowest phone, where the refusal was: her
	// page's top fits 320 px.
	narrow.SetValue("class-join-name", "Lin")
	narrow.Click("class-join-submit")
	arrived(narrow)
	narrow.PollState(`s.seat !== null && s.seat.ended !== true`, 10*time.Second)
	if got, want := narrow.Text("class-seat"), "Class "+shown+" · you are Lin"; got != want {
		t.Errorf("Lin's page says %q at its top, want %q", got, want)
	}
	noSideScroll(narrow, "a student's own page just after joining, at 320 px")
	e2etest.ViewShot(narrow, "class-student-joined-320")

	// Thirty students fit a 1080p projector without scrolling: 27 more
	// join through the API, one with the longest name there may be.
	for i := 4; i <= 30; i++ {
		name := fmt.Sprintf("Student number %d", i)
		if i == 30 {
			name = strings.Repeat("W", 40)
		}
		st, body := srv.Request(http.MethodPost, "/api/classes/join", "", fmt.Sprintf(`{"code":%q,"name":%q}`, shown, name))
		if st != http.StatusCreated {
			t.Fatalf("student %d's join: %d %s", i, st, body)
		}
	}
	board.PollJS(`document.querySelectorAll('[data-testid="board-row"]').length === 30`, boardWait)
	if got := board.Text("board-pass"); got != "1 of 30 pass" {
		t.Errorf("with 30 students the board says %q", got)
	}
	board.Eval(`document.documentElement.scrollHeight <= innerHeight && document.documentElement.scrollWidth <= innerWidth &&
		[...document.querySelectorAll('[data-testid="board-row"]')].every(r => r.getBoundingClientRect().bottom <= innerHeight) &&
		parseFloat(getComputedStyle(document.querySelector('[data-testid="board-name"]')).fontSize) >= 16`, &fits)
	if !fits {
		t.Error("thirty students do not fit 1920×1080 in type of 16 px or more")
	}
	if board.Eval(sideFitsJS, &fits); !fits {
		t.Error("the board's side column scrolls at 1920×1080: what it holds does not fit")
	}
	// From the back of a room: no text on the board under 20 px.
	var small []string
	board.Eval(smallTextJS, &small)
	if len(small) > 0 {
		t.Errorf("text under 20 px on the board at 1920×1080: %q", small)
	}
	board.Screenshot("class-board-30-1920x1080")
	// Hide names, with thirty: still one screen.
	board.SetChecked("board-anonymous", true)
	board.PollJS(`window.fencelab.state().board.anonymous === true && document.querySelectorAll('[data-testid="board-row"]').length === 30 && !(`+rowJS("Ada")+`)`, boardWait)
	board.Eval(`document.documentElement.scrollHeight <= innerHeight && document.documentElement.scrollWidth <= innerWidth`, &fits)
	if !fits {
		t.Error("thirty students with names hidden do not fit 1920×1080")
	}
	board.Screenshot("class-board-30-anonymous-1920x1080")
	board.SetChecked("board-anonymous", false)
	board.PollJS(`window.fencelab.state().board.anonymous === false && !!(`+rowJS("Ada")+`)`, boardWait)
	// The board on a phone: one column that scrolls down, never sideways.
	phone := e2etest.NewTab(t, 375, 800)
	phone.Navigate(srv.URL + "/classes/" + classID + "#token=" + teacher)
	phone.WaitReady()
	phone.PollJS(`document.querySelectorAll('[data-testid="board-row"]').length === 30 && window.fencelab.state().everyone.orderings > 0`, boardWait)
	noSideScroll(phone, "the board at 375 px")
	phone.Screenshot("class-board-30-375")

	// A reload of the join page is the same student, on the same page.
	ada.Navigate(srv.URL + "/join")
	if again := arrived(ada); again != adaSession {
		t.Errorf("a reload of the join page joined as session %s, not Ada's %s", again, adaSession)
	}

	// A wrong teacher's token is refused, in the server's words.
	wrong := e2etest.NewTab(t, 1920, 1080, e2etest.AllowErrors("403"))
	wrong.Navigate(srv.URL + "/classes/" + classID + "#token=not-the-teachers")
	wrong.WaitReady()
	wrong.PollState(`s.status === 403`, 10*time.Second)
	st, body = srv.Request(http.MethodGet, "/api/classes/"+classID+"/board", "not-the-teachers", "")
	if got, want := wrong.Text("board-error"), apiError(t, st, body, http.StatusForbidden); got != want {
		t.Errorf("a wrong token's board says %q, want the server's %q", got, want)
	}
	if wrong.Text("board-rows") != "" {
		t.Error("a wrong token's board shows rows")
	}

	// End class, by the keyboard: the confirmation opens on "Keep it
	// open"; Tab, Enter ends it.
	board.Click("board-end")
	board.WaitVisible("board-end-dialog")
	if f := board.Focused(); f != "board-end-keep" {
		t.Errorf("the confirmation opens with the focus on %q, not on keeping the class open", f)
	}
	board.Press("Tab")
	board.Press("Enter")
	board.PollState(`s.ended === true && s.board.class.ended`, boardWait)
	if st, body := srv.Request(http.MethodGet, "/api/classes/"+classID, teacher, ""); st != http.StatusOK || !strings.Contains(string(body), `"ended":"`) {
		t.Errorf("after End class the API's class is %d %s", st, body)
	}
	// Ada's page, still open, is told at once: its top says the class has
	// ended, and a check of hers now says it counts on no board.
	ada.PollState(`s.seat !== null && s.seat.ended === true`, 10*time.Second)
	if got := ada.Text("class-seat"); !strings.Contains(got, "Class "+shown+" has ended") {
		t.Errorf("after End class Ada's page says %q at its top", got)
	}
	ada.Click("build-check")
	ada.PollState(`s.build.phase === "finished" && s.build.report !== null && s.build.board === ""`, e2etest.CheckTimeout)
	if !ada.Visible("build-not-counted") {
		t.Error("a check after End class does not say it is not counted")
	}
	e2etest.ViewShot(ada, "class-student-ended-375")
	narrow.PollState(`s.seat !== null && s.seat.ended === true`, 10*time.Second)
	noSideScroll(narrow, "a student's page after End class, at 320 px")
	e2etest.ViewShot(narrow, "class-student-ended-320")
	// A later join says the server's sentence beside the code: Ada's
	// kept student tries on arrival, and the class is gone.
	st, body = srv.Request(http.MethodPost, "/api/classes/join", "", `{"code":"`+code+`","name":"Late"}`)
	gone := apiError(t, st, body, http.StatusNotFound)
	ada.Navigate(srv.URL + "/join")
	ada.WaitReady()
	ada.PollState(`s.page === "join" && s.status === 404`, 10*time.Second)
	if got := ada.Text("class-join-code-error"); got != gone {
		t.Errorf("after the end, the join page says %q beside the code, want the server's %q", got, gone)
	}
	ada.Screenshot("class-join-ended-375")
}

// focusRing is an expression over the focused element: it has a focus
// ring a person can see (an outline of 2 px or more, not "none").
const focusRing = `(() => { const cs = getComputedStyle(document.activeElement);
	return document.activeElement.matches(":focus-visible") && cs.outlineStyle !== "none" && parseFloat(cs.outlineWidth) >= 2; })()`

// followLink presses Enter on the focused link, as a keyboard does, and
// returns the address its click asked for: the link opens a tab of its
// own, which the test does not follow, so the click is caught on its way
// (after every handler of the page) and its default is kept from happening.
func followLink(tab *e2etest.Tab) string {
	tab.T().Helper()
	tab.Eval(`(() => { window.__followed = null; addEventListener("click", (e) => {
		const a = e.target.closest("a"); if (!a || e.defaultPrevented) return;
		window.__followed = {href: a.href, target: a.target}; e.preventDefault(); }, {once: true}); return true; })()`, nil)
	tab.Press("Enter")
	tab.PollJS(`window.__followed !== null`, 5*time.Second)
	var got struct{ Href, Target string }
	tab.Eval(`window.__followed`, &got)
	if got.Target != "_blank" {
		tab.T().Errorf("the link opens in %q, not a tab of its own: the page it is on would be gone", got.Target)
	}
	return got.Href
}

// isStartAClass opens href in a tab of its own and fails the test unless
// it is the teacher's "Start a class", its button ready.
func isStartAClass(t *testing.T, href string) {
	t.Helper()
	tab := e2etest.NewTab(t, 1280, 800, e2etest.AllowErrors("404"))
	tab.Navigate(href)
	tab.PollJS(`document.readyState === "complete"`, 10*time.Second)
	var page string
	tab.Eval(`(window.fencelab && typeof window.fencelab.state === "function" && window.fencelab.state().page) || document.title`, &page)
	if page != "new-class" || !tab.Visible("class-start") {
		t.Errorf("the link %s is not the teacher's Start a class: %q", href, page)
	}
}

// TestClass_StartedFromWhereTheTeacherIs: the Share dialog and present
// mode each offer "Start a class", reached by the keyboard with a focus
// ring in view, and Enter opens the teacher's Start a class in a tab of
// its own; the ordinary page has no such button in its header.
func TestClass_StartedFromWhereTheTeacherIs(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)

	// The Share dialog: the link comes next after the watch link.
	tab := e2etest.NewTab(t, 1280, 800)
	e2etest.OpenLive(tab, srv.URL+"/")
	if tab.Visible("present-start-class") {
		t.Error("the ordinary page shows present mode's Start a class")
	}
	tab.Click("share")
	tab.WaitVisible("share-start-class")
	tab.Eval(`document.querySelector('[data-testid="share-watch"]').focus(), true`, nil)
	tab.Press("Tab")
	if f := tab.Focused(); f != "share-start-class" {
		t.Fatalf("Tab from the watch link goes to %q, not Start a class", f)
	}
	var ring bool
	if tab.Eval(focusRing, &ring); !ring {
		t.Error("Start a class in the Share dialog has no visible focus ring")
	}
	isStartAClass(t, followLink(tab))
	tab.Press("Escape")

	// Present mode: in the header, within a few Tabs of the page's top,
	// in the projector's type.
	present := e2etest.NewTab(t, 1920, 1080)
	present.Navigate(srv.URL + "/?present=1&ordering=zombie-first&mode=step")
	present.WaitReady()
	present.PollState(`s.connection === "live" && s.present === true`, 30*time.Second)
	present.WaitVisible("present-start-class")
	for i := 0; present.Focused() != "present-start-class"; i++ {
		if i == 6 {
			t.Fatalf("six Tabs from the top of present mode do not reach Start a class (the focus is on %q)", present.Focused())
		}
		present.Press("Tab")
	}
	if present.Eval(focusRing, &ring); !ring {
		t.Error("present mode's Start a class has no visible focus ring")
	}
	var box struct{ Top, Bottom, Font float64 }
	present.Eval(`(() => { const el = document.querySelector('[data-testid="present-start-class"]'), r = el.getBoundingClientRect();
		return {top: r.top, bottom: r.bottom, font: parseFloat(getComputedStyle(el).fontSize)}; })()`, &box)
	if box.Top < 0 || box.Bottom > 1080 || box.Font < 19.5 {
		t.Errorf("present mode's Start a class is at %.0f–%.0f px in type of %.1f px: not in view in the projector's type", box.Top, box.Bottom, box.Font)
	}
	e2etest.ViewShot(present, "present-start-class-1920")
	isStartAClass(t, followLink(present))
}

// TestClass_EveryoneRunsAScenario: the board's "Everyone: run" offers the
// main page's scenarios, in its words; the teacher, at the keyboard,
// picks one and presses Run for everyone; while the request is on its
// way the button is busy and a second press (Enter or a click) sends
// nothing; the answer says how many started and, for the student whose
// session is gone, who and why, in the server's words and the name as
// text; a student's own page shows the run as theirs; Hide names hides
// the name in the status too.
func TestClass_EveryoneRunsAScenario(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	st, body := srv.Request(http.MethodPost, "/api/classes", "", "")
	var opened struct {
		Class struct{ ID string }
		Code  string
		Token string
	}
	if st != http.StatusCreated || json.Unmarshal(body, &opened) != nil {
		t.Fatalf("POST /api/classes: %d %s", st, body)
	}

	// Ada joins on her phone and stays on her page, as Grace on hers; a
	// third joins through the API, whose name is markup, and whose session
	// is then ended, so that the run cannot start for them.
	ada := e2etest.NewTab(t, 375, 800)
	joinAs(ada, srv.URL, "/join?code="+opened.Code, "", "Ada")
	adaSession := arrived(ada)
	join := func(name string) (session, token string) {
		t.Helper()
		st, body := srv.Request(http.MethodPost, "/api/classes/join", "", fmt.Sprintf(`{"code":%q,"name":%q}`, opened.Code, name))
		var j struct{ Session struct{ ID, Token string } }
		if st != http.StatusCreated || json.Unmarshal(body, &j) != nil {
			t.Fatalf("%s's join: %d %s", name, st, body)
		}
		return j.Session.ID, j.Session.Token
	}
	// Grace joins on the narrowest phone there is, and stays at the top
	// of her page.
	grace := e2etest.NewTab(t, 320, 640)
	joinAs(grace, srv.URL, "/join?code="+opened.Code, "", "Grace")
	arrived(grace)
	const markup = `<b>Zoë</b> & co`
	zoe, zoeToken := join(markup)
	if st, body := srv.Request(http.MethodDelete, "/api/sessions/"+zoe, zoeToken, ""); st/100 != 2 {
		t.Fatalf("ending %s's session: %d %s", markup, st, body)
	}

	board := e2etest.NewTab(t, 1920, 1080)
	board.Navigate(srv.URL + "/classes/" + opened.Class.ID + "#token=" + opened.Token)
	board.WaitReady()
	board.PollJS(`document.querySelectorAll('[data-testid="board-row"]').length === 3`, boardWait)
	board.PollState(`s.everyone.orderings > 0`, 10*time.Second)

	// The scenarios are the main page's: Ada's page is one.
	type option struct{ Value, Label string }
	options := func(tab *e2etest.Tab, testid string) []option {
		var o []option
		tab.Eval(`[...document.querySelector(`+e2etest.JSString(e2etest.Sel(testid))+`).options].map(o => ({value: o.value, label: o.textContent.trim()}))`, &o)
		return o
	}
	onBoard, onPage := options(board, "board-everyone-ordering"), options(ada, "ordering")
	if len(onBoard) == 0 || fmt.Sprint(onBoard) != fmt.Sprint(onPage) {
		t.Errorf("the board offers the scenarios %v, the main page %v", onBoard, onPage)
	}

	// Ada is at work in Build it, screens above the stage on her phone.
	ada.PollJS(`document.querySelector('[data-testid="build"]').open`, 10*time.Second)
	ada.Eval(`(() => { document.querySelector('[data-testid="build-check"]').scrollIntoView({block: "center"}); return true; })()`, nil)
	const inView = `(() => { const r = document.querySelector(%q).getBoundingClientRect(); return r.top < innerHeight && r.bottom > 0; })()`
	ada.PollJS(fmt.Sprintf(inView, e2etest.Sel("build-check")), 5*time.Second)

	// The request is held until the test lets it go, and counted.
	board.Eval(`(() => { const f = window.fetch; window.__runs = 0; let go; const held = new Promise((r) => { go = r; });
		window.__release = () => go();
		window.fetch = (u, ...a) => { if (String(u).endsWith("/run")) { window.__runs++; return held.then(() => f(u, ...a)); } return f(u, ...a); };
		return true; })()`, nil)
	board.SetValue("board-everyone-ordering", "zombie-first")
	board.Press("Tab")
	if f := board.Focused(); f != "board-everyone-run" {
		t.Fatalf("Tab from the scenario goes to %q, not Run for everyone", f)
	}
	var ring bool
	if board.Eval(focusRing, &ring); !ring {
		t.Error("Run for everyone has no visible focus ring")
	}
	board.Press("Enter")
	board.PollState(`s.everyone.running === true`, 5*time.Second)
	if got := board.Attr("board-everyone-run", "aria-disabled"); got != "true" {
		t.Errorf("while the request is on its way the button's aria-disabled is %q", got)
	}
	board.Press("Enter")
	board.Click("board-everyone-run")
	var sent int
	board.Eval(`window.__runs`, &sent)
	if sent != 1 {
		t.Errorf("a second press while the first was on its way sent %d requests, not 1", sent)
	}
	if got := board.Text("board-everyone-status"); !strings.Contains(got, "Zombie reaches the receiver first") {
		t.Errorf("while it starts the status says %q", got)
	}
	board.Eval(`window.__release(), true`, nil)
	board.PollState(`s.everyone.running === false && s.everyone.answer !== null`, 60*time.Second)
	board.PollJS(`document.querySelector('[data-testid="board-everyone-run"]').getAttribute("aria-disabled") === "false"`, 5*time.Second)
	if f := board.Focused(); f != "board-everyone-run" {
		t.Errorf("after the answer the focus is on %q, not on the button it was on", f)
	}

	// The answer, and what the status says of it.
	var answer struct {
		Started  int
		Students []struct{ ID, Name, Run, Error string }
	}
	board.Eval(`window.fencelab.state().everyone.answer`, &answer)
	runs := map[string]string{}
	var why string
	for _, s := range answer.Students {
		runs[s.Name] = s.Run
		if s.Name == markup {
			why = s.Error
		}
	}
	if answer.Started != 2 || len(answer.Students) != 3 || runs["Ada"] == "" || runs["Grace"] == "" || runs[markup] != "" || why == "" {
		t.Fatalf("the class's run answered %+v", answer)
	}
	status := board.Text("board-everyone-status")
	if !strings.HasPrefix(status, "Started for 2 of 3 students") || !strings.Contains(status, markup+": "+why) || strings.Contains(status, "Ada") {
		t.Errorf("the status says %q; want 2 of 3 started and %q: %q", status, markup, why)
	}
	var markupIn int
	board.Eval(`document.querySelectorAll('[data-testid="board-everyone-status"] b').length`, &markupIn)
	if markupIn != 0 {
		t.Errorf("a student's name was drawn as markup in the status")
	}
	var fonts []float64
	board.Eval(`["board-everyone-ordering", "board-everyone-run", "board-everyone-status"].map(id => parseFloat(getComputedStyle(document.querySelector('[data-testid="' + id + '"]')).fontSize))`, &fonts)
	for _, f := range fonts {
		if f < 19.5 {
			t.Errorf("Everyone: run is in type of %v px at 1920×1080, under the projector's 20", fonts)
			break
		}
	}
	var fits bool
	board.Eval(`document.documentElement.scrollHeight <= innerHeight && document.documentElement.scrollWidth <= innerWidth && `+sideFitsJS, &fits)
	if !fits {
		t.Error("the board with Everyone: run's answer scrolls at 1920×1080, or its side column does")
	}
	board.Screenshot("class-board-everyone-1920x1080")

	// Ada's page shows the run as hers, step by step.
	ada.PollState(`s.run && s.run.id === `+e2etest.JSString(runs["Ada"])+` && s.run.ordering === "zombie-first" && s.run.mode === "step"`, 30*time.Second)
	if got := ada.State()["sessionId"]; got != adaSession {
		t.Errorf("Ada's page is on session %v, not hers (%s)", got, adaSession)
	}
	// It came into view on her phone, told in her live feed, with a way
	// back to where she was.
	ada.PollJS(fmt.Sprintf(inView, e2etest.Sel("stage")), 10*time.Second)
	if !ada.Visible("back-to-build") {
		t.Error("after the run for everyone Ada's page offers no way back to Build it")
	}
	var feed string
	ada.Eval(`document.querySelector('[data-testid="live-feed"]').textContent`, &feed)
	if !strings.Contains(strings.ToUpper(feed), strings.ToUpper("Your teacher started a run for everyone")) { // a shouting build upper-cases it
		t.Errorf("Ada's live feed says %q", feed)
	}
	e2etest.ViewShot(ada, "class-student-run-for-everyone-375")
	grace.PollJS(fmt.Sprintf(inView, e2etest.Sel("stage")), 10*time.Second)
	noSideScroll(grace, "the run for everyone at 320 px")
	e2etest.ViewShot(grace, "class-student-run-for-everyone-320")
	ada.Click("back-to-build")
	ada.PollJS(fmt.Sprintf(inView, e2etest.Sel("build-check"))+` && document.querySelector('[data-testid="back-to-build"]').hidden`, 5*time.Second)

	// Hide names: the status names the student as the board does.
	board.SetChecked("board-anonymous", true)
	board.PollJS(`window.fencelab.state().board.anonymous === true`, boardWait)
	board.PollJS(`(() => { const t = document.querySelector('[data-testid="board-everyone-status"]').innerText; return t.includes("Student 3: ") && !t.includes("Zoë"); })()`, 5*time.Second)
}
