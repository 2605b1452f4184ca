package room

// The room and the reader: a lesson played to its end on a projector with
// its stage in view at every step, the article's order on every width, a
// label beside Run that says what Run runs, and a small, steady embed.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

// stageBoxJS measures, in page coordinates with the page unscrolled, what
// a projector must show without a mouse: the lanes, the newest event of
// the timeline and the verdict, and the lesson panel.
const stageBoxJS = `(() => {
  const q = (id) => document.querySelector('[data-testid="' + id + '"]');
  const box = (el) => { if (!el) return null; const r = el.getBoundingClientRect(); return r.width || r.height ? { top: r.top + scrollY, bottom: r.bottom + scrollY } : null; };
  const tl = q("timeline");
  const items = [...tl.querySelectorAll(":scope > li")].filter((li) => li.offsetParent !== null);
  const last = items[items.length - 1];
  let lastBox = null;
  if (last) {
    const r = last.getBoundingClientRect(), t = tl.getBoundingClientRect();
    // Inside the timeline's own scrolling box, and that box on the page.
    lastBox = { top: r.top + scrollY, bottom: Math.min(r.bottom, t.bottom) + scrollY, inBox: r.bottom <= t.bottom + 1 && r.top >= t.top - 1,
      why: "li " + Math.round(r.top) + ".." + Math.round(r.bottom) + " in box " + Math.round(t.top) + ".." + Math.round(t.bottom) + ", scroll " + tl.scrollTop + "+" + tl.clientHeight + " of " + tl.scrollHeight + ", li " + last.className };
  }
  const v = q("verdict");
  return { scrollY, lanes: q("lanes").childElementCount ? box(q("lanes")) : null, last: lastBox,
    verdict: v.dataset.state !== "none" ? box(v) : null, lesson: box(q("lesson")), viewport: innerHeight };
})()`

type box struct {
	Top, Bottom float64
	InBox       bool
	Why         string
}

type stageBoxes struct {
	ScrollY  float64
	Lanes    *box
	Last     *box
	Verdict  *box
	Lesson   *box
	Viewport float64
}

// checkStageInView fails the test when what the room must see is below
// the first screen.
func checkStageInView(t *testing.T, tab *e2etest.Tab, where string) {
	t.Helper()
	var b stageBoxes
	tab.Eval(stageBoxJS, &b)
	limit := b.Viewport
	bad := func(name string, x *box) {
		if x != nil && x.Bottom > limit+0.5 {
			t.Errorf("%s: %s ends at %.0f px, below the first %0.f px", where, name, x.Bottom, limit)
		}
	}
	if b.ScrollY != 0 {
		t.Errorf("%s: the page scrolled to %.0f px", where, b.ScrollY)
	}
	bad("the lesson panel", b.Lesson)
	bad("the lanes", b.Lanes)
	bad("the verdict", b.Verdict)
	if b.Last != nil {
		bad("the newest event", b.Last)
		if !b.Last.InBox {
			t.Errorf("%s: the newest event is scrolled out of the timeline (%s)", where, b.Last.Why)
		}
	}
}

