package room

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/e2e/e2etest"
)

// TestEmbed_HostPageOnAnotherOrigin: a blog on another origin embeds the
// page; it posts ready, its height and the verdict; the blog starts a run
// by message; a message from an origin that is not allowed is ignored.
func TestEmbed_HostPageOnAnotherOrigin(t *testing.T) {
	t.Parallel()
	// The evil frame sits on the blog's page but has an origin of its own.
	evil := e2etest.HostServer(t, `<!doctype html><title>evil</title><script>
	  window.addEventListener("message", (e) => {
	    if (e.data === "go") parent.frames[0].postMessage({type: "run", ordering: "new-owner-first", mode: "auto", lease_ms: 300, pace_ms: 0}, "*");
	  });</script>`)
	blogLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	blog := "http://" + blogLn.Addr().String()
	srv := e2etest.StartServer(t, "--allow-origin", blog)
	page := fmt.Sprintf(`<!doctype html><html lang="en"><head><title>A blog post</title></head><body>
	<h1>Fencing tokens</h1><p>Try it:</p>
	<iframe id="demo" title="fencelab" src="%s/?embed=1&ordering=new-owner-first&lease=300&pace=0" style="width:360px;height:200px;border:0"></iframe>
	<iframe id="evil" title="evil" src="%s/"></iframe>
	<script>
	  window.msgs = [];
	  addEventListener("message", (e) => {
	    if (e.origin !== %q || !e.data || e.data.source !== "fencelab") return;
	    window.msgs.push(e.data);
	    if (e.data.type === "height") document.getElementById("demo").style.height = e.data.height + "px";
	  });
	  window.start = () => document.getElementById("demo").contentWindow.postMessage({type: "run", ordering: "zombie-first", mode: "auto", lease_ms: 300, pace_ms: 0}, %q);
	  window.evil = () => document.getElementById("evil").contentWindow.postMessage("go", "*");
	</script></body></html>`, srv.URL, evil, srv.URL, srv.URL)
	e2etest.ServeOn(t, blogLn, page)

	tab := e2etest.NewTab(t, 1024, 900)
	tab.Navigate(blog + "/")
	tab.PollJS(`window.msgs && window.msgs.some(m => m.type === "ready") && window.msgs.some(m => m.type === "height")`, 30*time.Second)
	var session string
	tab.Eval(`window.msgs.find(m => m.type === "ready").session`, &session)
	var h0 float64
	tab.Eval(`document.getElementById("demo").getBoundingClientRect().height`, &h0)

	// The evil frame's message changes nothing.
	tab.Eval(`window.evil(); true`, nil)
	time.Sleep(1500 * time.Millisecond) // waiting for something NOT to happen: no event can end this wait early
	if s := srv.GetJSON("/api/sessions/" + session); s["run"] != nil {
		t.Fatalf("a message from a foreign origin started a run: %v", s["run"])
	}
	// The blog's own message starts one; the verdict comes back.
	tab.Eval(`window.start(); true`, nil)
	tab.PollJS(`window.msgs.some(m => m.type === "verdict")`, 60*time.Second)
	var v map[string]any
	tab.Eval(`window.msgs.find(m => m.type === "verdict")`, &v)
	o, _ := v["outcome"].(map[string]any)
	if v["safe"] != true || o == nil || o["ordering"] != "zombie-first" || o["zombie_receiver_call"] != "accepted_then_superseded" {
		t.Fatalf("verdict message: %v", v)
	}
	var all []any
	tab.Eval(`window.msgs`, &all)
	if k := e2etest.SecretKey(all); k != "" {
		t.Fatalf("a message to the host carries a %q field: %v", k, all)
	}
	var h1 float64
	tab.Eval(`document.getElementById("demo").getBoundingClientRect().height`, &h1)
	if h1 <= h0 {
		t.Errorf("the embed did not grow as the run unfolded: %v px, then %v px", h0, h1)
	}
	tab.Screenshot("embed-in-a-blog")
}

