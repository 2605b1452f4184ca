package room

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
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

// rowJS evaluates to the board's row of the student named name.
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
// so in the server's words.
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
	ada.PollState(`s.build.report.pass === true`, time.Second)
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
	cases := experiments.CheckCases()
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
	board.SetChecked("board-anonymous", false)
	board.PollJS(`window.fencelab.state().board.anonymous === false && !!(`+rowJS("Ada")+`)`, boardWait)

	// The CSV export, fetched with the teacher's header, holds both.
	board.Eval(`(() => { const make = URL.createObjectURL; URL.createObjectURL = (b) => { b.text().then(t => { window.__exported = t; }); return make.call(URL, b); }; return true; })()`, nil)
	board.Click("board-csv")
	board.PollJS(`typeof window.__exported === "string"`, 10*time.Second)
	var csv string
	board.Eval(`window.__exported`, &csv)
	if !strings.HasPrefix(csv, "student,") || !strings.Contains(csv, "\nAda,") || !strings.Contains(csv, "\nGrace,") {
		t.Errorf("the CSV export is %q", csv)
	}

	// Thirty students fit a 1080p projector without scrolling: 28 more
	// join through the API, one with the longest name there may be.
	for i := 3; i <= 30; i++ {
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
	board.Screenshot("class-board-30-1920x1080")

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
