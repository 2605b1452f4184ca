package engines

// A class in WebKit and Firefox: the teacher's start, a student's join
// and the board, with the selectors of e2e/room's TestClass_ToItsEnd,
// which plays the whole class in Chromium.

import (
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/e2e/e2etest"
)

// TestEngines_Class plays the start of a class in WebKit and Firefox: a
// teacher starts one at /classes/new and lands on its board; a student
// joins at /join with the code and a name and lands on their own page,
// Build it open; the board shows the student's row. WebKit's driver holds
// one window at a time, so each role has a window of its own in turn, in
// a browser (or, in Firefox, a user context) of its own: the teacher's
// key travels in the board's address, as a teacher's bookmark keeps it.
func TestEngines_Class(t *testing.T) {
	t.Parallel()
	for _, eng := range engines {
		if eng.name == "chromium" {
			continue // e2e/room plays the class in Chromium, to its end
		}
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			open := eng.start(t)
			srv := e2etest.StartServer(t)
			page := func(t *testing.T, w, h int) *engineTab {
				tab := &engineTab{t: t, engine: eng.name, d: open(t, w, h), w: w, h: h}
				t.Cleanup(tab.finish)
				return tab
			}
			var boardURL, code string
			if !t.Run("teacher-starts", func(t *testing.T) {
				tab := page(t, 1280, 800)
				boardURL, code = startClass(tab, srv.URL)
				if want := code[:3] + "-" + code[3:]; len(code) != 6 || tab.Text("board-code") != want {
					t.Fatalf("the board shows the code %q; the class's is %q", tab.Text("board-code"), code)
				}
				tab.Screenshot("class-board-empty")
			}) {
				t.FailNow()
			}
			if !t.Run("student-joins", func(t *testing.T) {
				tab := page(t, 375, 800)
				tab.Navigate(srv.URL + "/join")
				tab.WaitReady()
				tab.PollState(`s.page === "join" && s.phase === "ready"`, 10*time.Second)
				setValue(tab, "class-join-code", strings.ToLower(code[:3])+"-"+code[3:])
				setValue(tab, "class-join-name", "Ada")
				tab.Click("class-join-submit")
				tab.Poll(`location.pathname.startsWith("/s/") && document.readyState === "complete" && window.fencelab && window.fencelab.ready === true`, 30*time.Second)
				tab.PollState(`s.role === "driver" && s.connection === "live" && s.build !== null`, 60*time.Second)
				if !tab.Visible("build-claim-text") {
					t.Errorf("the student's page did not arrive with Build it open")
				}
				var overflow bool
				tab.Eval(`document.documentElement.scrollWidth > innerWidth + 1`, &overflow)
				if overflow {
					t.Errorf("the student's page scrolls sideways at %d px", tab.w)
				}
				tab.Screenshot("class-student-joined")
			}) {
				t.FailNow()
			}
			t.Run("board-shows-the-student", func(t *testing.T) {
				tab := page(t, 1920, 1080)
				tab.Navigate(boardURL)
				tab.WaitReady()
				tab.Poll(`[...document.querySelectorAll('[data-testid="board-row"]')].some(r => r.querySelector('[data-testid="board-name"]').textContent === "Ada")`, 30*time.Second)
				var rows int
				tab.Eval(`document.querySelectorAll('[data-testid="board-row"]').length`, &rows)
				if rows != 1 || tab.Text("board-pass") != "0 of 1 pass" {
					t.Errorf("the board has %d rows and says %q", rows, tab.Text("board-pass"))
				}
				// The join link's QR code is drawn, for the next student.
				tab.Poll(`(() => { const qr = document.querySelector('[data-testid="board-qr"]'); return !qr.hidden && qr.complete && qr.naturalWidth > 0; })()`, 10*time.Second)
				tab.Screenshot("class-board-one-student")
			})
		})
	}
}

// setValue sets an <input>'s value and sends "input" and "change", as a
// person's typing would (as e2etest.Tab.SetValue).
func setValue(tab *engineTab, testid, value string) {
	tab.t.Helper()
	var ok bool
	tab.onElement("setValue", testid, `(el) => { el.focus(); el.value = `+e2etest.JSString(value)+`;
		el.dispatchEvent(new Event("input", {bubbles: true})); el.dispatchEvent(new Event("change", {bubbles: true}));
		return el.value === `+e2etest.JSString(value)+`; }`, &ok)
	if !ok {
		tab.t.Fatalf("e2e (%s): setValue(%q, %q): the value did not take", tab.engine, testid, value)
	}
}

// startClass opens a class as its teacher does, on the page at
// /classes/new, and returns its board's address (the teacher's key in
// it) and its code, once the board has read the class once.
func startClass(tab *engineTab, base string) (boardURL, code string) {
	tab.Navigate(base + "/classes/new")
	tab.WaitReady()
	tab.PollState(`s.page === "new-class"`, 10*time.Second)
	tab.Click("class-start")
	tab.Poll(`location.pathname.startsWith("/classes/c") && location.hash.startsWith("#token=") && document.readyState === "complete" && window.fencelab && window.fencelab.ready === true`, 30*time.Second)
	tab.PollState(`s.polls >= 1 && s.board !== null`, 30*time.Second)
	tab.Eval(`location.href`, &boardURL)
	tab.Eval(`window.fencelab.state().board.class.code`, &code)
	return boardURL, code
}