// TestLesson_PlaysToItsLastChapter plays the guided lesson on a 1920×1080
// projector from its first chapter to its last step, by PageDown alone:
// every chapter ends on its own events (the batches too), every step says
// one sentence, and the stage — the lanes, the newest event and, when a
// run has ended, the verdict — is inside the first screen at every step.
func TestLesson_PlaysToItsLastChapter(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1920, 1080)
	tab.Navigate(srv.URL + "/?lesson=predict&present=1")
	tab.WaitReady()
	tab.PollState(`s.connection === "live" && s.lesson && s.lesson.chapter === "predict" && s.lesson.index === -1`, 30*time.Second)
	var joinBefore float64
	tab.Eval(`document.querySelector('[data-testid="join"]').getBoundingClientRect().height`, &joinBefore)
	tab.Click("predict-succeeds") // the class's pick
	chapter, presses := "", 0
	for {
		var st map[string]any
		tab.Eval(`window.fencelab.state().lesson`, &st)
		if st["atEnd"] == true {
			break
		}
		if presses++; presses > 60 {
			t.Fatalf("the lesson did not end after 60 steps: %v", st)
		}
		ci, idx := int(st["chapterIndex"].(float64)), int(st["index"].(float64))
		tab.Press("PageDown")
		// The next step, or the next chapter's title: either way, ready.
		tab.PollState(fmt.Sprintf(`s.lesson.ready && !s.lesson.busy && (s.lesson.chapterIndex > %d || s.lesson.index > %d)`, ci, idx), 90*time.Second)
		tab.Eval(`window.fencelab.state().lesson`, &st)
		where := fmt.Sprintf("chapter %v step %v", st["chapter"], st["index"])
		text := st["text"].(string)
		if n := sentences(text); n != 1 {
			t.Errorf("%s says %d sentences: %q", where, n, text)
		}
		if note, _ := st["note"].(string); strings.Contains(note, "\n") || len(note) > 600 {
			t.Errorf("%s: the note runs on: %q", where, note)
		}
		// Let the page draw the step's events before measuring.
		tab.PollJS(`new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, 5*time.Second)
		checkStageInView(t, tab, where)
		if c := st["chapter"].(string); c != chapter || st["atEnd"] == true {
			if chapter != "" {
				e2etest.ViewShot(tab, "lesson-1920-"+chapter)
			}
			chapter = c
		}
	}
	e2etest.ViewShot(tab, "lesson-1920-"+chapter+"-end")
	st := tab.State()
	l := st["lesson"].(map[string]any)
	if l["chapter"] != "limits" || l["chapterIndex"].(float64) != l["chapters"].(float64)-1 {
		t.Fatalf("the lesson ended at %v", l)
	}
	if !tab.Visible("lesson-end") {
		t.Error("the last step does not say the lesson has ended")
	}
	if tab.Visible("back-live") {
		t.Error("the last chapter's own run is live, yet the stage offers Back to live (left from a batch's run)")
	}
	// The class has joined: the QR code waits in a corner, small.
	var join map[string]float64
	tab.Eval(`(() => { const r = document.querySelector('[data-testid="join"]').getBoundingClientRect(); return { w: r.width, h: r.height, top: r.top, right: innerWidth - r.right }; })()`, &join)
	if join["h"] > 120 || join["w"] > 120 || join["top"] > 20 || join["right"] > 20 {
		t.Errorf("once the class has started the QR code is %.0f×%.0f px at %.0f px from the top, %.0f from the right; before, %.0f px tall", join["w"], join["h"], join["top"], join["right"], joinBefore)
	}
	// Each of the lesson's waits ended on a real event, and the last
	// chapter's last run ended with its verdict on the stage.
	if o, _ := st["outcome"].(map[string]any); o == nil || o["ordering"] != "clock-skew" {
		t.Errorf("the last chapter's run is not on the stage: %v", st["outcome"])
	}
	t.Logf("the lesson played to its end in %d steps", presses)
}

// sentences counts the sentences of a lesson step's words: each ends with
// a full stop, a question or an exclamation mark and a space or the end.
func sentences(s string) int {
	n := 0
	for i, r := range s {
		if r != '.' && r != '?' && r != '!' {
			continue
		}
		if i+1 == len(s) || s[i+1] == ' ' {
			// "A." and "2 s." are sentences; "e.g." is not one we write.
			n++
		}
	}
	return n
}

// TestLesson_BreakAGuardShowsItsRuns: in the chapter that breaks one guard
// at a time, each batch's end goes on at once (it no longer hangs) and puts
// its telling run on the stage, in view.
func TestLesson_BreakAGuardShowsItsRuns(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1920, 1080)
	tab.Navigate(srv.URL + "/?lesson=break-a-guard&present=1")
	tab.WaitReady()
	tab.PollState(`s.connection === "live" && s.lesson && s.lesson.chapter === "break-a-guard" && s.lesson.index === -1`, 30*time.Second)
	tab.Press("PageDown")
	tab.PollState(`s.lesson.index === 0 && s.lesson.waiting !== ""`, 10*time.Second)
	tab.PollState(`s.lesson.ready && s.lesson.note !== ""`, 60*time.Second)
	tab.PollState(`s.view.replay === true && s.view.events > 0`, 30*time.Second)
	checkStageInView(t, tab, "after the first batch")
	tab.Press("PageDown")
	tab.PollState(`s.lesson.index === 1 && s.lesson.ready && s.lesson.note !== ""`, 60*time.Second)
	var unsafe []string
	tab.Eval(`window.fencelab.state().batches["epoch-check-same-identity"].unsafe`, &unsafe)
	if len(unsafe) == 0 {
		t.Fatal("with one name and no epoch check, no run was unsafe")
	}
	tab.PollState(fmt.Sprintf(`s.view.replay === true && s.view.run === %s`, e2etest.JSString(unsafe[0])), 30*time.Second)
	tab.Screenshot("lesson-1920-break-a-guard-same-identity")
}

// TestOrder_PredictComesFirst: on a laptop and on a phone the reader meets
// Predict (1) before Run it (2) before What happened (3): each starts below
// the one before it, or on the same row to its right.
func TestOrder_PredictComesFirst(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	for _, size := range [][2]int{{1280, 800}, {375, 667}, {1920, 1080}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			tab := e2etest.NewTab(t, size[0], size[1])
			e2etest.OpenLive(tab, srv.WithT(t).URL+"/")
			var b []map[string]float64
			tab.Eval(`["predict", "stage", "outcome"].map((id) => { const r = document.querySelector('[data-testid="' + id + '"]').getBoundingClientRect(); return { top: r.top, left: r.left, bottom: r.bottom }; })`, &b)
			for i := 1; i < len(b); i++ {
				p, c := b[i-1], b[i]
				before := p["bottom"] <= c["top"]+1 || (p["top"] == c["top"] && p["left"] < c["left"])
				if !before {
					t.Errorf("section %d is not read before section %d: %v then %v", i, i+1, p, c)
				}
			}
			e2etest.ViewShot(tab, fmt.Sprintf("order-%d", size[0]))
		})
	}
}

// TestPredict_TheRunComesIntoView: on a phone, "Run it with leases alone"
// brings the stage into view, so the reader watches the run, not a line
// that says it is running.
func TestPredict_TheRunComesIntoView(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 375, 667)
	e2etest.OpenLive(tab, srv.URL+"/")
	tab.Click("predict-succeeds")
	tab.Click("predict-run")
	tab.PollState(`s.run && s.workers.length === 2`, 30*time.Second)
	tab.PollJS(`(() => { const r = document.querySelector('[data-testid="lanes"]').getBoundingClientRect(); return r.top >= 0 && r.top < innerHeight * 0.7; })()`, 10*time.Second)
	tab.PollState(`s.alone !== null`, 60*time.Second)
}

// TestRunLabel_SaysWhatRunRunsNext: the words beside Run name the run that
// Run will start, not the last one.
func TestRunLabel_SaysWhatRunRunsNext(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 800)
	e2etest.RunFromPage(t, srv, tab, "ordering=new-owner-first&mode=auto&lease=300&pace=0")
	tab.PollState(`s.run && s.run.ended`, 30*time.Second)
	tab.Open("more")
	tab.SetValue("ordering", "zombie-first")
	label := tab.Text("setup-now")
	var next map[string]any
	if err := json.Unmarshal([]byte(tab.Attr("setup-now", "data-next")), &next); err != nil {
		t.Fatalf("setup-now's data-next: %v", err)
	}
	if next["ordering"] != "zombie-first" {
		t.Fatalf("the label's next run is %v", next)
	}
	tab.Click("run")
	tab.PollState(`s.run && s.run.ordering === "zombie-first"`, 30*time.Second)
	var words map[string]any
	tab.Eval(`window.fencelab.state()`, &words)
	_ = words
	if !strings.HasPrefix(label, "Run next:") || !strings.Contains(label, lessonOrderingTitle(t, tab, "zombie-first")) {
		t.Errorf("beside Run: %q, but Run ran zombie-first", label)
	}
}

// lessonOrderingTitle is an ordering's title in the page's word table.
func lessonOrderingTitle(t *testing.T, tab *e2etest.Tab, o string) string {
	t.Helper()
	var title string
	tab.Eval(`JSON.parse(document.getElementById("fencelab-state").textContent).scenarios.words.orderings[`+e2etest.JSString(o)+`].title`, &title)
	if title == "" {
		t.Fatalf("no title for %s", o)
	}
	return title
}

// embedHost serves a blog page on another origin with the embed snippet as
// the Share dialog gives it (its script resizes the frame), in a column of
// the given width, and counts the frame's height messages.
func embedHost(srvURL, query string, width int) string {
	return fmt.Sprintf(`<!doctype html><html lang="en"><head><meta name="viewport" content="width=device-width, initial-scale=1"><title>A blog post</title>
	<style>body{margin:0;font:16px sans-serif} main{width:%dpx}</style></head><body><main>
	<h1>Fencing tokens</h1><p>Try it:</p>
	<iframe src="%s/?embed=1&%s" title="fencelab" width="100%%" height="560" style="border:0;max-width:720px" loading="lazy"></iframe>
	<p>The end.</p></main>
	<script>
	  window.heights = [];
	  addEventListener("message", (e) => {
	    if (e.origin !== %q || !e.data || e.data.source !== "fencelab") return;
	    if (e.data.type === "height") { window.heights.push(e.data.height); document.querySelector("iframe").style.height = e.data.height + "px"; }
	    if (e.data.type === "verdict") window.verdict = e.data;
	  });
	  window.run = (m) => document.querySelector("iframe").contentWindow.postMessage(Object.assign({type: "run"}, m), %q);
	</script></body></html>`, width, srvURL, query, srvURL, srvURL)
}

// TestEmbed_SmallAndSteady: the embed as pasted, in a 375 px phone column
// and a 343 px one, stays within 1,000 px before, during and after a run,
// with its verdict's headline whole inside; it tells its host its height
// seldom (at most once a frame, only for a change of 8 px or more, fewer
// than 10 times in a run) and never shrinks while the run plays, so the
// article under the reader moves one way only. Build it, which a phone's
// embed has no room for, is a link to the full page opened at Build it.
func TestEmbed_SmallAndSteady(t *testing.T) {
	t.Parallel()
	for _, width := range []int{375, 343} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			t.Parallel()
			blogLn := e2etest.ListenLocal(t)
			blog := "http://" + blogLn.Addr().String()
			srv := e2etest.StartServer(t, "--allow-origin", blog)
			e2etest.ServeOn(t, blogLn, embedHost(srv.URL, "ordering=new-owner-first&lease=300&pace=0", width))

			tab := e2etest.NewTab(t, width, 667)
			tab.Navigate(blog + "/")
			tab.PollJS(`window.heights && window.heights.length > 0`, 30*time.Second)
			var before int
			tab.Eval(`window.heights.length`, &before)
			tab.Eval(`window.run({ordering: "zombie-first", mode: "auto", lease_ms: 800, pace_ms: 500}); true`, nil)
			tab.PollJS(`!!window.verdict`, 60*time.Second)
			var atVerdict int
			tab.Eval(`window.heights.length`, &atVerdict)
			// Let the frame settle: the last height message comes within a frame or two.
			tab.PollJS(`new Promise((r) => setTimeout(() => r(true), 1500))`, 5*time.Second)
			var hs []float64
			tab.Eval(`window.heights`, &hs)
			during := hs[before:]
			if len(during) >= 10 {
				t.Errorf("%d height messages in one run (want fewer than 10): %v", len(during), during)
			}
			for i := 1; i < len(hs); i++ {
				if d := hs[i] - hs[i-1]; d > -8 && d < 8 {
					t.Errorf("a height message for a change of %.0f px (%v → %v)", d, hs[i-1], hs[i])
				}
				if i > before && i < atVerdict && hs[i] < hs[i-1] {
					t.Errorf("the frame shrank during the run, %v → %v: %v", hs[i-1], hs[i], hs)
				}
			}
			for _, h := range hs {
				if h > 1000 {
					t.Errorf("the embed asked for %.0f px at %d px (at most 1,000): %v", h, width, hs)
					break
				}
			}
			// The embed's page itself, as the frame shows it: the verdict's
			// headline is whole in the timeline's box (its card starts inside
			// it, not above its top), and Build it is a link.
			page := e2etest.NewTab(t, width, 667)
			e2etest.OpenLive(page, srv.URL+"/?embed=1&ordering=zombie-first&lease=800&pace=500")
			page.Click("run")
			page.PollState(`s.run && s.run.ended && s.outcome`, 60*time.Second)
			page.PollJS(`new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, 5*time.Second)
			// The run's verdict card, whether or not a worker's exit landed
			// after it (a busy machine reports the exit last).
			verdictCard := `(() => { const tl = document.querySelector('[data-testid="timeline"]'), vs = tl.querySelectorAll(":scope > .k-verdict");
			  return [tl, vs.length ? vs[vs.length - 1] : null]; })()`
			var cut float64
			page.Eval(`(() => { const [tl, v] = `+verdictCard+`;
			  return v ? v.getBoundingClientRect().top - tl.getBoundingClientRect().top : -999; })()`, &cut)
			if cut == -999 {
				t.Error("the timeline has no verdict card")
			} else if cut < -1 {
				t.Errorf("the verdict's card starts %.0f px above the timeline's top: its headline is cut", -cut)
			}
			var below float64
			page.Eval(`(() => { const [tl, v] = `+verdictCard+`;
			  return v ? v.getBoundingClientRect().bottom - tl.getBoundingClientRect().bottom : 0; })()`, &below)
			if below > 1 {
				t.Errorf("the verdict's card ends %.0f px below the timeline's bottom: its headline is cut", below)
			}
			if !page.Visible("build-open") || !strings.Contains(page.Attr("build-open", "href"), "#build") || strings.Contains(page.Attr("build-open", "href"), "embed=1") {
				t.Errorf("Build it at %d px: link %q (visible %v), want a visible link to the full page at #build", width, page.Attr("build-open", "href"), page.Visible("build-open"))
			}
			page.Screenshot(fmt.Sprintf("embed-%d-page-after-run", width))
			tab.Screenshot(fmt.Sprintf("embed-%d-after-run", width))
			t.Logf("height messages: %v", hs)
		})
	}
}

