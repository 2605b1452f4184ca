package engines

// The class to its end, as issue 27's Done-means plays it: a teacher and
// five students in Chromium, one student in WebKit, a server restart in
// the middle.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/sandbox"
)

// classStudent is one student of the class and what they check.
type classStudent struct {
	name string
	sol  *sandbox.Solution // nil: joins, checks nothing
	want experiments.Requirement
	tab  *engineTab
}

// TestEngines_AClassThroughARestart: a teacher starts a class; five
// students join by its code in Chromium and one in WebKit; three check
// three different wrong solutions and two check ours, typed into Build
// it's four editors. While the last two checks wait in the class's line
// (the server plays one at a time), the server stops and starts again on
// the same address and database. The two students come back to /join,
// which takes them in again as themselves; their checks, still in line,
// play in their new sessions and their reports come on their pages. The
// board, read again, has all six rows with the marks the API has, the
// class's counts and the three requirements once each; the teacher puts
// a student's case run on the stage; the hand-ins hold the five
// solutions exactly as they were typed. Nothing was lost.
func TestEngines_AClassThroughARestart(t *testing.T) {
	var chromium, webkit engine
	for _, e := range engines {
		switch e.name {
		case "chromium":
			chromium = e
		case "webkit":
			webkit = e
		}
	}
	openC, openW := chromium.start(t), webkit.start(t)
	window := func(open func(*testing.T, int, int) driver, eng string, w, h int) *engineTab {
		tab := &engineTab{t: t, engine: eng, d: open(t, w, h), w: w, h: h}
		t.Cleanup(tab.finish)
		return tab
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	srv := e2etest.StartServer(t, "--addr", addr, "--max-checks", "1")

	// The teacher starts the class.
	board := window(openC, "chromium", 1920, 1080)
	board.Allow("ERR_CONNECTION_REFUSED") // a poll while the server restarts
	boardURL, code := startClass(board, srv.URL)
	bu, err := url.Parse(boardURL)
	if err != nil {
		t.Fatal(err)
	}
	classID := strings.TrimPrefix(bu.Path, "/classes/")
	teacher := strings.TrimPrefix(bu.Fragment, "token=")

	ours := sandbox.Ours()
	wrong := func(k sandbox.Kind, old string) *sandbox.Solution {
		s := ours.With(k, strings.Replace(ours.Text(k), old, "", 1))
		if s == ours {
			t.Fatalf("%q is not in our %s", old, k)
		}
		return &s
	}
	students := []*classStudent{
		{name: "Ada", sol: &ours},
		{name: "Cy", sol: wrong(sandbox.Claim, "       epoch = epoch + 1,\n"), want: experiments.ReqEpochRaised},
		{name: "Bea", sol: &ours},
		{name: "Dee", sol: wrong(sandbox.Complete, "\n   AND epoch = :epoch"), want: experiments.ReqCompleteFence},
		{name: "Eve", sol: wrong(sandbox.Receiver, "\n WHERE held.epoch <= EXCLUDED.epoch"), want: experiments.ReqReceiverOlder},
		{name: "Fay"}, // in WebKit
	}
	joinPage := func(s *classStudent, typed string) {
		s.tab.Navigate(srv.URL + "/join")
		s.tab.WaitReady()
		if typed != "" { // a first join: the code as the student types it, and a name
			s.tab.PollState(`s.page === "join" && s.phase === "ready"`, 10*time.Second)
			setValue(s.tab, "class-join-code", typed)
			setValue(s.tab, "class-join-name", s.name)
			s.tab.Click("class-join-submit")
		}
		s.tab.Poll(`location.pathname.startsWith("/s/") && document.readyState === "complete" && window.fencelab && window.fencelab.ready === true`, 30*time.Second)
		s.tab.PollState(`s.role === "driver" && s.connection === "live" && s.build !== null`, 60*time.Second)
	}
	for i, s := range students {
		if s.name == "Fay" {
			s.tab = window(openW, "webkit", 1024, 768)
		} else {
			s.tab = window(openC, "chromium", 1024, 768)
		}
		// The server restarts under its page: its socket is refused while
		// the server is down, and then meets a 404, its session gone, until
		// the student is back.
		s.tab.Allow("404", "ERR_CONNECTION_REFUSED", "Could not connect")
		typed := code[:3] + "-" + code[3:]
		if i%2 == 1 {
			typed = strings.ToLower(code) // any case, dash or not
		}
		joinPage(s, typed)
	}
	board.Poll(`document.querySelectorAll('[data-testid="board-row"]').length === 6`, 30*time.Second)

	check := func(s *classStudent) {
		for _, k := range sandbox.Kinds() {
			setValue(s.tab, "build-"+k.String()+"-text", s.sol.Text(k))
		}
		s.tab.Click("build-check")
	}
	reported := func(s *classStudent) {
		s.tab.PollState(`s.build.phase === "finished" && s.build.report !== null`, e2etest.CheckTimeout)
		var pass bool
		s.tab.Eval(`window.fencelab.state().build.report.pass`, &pass)
		if pass != (s.want == "") {
			t.Errorf("%s's report says pass %v", s.name, pass)
		}
	}
	// Three checks played to their reports...
	for _, s := range students[:3] {
		check(s)
	}
	for _, s := range students[:3] {
		reported(s)
	}
	// ...and two in line when the server stops: one plays at a time.
	check(students[3])
	check(students[4])
	students[4].tab.Poll(`/in line/i.test(document.body.innerText)`, 30*time.Second)
	srv.Stop()
	srv = e2etest.StartServer(t, "--addr", addr, "--max-checks", "1")
	if srv.URL != "http://"+addr {
		t.Fatalf("the server came back at %s, not %s", srv.URL, addr)
	}
	for _, s := range students[3:5] { // they come back: the page they kept is the student again
		joinPage(s, "")
	}
	for _, s := range students[3:5] {
		reported(s)
	}

	// The board, read again from the class in Postgres.
	board.Navigate(boardURL)
	board.WaitReady()
	rowJS := func(name string) string {
		return `[...document.querySelectorAll('[data-testid="board-row"]')].find(r => r.querySelector('[data-testid="board-name"]').textContent === ` + e2etest.JSString(name) + `)`
	}
	board.Poll(`document.querySelectorAll('[data-testid="board-row"]').length === 6 && `+rowJS("Eve")+`?.dataset.state === "fail" && `+rowJS("Dee")+`?.dataset.state === "fail"`, 30*time.Second)
	st, body := srv.Request(http.MethodGet, "/api/classes/"+classID+"/board", teacher, "")
	var api struct {
		Students []struct {
			Name, Session, Requirement string
			Checks                     int
			Cases                      []struct{ Case, Mark, Run string }
		}
		Summary struct {
			Students, Checked, Passing int
			Requirements               []struct {
				Requirement string
				Students    int
			}
		}
	}
	if st != http.StatusOK || json.Unmarshal(body, &api) != nil {
		t.Fatalf("GET the board: %d %s", st, body)
	}
	if s := api.Summary; s.Students != 6 || s.Checked != 5 || s.Passing != 2 || len(s.Requirements) != 3 {
		t.Errorf("the class's counts: %+v", s)
	}
	for _, r := range api.Summary.Requirements {
		if r.Students != 1 {
			t.Errorf("requirement %s named by %d students, want 1", r.Requirement, r.Students)
		}
	}
	if got := board.Text("board-pass"); got != "2 of 6 pass" {
		t.Errorf("the board says %q", got)
	}
	byName := map[string]*classStudent{}
	for _, s := range students {
		byName[s.name] = s
	}
	var stageRun, stageSession string
	for _, r := range api.Students {
		s := byName[r.Name]
		wantChecks := 1
		if s.sol == nil {
			wantChecks = 0
		}
		if r.Checks != wantChecks || r.Requirement != string(s.want) {
			t.Errorf("%s: %d checks kept, naming %q; want %d, %q", r.Name, r.Checks, r.Requirement, wantChecks, s.want)
		}
		var marks map[string]string
		board.Eval(`Object.fromEntries([...`+rowJS(r.Name)+`.querySelectorAll("td[data-case]")].map(td => [td.dataset.case, td.dataset.mark || ""]))`, &marks)
		for _, c := range r.Cases {
			if marks[c.Case] != c.Mark {
				t.Errorf("%s's %s shows %q, the API %q", r.Name, c.Case, marks[c.Case], c.Mark)
			}
			if r.Name == "Dee" && c.Mark == "not-as-correct" && c.Run != "" && stageRun == "" { // a probe has no run
				stageRun, stageSession = c.Run, r.Session
			}
		}
	}
	// Three requirements of two lines each, the lead controls and the
	// class's tools fit the side column at 1920×1080, with nothing to scroll.
	var fits bool
	board.Eval(`(() => { const s = document.querySelector(".board-side");
		return s.scrollHeight <= s.clientHeight + 1 && s.scrollWidth <= s.clientWidth + 1; })()`, &fits)
	if !fits {
		t.Error("the board's side column scrolls at 1920×1080 with three requirements named")
	}
	board.Screenshot("classroom-board-after-restart")
	// A class whose checks name five requirements: the board lists the
	// three named most, and says how many more the export has. (The
	// board's answer is given five here, as the API would give them.)
	board.Eval(`(() => { const f = window.fetch; window.fetch = (...a) => f(...a).then(async (r) => {
		if (!String(a[0]).includes("/board")) return r;
		const b = await r.json(); const q = b.summary.requirements;
		b.summary.requirements = [...q, ...q.slice(0, 2).map((x) => ({...x, requirement: x.requirement + "-again"}))];
		return new Response(JSON.stringify(b), {status: r.status, headers: r.headers}); }); return true; })()`, nil)
	board.Poll(`!!document.querySelector('[data-testid="board-reqs-more"]')`, 10*time.Second)
	var listed int
	board.Eval(`document.querySelectorAll('[data-testid="board-reqs"] li[data-requirement]').length`, &listed)
	if more := board.Text("board-reqs-more"); listed != 3 || more != "and 2 more requirements, in the export" {
		t.Errorf("with five requirements the board lists %d and says %q", listed, more)
	}
	board.Eval(`(() => { const s = document.querySelector(".board-side");
		return s.scrollHeight <= s.clientHeight + 1 && s.scrollWidth <= s.clientWidth + 1; })()`, &fits)
	if !fits {
		t.Error("the board's side column scrolls at 1920×1080 with five requirements named")
	}

	// The teacher puts Dee's failing case on the stage: her run, after the
	// restart, in her new session.
	var href string
	board.Eval(rowJS("Dee")+`.querySelector('td[data-mark="not-as-correct"] a').getAttribute("href")`, &href)
	if want := fmt.Sprintf("/s/%s?run=%s&present=1", stageSession, stageRun); href != want || stageRun == "" {
		t.Fatalf("Dee's mark links to %q, want %q", href, want)
	}
	stage := window(openC, "chromium", 1920, 1080)
	stage.Navigate(srv.URL + href)
	stage.WaitReady()
	stage.PollState(`s.role === "viewer" && s.view.run === `+e2etest.JSString(stageRun)+` && s.view.events > 0`, 30*time.Second)
	stage.Screenshot("classroom-stage")
	// A reload keeps the run on the stage: its address says which.
	var again string
	stage.Eval(`location.href`, &again)
	stage.Navigate(again)
	stage.WaitReady()
	stage.PollState(`s.role === "viewer" && s.view.run === `+e2etest.JSString(stageRun)+` && s.view.events > 0`, 30*time.Second)

	// The hand-ins: the five solutions as they were typed.
	st, body = srv.Request(http.MethodGet, "/api/classes/"+classID+"/handins.json", teacher, "")
	var hs struct {
		Handins []struct {
			Name     string `json:"student"`
			Solution *sandbox.Solution
		}
	}
	if st != http.StatusOK || json.Unmarshal(body, &hs) != nil || len(hs.Handins) != 6 {
		t.Fatalf("GET the hand-ins: %d %.300s", st, body)
	}
	for _, h := range hs.Handins {
		s := byName[h.Name]
		switch {
		case s.sol == nil && h.Solution != nil:
			t.Errorf("%s checked nothing, and her hand-in holds %+v", h.Name, h.Solution)
		case s.sol != nil && (h.Solution == nil || *h.Solution != *s.sol):
			t.Errorf("%s's hand-in is not what she typed: %+v", h.Name, h.Solution)
		}
	}
}
