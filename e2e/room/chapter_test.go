package room

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/server/lab/experiments"
)

// TestClass_SendsAChapter: the board's "Lesson … Open for everyone"
// offers the lesson's chapters by their titles — the lesson's own module,
// run in the board, and exactly the server's list (experiments.Chapters),
// in its order; the teacher, at the keyboard, picks one and presses Open
// for everyone; Ada's open page opens the guided lesson at that chapter,
// as ?lesson= does, says so in its live feed and keeps it in its address,
// while a page only watching her session opens nothing; a second chapter
// sent moves her page on to it; and her page loaded again on her session
// is not sent back by the notes from before it loaded. The control is in
// the board's large type, and the side column still fits 1920×1080.
func TestClass_SendsAChapter(t *testing.T) {
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
	ada := e2etest.NewTab(t, 375, 800)
	joinAs(ada, srv.URL, "/join?code="+opened.Code, "", "Ada")
	adaSession := arrived(ada)
	// Bo's phone is the narrowest there is: 320 px.
	bo := e2etest.NewTab(t, 320, 640)
	joinAs(bo, srv.URL, "/join?code="+opened.Code, "", "Bo")
	arrived(bo)
	if ada.State()["lesson"] != nil {
		t.Fatal("Ada's page has a lesson open before any chapter was sent")
	}
	// The teacher's view of one of her runs: it watches, it is not hers.
	watcher := e2etest.NewTab(t, 1280, 800)
	watcher.Navigate(srv.WatchURL(adaSession))
	watcher.WaitReady()
	watcher.PollState(`s.role === "viewer" && s.connection === "live"`, 30*time.Second)

	board := e2etest.NewTab(t, 1920, 1080)
	board.Navigate(srv.URL + "/classes/" + opened.Class.ID + "#token=" + opened.Token)
	board.WaitReady()
	board.PollJS(`document.querySelectorAll('[data-testid="board-row"]').length === 2`, boardWait)

	// The choices are the lesson's chapters, as the server has them.
	type option struct{ Value, Label string }
	var got []option
	board.Eval(`[...document.querySelector(`+e2etest.JSString(e2etest.Sel("board-chapter"))+`).options].map(o => ({value: o.value, label: o.textContent.trim()}))`, &got)
	var want []option
	for _, c := range experiments.Chapters() {
		want = append(want, option{string(c), c.Title()})
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the board offers the chapters\n%v\nthe server's list is\n%v", got, want)
	}

	// At the keyboard: the chapter, Tab, Enter.
	board.SetValue("board-chapter", string(experiments.ChapterBuildUp))
	board.Press("Tab")
	if f := board.Focused(); f != "board-chapter-send" {
		t.Fatalf("Tab from the chapter goes to %q, not Open for everyone", f)
	}
	var ring bool
	if board.Eval(focusRing, &ring); !ring {
		t.Error("Open for everyone has no visible focus ring")
	}
	board.Press("Enter")
	board.PollState(`s.chapter.sent === 1 && s.chapter.sending === false && s.chapter.answer !== null`, 30*time.Second)
	if f := board.Focused(); f != "board-chapter-send" {
		t.Errorf("after the answer the focus is on %q, not on the button it was on", f)
	}
	if got, want := board.Text("board-chapter-status"), "Opened “The pieces” for 2 of 2 students."; got != want {
		t.Errorf("the board's status says %q, want %q", got, want)
	}

	// Ada's page opens the lesson there, says so, and keeps it in its address.
	ada.PollState(`s.lesson !== null && s.lesson.chapter === "build-up" && s.lesson.index === -1`, 10*time.Second)
	if !ada.Visible("lesson") || !strings.Contains(ada.Text("lesson-text"), "The pieces") {
		t.Errorf("Ada's lesson panel shows %q (visible: %v)", ada.Text("lesson-text"), ada.Visible("lesson"))
	}
	var feed, search, live string
	ada.Eval(`document.querySelector('[data-testid="live-feed"]').textContent`, &feed)
	ada.Eval(`location.search`, &search)
	ada.Eval(`document.querySelector('[data-testid="live-feed"]').getAttribute("aria-live")`, &live)
	if !strings.Contains(strings.ToUpper(feed), strings.ToUpper("Your teacher opened the chapter “The pieces”")) || live != "polite" {
		t.Errorf("Ada's live feed (aria-live %q) says %q", live, feed)
	}
	if !strings.Contains(search, "lesson=build-up") {
		t.Errorf("Ada's address after the chapter: %q", search)
	}
	if ada.State()["sessionId"] != adaSession || ada.State()["run"] != nil {
		t.Errorf("the chapter moved Ada's page off her session, or started a run: %v", ada.State()["run"])
	}

	// The control, in large type; the side column still fits.
	var fonts []float64
	board.Eval(`["board-chapter", "board-chapter-send", "board-chapter-status"].map(id => parseFloat(getComputedStyle(document.querySelector('[data-testid="' + id + '"]')).fontSize))`, &fonts)
	for _, f := range fonts {
		if f < 19.5 {
			t.Errorf("Lesson … Open for everyone is in type of %v px at 1920×1080, under the projector's 20", fonts)
			break
		}
	}
	var fits bool
	board.Eval(`document.documentElement.scrollHeight <= innerHeight && document.documentElement.scrollWidth <= innerWidth && `+sideFitsJS, &fits)
	if !fits {
		t.Error("the board with the chapter's answer scrolls at 1920×1080, or its side column does")
	}
	board.Screenshot("class-board-chapter-1920x1080")

	// On her phone Ada steps the chapter with her finger: Next (as large
	// as a finger) plays its first step, a swipe to the left the next,
	// and Back goes back; no key is pressed.
	var size struct{ W, H float64 }
	for _, phone := range []*e2etest.Tab{ada, bo} {
		phone.PollState(`s.lesson !== null && s.lesson.chapter === "build-up"`, 10*time.Second)
		phone.Eval(`(() => { const r = document.querySelector('[data-testid="lesson-next"]').getBoundingClientRect(); return {W: r.width, H: r.height}; })()`, &size)
		if size.W < 44 || size.H < 44 {
			t.Errorf("Next on a phone is %v×%v px, under a finger's 44", size.W, size.H)
		}
	}
	noSideScroll(bo, "a chapter at 320 px")
	e2etest.ViewShot(bo, "class-student-chapter-320")
	bo.Click("lesson-next")
	bo.PollState(`s.lesson.index === 0 && s.lesson.ready`, 30*time.Second)
	noSideScroll(bo, "a chapter's first step at 320 px")
	e2etest.ViewShot(bo, "class-student-chapter-step-320")
	ada.Click("lesson-next")
	ada.PollState(`s.lesson.index === 0 && s.lesson.ready`, 30*time.Second) // the two workers started
	ada.Swipe("lesson", -200)
	ada.PollState(`s.lesson.index === 1 && s.lesson.ready`, 30*time.Second) // A claims
	if !strings.Contains(ada.Text("lesson-text"), "A claims the job") {
		t.Errorf("after a swipe to the left Ada's lesson says %q", ada.Text("lesson-text"))
	}
	e2etest.ViewShot(ada, "class-student-chapter-step-375")
	// The page redraws on each event; the panel's buttons outlive a redraw
	// that changes nothing in it. (Drawn anew each time, a tap whose press
	// and release an event came between was lost: the click went to the
	// panel. Under CI's busy loops Back did nothing.)
	ada.Eval(`(() => { window.__back = document.querySelector('[data-testid="lesson-prev"]'); document.dispatchEvent(new Event("visibilitychange")); return true; })()`, nil)
	ada.PollState(`s.drawn`, 5*time.Second)
	var kept bool
	if ada.Eval(`window.__back.isConnected`, &kept); !kept {
		t.Error("a redraw of the page drew the lesson's Back button anew: a tap across it is lost")
	}
	ada.Click("lesson-prev")
	ada.PollState(`s.lesson.index === 0`, 10*time.Second)

	// Another chapter moves Ada on to it, by a click this time.
	board.SetValue("board-chapter", string(experiments.ChapterLimits))
	board.Click("board-chapter-send")
	board.PollState(`s.chapter.sent === 2 && s.chapter.sending === false && s.chapter.answer !== null`, 30*time.Second)
	ada.PollState(`s.lesson !== null && s.lesson.chapter === "limits" && s.lesson.index === -1`, 10*time.Second)
	e2etest.ViewShot(ada, "class-student-chapter-375")

	// The watcher has every note Ada's page had, and opened nothing.
	last := ada.State()["lastSeq"].(float64)
	watcher.PollState(fmt.Sprintf(`s.lastSeq >= %v`, last), 10*time.Second)
	if watcher.State()["lesson"] != nil {
		t.Error("a page watching Ada's session opened the teacher's chapter")
	}

	// Loaded again on her session, without the lesson in its address: the
	// notes from before it loaded send her nowhere.
	ada.Navigate(srv.URL + "/s/" + adaSession)
	ada.WaitReady()
	ada.PollState(`s.role === "driver" && s.connection === "live"`, 30*time.Second)
	if st := ada.State(); st["lesson"] != nil {
		t.Errorf("Ada's page, loaded again, opened the lesson from an old note: %v", st["lesson"])
	}
}