// TestEmbed_PredictInsideAfterItsRun opens the embed's page at 375 px, as
// the frame shows it, and plays the Predict run: the page stays within
// 1,000 px with the verdict and the Predict result inside, and the question
// can still be answered.
func TestEmbed_PredictInsideAfterItsRun(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 375, 667)
	e2etest.OpenLive(tab, srv.URL+"/?embed=1&ordering=new-owner-first&lease=300&pace=0")
	tab.Click("predict-succeeds")
	tab.Click("predict-run")
	tab.PollState(`s.alone !== null`, 60*time.Second)
	tab.PollJS(`new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, 5*time.Second)
	measure := func(where string) {
		var m map[string]float64
		tab.Eval(`(() => {
		  const q = (id) => document.querySelector('[data-testid="' + id + '"]');
		  const b = (el) => el.getBoundingClientRect().bottom + scrollY;
		  const v = document.querySelector('[data-testid="timeline"] li.k-verdict:last-of-type') || q("verdict");
		  return { body: document.body.getBoundingClientRect().height, result: b(q("predict-result")), verdict: b(v) };
		})()`, &m)
		if m["body"] > 1000 {
			t.Errorf("%s: the embed is %.0f px tall at 375 px (at most 1,000)", where, m["body"])
		}
		if m["result"] > 1000 || m["verdict"] > 1000 {
			t.Errorf("%s: the Predict result ends at %.0f px and the verdict at %.0f px (within 1,000)", where, m["result"], m["verdict"])
		}
	}
	measure("after the Predict run")
	if !tab.Visible("predict-rejected") {
		t.Error("after its run, the Predict question can no longer be answered")
	}
	tab.Screenshot("embed-375-after-predict")
	tab.Click("predict-rejected")
	if txt := tab.Text("predict-result"); !strings.Contains(txt, "✗") && !strings.Contains(strings.ToLower(txt), "not") {
		t.Logf("predict result after changing the answer: %q", txt)
	}
	tab.Click("run")
	tab.PollState(`s.run && s.run.ended && s.outcome`, 60*time.Second)
	tab.PollJS(`new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, 5*time.Second)
	measure("after Run")
	tab.Screenshot("embed-375-after-run-direct")
}

