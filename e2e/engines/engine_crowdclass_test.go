package engines

// Thirty students behind one address, as a school's network is, and three
// phones in three browsers: issue 44's class as a teacher lives it.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/sandbox"
)

// TestEngines_ThirtyStudentsAndThreePhones: a teacher starts a class on a
// projector (Chromium, 1920×1080); three students join on phones at 375 px,
// one each in Chromium, WebKit and Firefox; thirty more join through
// `fencelab crowd --class 30`, all from this one address, and press Check
// at once (every third on a wrong solution) while the teacher leads. The
// teacher opens a chapter for everyone, which each phone steps by tap;
// runs a scenario for everyone, which comes into view on each phone, with a
// way back; the phones check, one wrong and two right, and each lands on
// the board as its report says; each of the crowd's reports lands on the
// projector (the lag from report to projector is logged, and kept in
// BENCHMARKS); the board counts all 33; and End class reaches every phone.
func TestEngines_ThirtyStudentsAndThreePhones(t *testing.T) {
	t.Parallel()
	opens := map[string]func(*testing.T, int, int) driver{}
	for _, e := range engines {
		opens[e.name] = e.start(t)
	}
	window := func(eng string, w, h int) *engineTab {
		tab := &engineTab{t: t, engine: eng, d: opens[eng](t, w, h), w: w, h: h}
		t.Cleanup(tab.finish)
		return tab
	}
	srv := e2etest.StartServer(t)

	// The teacher starts the class.
	board := window("chromium", 1920, 1080)
	boardURL, code := startClass(board, srv.URL)

	// Three phones join, one in each browser.
	ours := sandbox.Ours()
	noEpoch := ours.With(sandbox.Claim, strings.Replace(ours.Claim, "       epoch = epoch + 1,\n", "", 1))
	if noEpoch == ours {
		t.Fatal("our claim has no epoch increment to take out")
	}
	phones := []*classStudent{
		{name: "Ada (Chromium)", sol: &noEpoch, want: experiments.ReqEpochRaised},
		{name: "Bea (WebKit)", sol: &ours},
		{name: "Cy (Firefox)", sol: &ours},
	}
	for i, eng := range []string{"chromium", "webkit", "firefox"} {
		p := phones[i]
		p.tab = window(eng, 375, 800)
		p.tab.Navigate(srv.URL + "/join?code=" + code)
		p.tab.WaitReady()
		p.tab.PollState(`s.page === "join" && s.phase === "ready"`, 10*time.Second)
		setValue(p.tab, "class-join-name", p.name)
		p.tab.Click("class-join-submit")
		p.tab.Poll(`location.pathname.startsWith("/s/") && document.readyState === "complete" && window.fencelab && window.fencelab.ready === true`, 30*time.Second)
		p.tab.PollState(`s.role === "driver" && s.connection === "live" && s.build !== null && s.seat !== null`, 60*time.Second)
		if got := p.tab.Text("class-seat"); !strings.Contains(got, p.name) {
			t.Errorf("%s's page says %q at its top", p.name, got)
		}
	}
	board.Poll(`document.querySelectorAll('[data-testid="board-row"]').length === 3`, 30*time.Second)
	// What the teacher sees, and when: the first moment each row shows a
	// verdict on the projector, on this machine's clock (the crowd's too).
	board.Eval(`(() => { window.seenAt = {}; setInterval(() => {
		for (const r of document.querySelectorAll('[data-testid="board-row"]')) {
			const name = r.querySelector('[data-testid="board-name"]').textContent;
			if (r.dataset.state !== "none" && !(name in window.seenAt)) window.seenAt[name] = Date.now();
		}
	}, 20); return true; })()`, nil)

	// Thirty more, through the crowd, from this one address: the board's
	// address (the teacher's key in it) goes in the environment.
	var out, errs bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	crowd := exec.CommandContext(ctx, e2etest.Binary(t), "crowd", "--class", "30", "--url", srv.URL, "--json")
	crowd.Env = append(os.Environ(), "FENCELAB_BOARD="+boardURL)
	crowd.Stdout, crowd.Stderr = &out, &errs
	if err := crowd.Start(); err != nil {
		t.Fatal(err)
	}
	crowdDone := make(chan error, 1)
	go func() { crowdDone <- crowd.Wait() }()
	board.Poll(`document.querySelectorAll('[data-testid="board-row"]').length === 33`, 60*time.Second)

	// The teacher opens a chapter for everyone; each phone steps it by tap.
	setValue(board, "board-chapter", string(experiments.ChapterBuildUp))
	board.Click("board-chapter-send")
	board.PollState(`s.chapter.sent === 1 && s.chapter.sending === false && s.chapter.answer !== null`, 60*time.Second)
	for _, p := range phones {
		p.tab.PollState(`s.lesson !== null && s.lesson.chapter === "build-up"`, 15*time.Second)
		p.tab.Click("lesson-next")
		p.tab.PollState(`s.lesson.index === 0`, 60*time.Second)
		p.tab.Screenshot("crowdclass-chapter-375")
		// Then to Build it, where a student writes (screens above the run).
		p.tab.Eval(`(() => { const b = document.querySelector('[data-testid="build"]'); b.open = true; document.querySelector('[data-testid="build-check"]').scrollIntoView({block: "center"}); return true; })()`, nil)
	}

	// A run for everyone comes into view on each phone, with a way back.
	setValue(board, "board-everyone-ordering", "zombie-first")
	board.Click("board-everyone-run")
	board.PollState(`s.everyone.sent === 1 && s.everyone.running === false && (s.everyone.answer !== null || s.everyone.error !== null)`, 90*time.Second)
	for _, p := range phones {
		p.tab.PollState(`s.run !== null && s.run.ordering === "zombie-first"`, 60*time.Second)
		p.tab.Poll(`(() => { const r = document.querySelector('[data-testid="stage"]').getBoundingClientRect(); return r.top < innerHeight && r.bottom > 0; })()`, 15*time.Second)
		if !p.tab.Visible("back-to-build") {
			t.Errorf("%s's page shows the run with no way back to Build it", p.name)
		}
		p.tab.Screenshot("crowdclass-run-375")
		p.tab.Click("back-to-build")
	}

	// The phones check, one wrong and two right; each lands on the board
	// as its report says, within two of the board's polls.
	for _, p := range phones {
		for _, k := range sandbox.Kinds() {
			setValue(p.tab, "build-"+k.String()+"-text", p.sol.Text(k))
		}
		p.tab.Click("build-check")
	}
	rowJS := func(name string) string {
		return `[...document.querySelectorAll('[data-testid="board-row"]')].find(r => r.querySelector('[data-testid="board-name"]').textContent === ` + e2etest.JSString(name) + `)`
	}
	for _, p := range phones {
		p.tab.PollState(`s.build.phase === "finished" && s.build.report !== null`, 2*e2etest.CheckTimeout)
		var pass bool
		p.tab.Eval(`window.fencelab.state().build.report.pass`, &pass)
		if pass != (p.want == "") {
			t.Errorf("%s's report says pass %v", p.name, pass)
		}
		state := map[bool]string{true: "pass", false: "fail"}[pass]
		board.Poll(rowJS(p.name)+`?.dataset.state === `+e2etest.JSString(state), 10*time.Second)
	}

	// The crowd's thirty: every report right, and on the board within 2 s
	// (p95).
	select {
	case err := <-crowdDone:
		if err != nil {
			t.Fatalf("fencelab crowd: %v\n%s", err, lastLines(errs.String(), 20))
		}
	case <-ctx.Done():
		t.Fatalf("fencelab crowd did not end in time:\n%s", lastLines(errs.String(), 20))
	}
	var rep struct {
		Joined        int                            `json:"joined"`
		OK            int                            `json:"ok"`
		WrongVerdicts int                            `json:"wrong_verdicts"`
		Missing       int                            `json:"missing"`
		Duplicates    int                            `json:"duplicates"`
		Errors        int                            `json:"errors"`
		BoardShown    int                            `json:"board_shown"`
		BoardWrong    int                            `json:"board_wrong"`
		BoardLag      *struct{ P50, P95, Max int64 } `json:"board_lag_ms"`
		Each          []struct {
			Name       string     `json:"name"`
			ReportedAt *time.Time `json:"reported_at"`
		} `json:"each"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("the crowd's report: %v\n%s", err, out.String())
	}
	if rep.Joined != 30 || rep.OK != 30 || rep.WrongVerdicts+rep.Missing+rep.Duplicates+rep.Errors != 0 || rep.BoardShown != 30 || rep.BoardWrong != 0 || rep.BoardLag == nil {
		t.Fatalf("the crowd: %s", out.String())
	}
	t.Logf("the board's API, read by the crowd every 250 ms: lag p50 %d ms, p95 %d ms, max %d ms", rep.BoardLag.P50, rep.BoardLag.P95, rep.BoardLag.Max)
	// 20 of the crowd's 30 are right (every third is wrong), and two phones.
	board.Poll(`document.querySelectorAll('[data-testid="board-row"]').length === 33 && document.querySelector('[data-testid="board-pass"]').textContent === "22 of 33 pass"`, 15*time.Second)

	// The lag the teacher sees: a student reading their report (the
	// crowd's clock) to its verdict on the projector (the page's). The
	// phones' verdicts are not in it: they were waited for one by one.
	var seen map[string]int64
	board.Eval(`window.seenAt`, &seen)
	var lags []time.Duration
	for _, st := range rep.Each {
		at, ok := seen[st.Name]
		if st.ReportedAt == nil || !ok {
			t.Errorf("%s: reported at %v, on the board at %d", st.Name, st.ReportedAt, at)
			continue
		}
		lags = append(lags, max(0, time.UnixMilli(at).Sub(*st.ReportedAt)))
	}
	slices.Sort(lags)
	if len(lags) == 30 {
		p50, p95 := lags[len(lags)/2], lags[(len(lags)*95+99)/100-1]
		// A measure, not a bound: BENCHMARKS keeps it (a busy machine
		// is slower, not wrong).
		t.Logf("board lag, a report to the projector, of the crowd's 30: p50 %v, p95 %v, max %v", p50.Round(time.Millisecond), p95.Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond))
	}
	board.Screenshot("crowdclass-board-1920x1080")

	// End class reaches every phone.
	board.Click("board-end")
	board.Click("board-end-confirm")
	board.PollState(`s.ended === true`, 15*time.Second)
	for _, p := range phones {
		p.tab.PollState(`s.seat !== null && s.seat.ended === true`, 15*time.Second)
		p.tab.Screenshot("crowdclass-ended-375")
	}
}