// TestCSP_NoViolationDuringAFullRun: the page's strict policy holds.
func TestCSP_NoViolationDuringAFullRun(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 900)
	e2etest.RunFromPage(t, srv, tab, "ordering=zombie-first&mode=auto&lease=300&pace=0")
	tab.Click("share")
	tab.WaitVisible("embed-code")
	tab.Press("Escape")
	if csp := tab.State()["csp"].([]any); len(csp) > 0 {
		t.Fatalf("Content-Security-Policy violations: %v", csp)
	}
}

// TestPresent_StepsByPageDown: the projector view, run and stepped with a
// presenter's remote.
func TestPresent_StepsByPageDown(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1920, 1080)
	tab.Navigate(srv.URL + "/?present=1&ordering=new-owner-first&mode=step&lease=300")
	tab.WaitReady()
	tab.PollState(`s.connection === "live" && s.present === true`, 30*time.Second)
	if tab.Visible("guard-epoch-check") {
		t.Error("present mode shows the guard switches: it should need no mouse and show little")
	}
	tab.Press(" ")
	tab.PollState(`s.run && s.run.mode === "step" && s.workers.length === 2`, 30*time.Second)
	for i := 1; i <= 8; i++ {
		tab.Press("PageDown")
		tab.PollState(fmt.Sprintf(`s.run.stepIndex >= %d`, i), 30*time.Second)
	}
	tab.PollState(`s.outcome && s.outcome.safe === true`, 30*time.Second)
	// What the room sees with no mouse: the lanes, the newest event and
	// the verdict, on the first screen, the page not scrolled by a key.
	tab.PollJS(`new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, 5*time.Second)
	checkStageInView(t, tab, "present mode, at the verdict")
	e2etest.ViewShot(tab, "present-1920")
	tab.Press("PageUp")
	tab.PollState(`s.view.scrub !== null`, 5*time.Second)
}

// TestLesson_WaitsForTheRealLeaseExpiry steps the guided lesson: at the
// lease step it waits — PageDown does nothing — until the lease has really
// run out on the database clock, and goes on only then.
func TestLesson_WaitsForTheRealLeaseExpiry(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1920, 1080)
	tab.Navigate(srv.URL + "/?lesson=build-up&present=1")
	tab.WaitReady()
	tab.PollState(`s.connection === "live" && s.lesson && s.lesson.chapter === "build-up" && s.lesson.index === -1`, 30*time.Second)
	for i := 0; i < 3; i++ {
		tab.Press("PageDown")
		tab.PollState(fmt.Sprintf(`s.lesson.index === %d && s.lesson.ready`, i), 30*time.Second)
	}
	tab.Press("PageDown") // "the lease runs out"
	tab.PollState(`s.lesson.index === 3 && s.lesson.waiting !== ""`, 5*time.Second)
	pressedAt := time.Now()
	tab.Press("PageDown") // ignored while waiting (the lease has ~3 s to run)
	if st := tab.State()["lesson"].(map[string]any); st["index"].(float64) != 3 {
		t.Fatalf("the lesson moved on while waiting for the lease: %v", st)
	}
	tab.Screenshot("lesson-waiting-1920")
	tab.PollState(`s.lesson.ready`, 30*time.Second)
	waited := time.Since(pressedAt)
	st := tab.State()
	seqs := st["lesson"].(map[string]any)["waitedFor"].([]any)
	last := int(seqs[len(seqs)-1].(float64))
	evs := srv.GetJSON(fmt.Sprintf("/api/sessions/%s/events?since=%d&limit=1", st["sessionId"], last-1))["events"].([]any)
	e := evs[0].(map[string]any)
	if l, _ := e["lease"].(map[string]any); e["kind"] != "lease" || l == nil || l["change"] != "expired" || l["clock"] != "database" {
		t.Fatalf("the lesson went on after event %v, not a lease expiry", e)
	}
	t.Logf("the lesson waited %v for the lease to run out on the database clock (lease 3s)", waited.Round(time.Millisecond))
	tab.Press("PageDown")
	tab.PollState(`s.lesson.index === 4 && s.lesson.ready && s.workers.some(w => w.label === "B")`, 30*time.Second)
	if txt := tab.Text("lesson-text"); !strings.Contains(txt, "epoch goes up to 2") {
		t.Errorf("lesson text %q", txt)
	}
}

// TestClassroom_StudentWatchesLive: the teacher drives; a student opens the
// watch link, sees the same run live, and has no control that works.
func TestClassroom_StudentWatchesLive(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	teacher := e2etest.NewTab(t, 1920, 1080)
	e2etest.OpenLive(teacher, srv.URL+"/?ordering=zombie-first&mode=step&lease=300")
	id := teacher.State()["sessionId"].(string)
	student := e2etest.NewTab(t, 375, 800)
	student.Navigate(srv.WatchURL(id))
	student.WaitReady()
	student.PollState(`s.connection === "live" && s.role === "viewer"`, 30*time.Second)
	// A watcher runs nothing: before the first run its label says it waits.
	if txt := student.Text("setup-now"); txt != "Waiting for the driver's first run" {
		t.Errorf("before the teacher's run the student's label says %q", txt)
	}
	teacher.Click("run")
	teacher.PollState(`s.run && s.workers.length === 2`, 30*time.Second)
	run := teacher.State()["run"].(map[string]any)["id"].(string)
	student.PollState(fmt.Sprintf(`s.run && s.run.id === %q && s.workers.length === 2`, run), 30*time.Second)
	// The student's label and permalink say the run it watches, though its
	// controls are disabled.
	title := lessonOrderingTitle(t, student, "zombie-first")
	if txt := student.Text("setup-now"); !strings.HasPrefix(txt, "Now: "+title) {
		t.Errorf("during the teacher's run the student's label says %q", txt)
	}
	var href string
	student.Eval(`document.querySelector('[data-testid="permalink"]').getAttribute("href")`, &href)
	for _, want := range []string{"ordering=zombie-first", "mode=step", "lease=300"} {
		if !strings.Contains(href, want) || strings.Contains(href, "null") {
			t.Errorf("the student's permalink %q lacks %q, or says null", href, want)
		}
	}
	for _, id := range []string{"run", "step", "reset", "worker-A-pause", "worker-A-kill", "matrix-run", "guard-epoch-check", "ordering"} {
		var disabled bool
		student.Eval(fmt.Sprintf(`document.querySelector('[data-testid=%q]').disabled`, id), &disabled)
		if !disabled {
			t.Errorf("the student's %s control is enabled", id)
		}
	}
	// Keys do nothing for a watcher.
	before := srv.GetJSON("/api/sessions/" + id)["run"].(map[string]any)["step_index"]
	for _, k := range []string{" ", "ArrowRight", "r", "PageDown"} {
		student.Press(k)
	}
	time.Sleep(500 * time.Millisecond) // waiting for nothing to happen
	if after := srv.GetJSON("/api/sessions/" + id)["run"].(map[string]any)["step_index"]; after != before {
		t.Fatalf("the student's keys moved the run from step %v to %v", before, after)
	}
	for i := 1; i <= 8; i++ {
		teacher.Press("ArrowRight")
		teacher.PollState(fmt.Sprintf(`s.run.stepIndex >= %d`, i), 30*time.Second)
	}
	student.PollState(`s.outcome && s.outcome.safe === true && s.outcome.ordering === "zombie-first"`, 30*time.Second)
	// Once the run has ended (its last state comes after its verdict).
	student.PollJS(`document.querySelector('[data-testid="setup-now"]').textContent.startsWith("Last run: ")`, 10*time.Second)
	if txt := student.Text("setup-now"); !strings.HasPrefix(txt, "Last run: "+title) {
		t.Errorf("after the teacher's run the student's label says %q", txt)
	}
	student.Screenshot("student-375")
}

// TestPermalink_ReproducesTheSetup opens a permalink and runs it.
func TestPermalink_ReproducesTheSetup(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 900)
	e2etest.OpenLive(tab, srv.URL+"/?ordering=clock-skew&mode=step&break=db-clock,receiver-check&same=1&lease=700&pace=200&skew=3000")
	for id, want := range map[string]string{"ordering": "clock-skew", "mode": "step", "lease": "700", "pace": "200", "skew": "3000"} {
		var got string
		tab.Eval(fmt.Sprintf(`document.querySelector('[data-testid=%q]').value`, id), &got)
		if got != want {
			t.Errorf("%s = %q, want %q", id, got, want)
		}
	}
	var checks map[string]bool
	tab.Eval(`Object.fromEntries([...document.querySelectorAll('input[name="guard"]')].map(c => [c.value, c.checked]).concat([["same", document.querySelector('[data-testid="same-identity"]').checked]]))`, &checks)
	if checks["db-clock"] || checks["receiver-check"] || !checks["epoch-check"] || !checks["same"] {
		t.Fatalf("guards from the link: %v", checks)
	}
	var href string
	tab.Eval(`document.querySelector('[data-testid="permalink"]').getAttribute("href")`, &href)
	for _, want := range []string{"ordering=clock-skew", "receiver-check", "db-clock", "same=1", "lease=700", "skew=3000"} {
		if !strings.Contains(href, want) {
			t.Errorf("the permalink %q lacks %q", href, want)
		}
	}
	tab.Click("run")
	tab.PollState(`s.run && s.run.mode === "step" && s.run.phase === "ready"`, 30*time.Second)
	run := srv.GetJSON("/api/sessions/" + tab.State()["sessionId"].(string))["run"].(map[string]any)
	if run["ordering"] != "clock-skew" || run["lease_ms"].(float64) != 700 || run["skew_ms"].(float64) != 3000 || run["same_identity"] != true ||
		fmt.Sprint(run["broken"]) != "[receiver-check db-clock]" {
		t.Fatalf("the run's setup: %v", run)
	}
}

// TestExport_ReplayWorksOfflineWithTheSameVerdict downloads a run as NDJSON,
// as an SQL transcript and as one HTML file; stops the server; opens the
// HTML file from disk; it replays the run and shows the same verdict.
func TestExport_ReplayWorksOfflineWithTheSameVerdict(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	// This tab stays open while the server is stopped: its socket's tries
	// to reconnect are refused, as they should be.
	tab := e2etest.NewTab(t, 1280, 900, e2etest.AllowErrors("ERR_CONNECTION_REFUSED"))
	o := e2etest.RunFromPage(t, srv, tab, "ordering=new-owner-first&mode=auto&lease=300&pace=0&break=receiver-check")
	if o["safe"] != false {
		t.Fatalf("receiver-check off in new-owner-first should be unsafe: %v", o)
	}
	tab.WaitVisible("exports")
	get := func(testid string) []byte {
		var href string
		tab.Eval(fmt.Sprintf(`document.querySelector('[data-testid=%q]').getAttribute("href")`, testid), &href)
		status, body := srv.Request("GET", href, "", "")
		if status != 200 {
			t.Fatalf("%s %s: %d", testid, href, status)
		}
		return body
	}
	nd := get("export-ndjson")
	sc := bufio.NewScanner(bytes.NewReader(nd))
	lines := 0
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("NDJSON line %d: %v", lines+1, err)
		}
		lines++
	}
	sql := string(get("export-sql"))
	for _, want := range []string{"FOR UPDATE SKIP LOCKED", "worker A", "worker B", "JobComplete", "0 row(s)", "$1 = 'worker-a'"} {
		if !strings.Contains(sql, want) {
			t.Errorf("the SQL transcript lacks %q", want)
		}
	}
	html := get("export-html")
	file := filepath.Join(t.TempDir(), "replay.html")
	if err := os.WriteFile(file, html, 0o644); err != nil {
		t.Fatal(err)
	}
	verdict := o["verdict"].(string)
	srv.Stop() // the file must work alone
	t.Logf("exported %d events as NDJSON, %d bytes of SQL, %d bytes of HTML", lines, len(sql), len(html))

	off := e2etest.NewTab(t, 1280, 900)
	off.Navigate("file://" + file)
	off.WaitReady()
	off.PollState(`s.replay === true && s.outcome !== null`, 10*time.Second)
	var got string
	off.Eval(`window.fencelab.state().outcome.verdict`, &got)
	if got != verdict {
		t.Fatalf("offline replay says %q, the live run said %q", got, verdict)
	}
	if txt := off.Text("verdict"); !strings.Contains(txt, "Unsafe") {
		t.Errorf("the replay's verdict panel says %q", txt)
	}
	off.Click("play")
	off.PollState(`s.pos > 3 && s.pos < s.events`, 10*time.Second)
	off.Screenshot("replay-offline-1280")
}

// TestBusy_ARecordedRunInstead: when the server is too busy to start a run
// (or even a session), the reader gets a recorded run, not an error.
func TestBusy_ARecordedRunInstead(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t, "--max-runs", "1", "--max-sessions", "3")
	id, token := srv.NewSession()
	srv.Command(id, token, `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":30000}`) // holds the only run slot
	// The browser logs each 503 as a failed load: here that is the point.
	tab := e2etest.NewTab(t, 375, 800, e2etest.AllowErrors("503"))
	e2etest.OpenLive(tab, srv.URL+"/?ordering=new-owner-first&mode=auto&lease=300&pace=0")
	tab.Click("run")
	tab.PollState(`s.recording === "new-owner-first" && s.recorded.outcome && s.recorded.outcome.safe === true`, 60*time.Second)
	if txt := tab.Text("recorded"); !strings.Contains(txt, "busy") || !strings.Contains(txt, "recorded run") {
		t.Errorf("the notice says %q", txt)
	}
	if txt := tab.Text("error"); tab.Visible("error") {
		t.Errorf("an error is shown instead: %q", txt)
	}
	tab.Screenshot("busy-recorded-375")

	// No session to be had at all — every one is in use, so none makes way
	// — the page still comes, says so, and plays a recording.
	id3, token3 := srv.NewSession()
	srv.Command(id3, token3, `{"action":"reset"}`)
	full := e2etest.NewTab(t, 375, 800, e2etest.AllowErrors("503"))
	if status := full.NavigateStatus(srv.URL + "/?ordering=zombie-first&lease=300"); status != http.StatusServiceUnavailable {
		t.Fatalf("GET / with every session taken: %d, want 503", status)
	}
	full.WaitReady()
	if txt := full.Text("notice"); !strings.Contains(txt, "busy") {
		t.Errorf("the busy page's notice: %q", txt)
	}
	full.Click("run")
	full.PollState(`s.recording === "zombie-first" && s.recorded.outcome && s.recorded.outcome.ordering === "zombie-first"`, 60*time.Second)
}

// TestPeers_TheDriveLinkWorksOnTheOtherInstance: two servers on one
// Postgres, as behind a reverse proxy that sends each request anywhere; a
// reader opens a session's drive link on the instance that did not make
// it, and drives a whole run from there.
func TestPeers_TheDriveLinkWorksOnTheOtherInstance(t *testing.T) {
	t.Parallel()
	owner := e2etest.StartServer(t)
	other := e2etest.StartServer(t)
	id, token := owner.NewSession()
	tab := e2etest.NewTab(t, 1280, 900)
	tab.Navigate(other.URL + "/s/" + url.PathEscape(id) + "?ordering=zombie-first&mode=auto&lease=300&pace=0#token=" + url.QueryEscape(token))
	tab.WaitReady()
	tab.PollState(`s.connection === "live" && s.role === "driver"`, 30*time.Second)
	if got := tab.State()["sessionId"]; got != id {
		t.Fatalf("the page on the other instance shows session %v, want %s", got, id)
	}
	tab.Click("run")
	tab.PollState(`s.outcome && s.outcome.safe === true`, 60*time.Second)
	if s := owner.GetJSON("/api/sessions/" + id); s["run"] == nil {
		t.Fatalf("the owner does not have the run: %v", s)
	}
}