// TestShare_ThePresenterPicksTheQRAddress: when the machine has more than
// one address a class might reach, the Share dialog offers them beside the
// QR code, the default route's first; picking another redraws the code and
// the link with it, and the pick is kept for the next visit. The list is
// the server's (the page's boot state); here it is given two addresses, as
// a laptop on a Wi-Fi and a VPN would have, since a test machine has one.
// Which addresses the server lists and accepts is web's tests' business.
func TestShare_ThePresenterPicksTheQRAddress(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 800, e2etest.AllowErrors("qr.svg", "400"))
	script := `document.addEventListener("readystatechange", () => {
	  if (document.readyState !== "interactive") return;
	  const el = document.getElementById("fencelab-state");
	  const st = JSON.parse(el.textContent);
	  const id = st.session.id;
	  st.reachable = true;
	  st.watch_url = "http://192.168.1.23:8080/s/" + id;
	  st.addresses = [
	    { name: "wlan0", ip: "192.168.1.23", url: "http://192.168.1.23:8080/s/" + id, default: true },
	    { name: "tun0", ip: "10.8.0.5", url: "http://10.8.0.5:8080/s/" + id, default: false },
	  ];
	  el.textContent = JSON.stringify(st);
	});`
	if err := tab.Do(e2etest.DefaultTimeout, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: script})
		return err
	})); err != nil {
		t.Fatal(err)
	}
	check := func(ip string) {
		t.Helper()
		tab.Click("share")
		tab.WaitVisible("share-addr")
		tab.PollJS(`document.querySelector('[data-testid="share-addr"]').value === `+e2etest.JSString(ip), 5*time.Second)
		src := tab.Attr("share-qr", "src")
		if ip == "192.168.1.23" && strings.Contains(src, "addr=") || ip != "192.168.1.23" && !strings.Contains(src, "addr="+ip) {
			t.Errorf("with %s picked the QR code is %s", ip, src)
		}
		if note := tab.Text("share-qr-note"); !strings.Contains(note, "http://"+ip+":8080/s/") {
			t.Errorf("with %s picked the note says %q", ip, note)
		}
	}
	e2etest.OpenLive(tab, srv.URL+"/")
	var n int
	tab.Eval(`JSON.parse(document.getElementById("fencelab-state").textContent).addresses.length`, &n)
	if n != 2 {
		t.Fatalf("the boot state was not given two addresses (%d)", n)
	}
	check("192.168.1.23")
	tab.SetValue("share-addr", "10.8.0.5")
	check("10.8.0.5")
	e2etest.ViewShot(tab, "share-1280-qr-picker")
	tab.Press("Escape")
	e2etest.OpenLive(tab, srv.URL+"/")
	check("10.8.0.5")
}
