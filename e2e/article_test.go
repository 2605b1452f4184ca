package e2e

// The article, played from the page: its question answered by a real run
// with leases alone, its Step 5 answered by both orderings, and what
// fencing does not do, each shown by a run. Every answer the page gives is
// checked by what a reader sees.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/e2e/e2etest"
)

// TestPredict_TheRevealComesFromARealLeasesAloneRun asks the article's
// question, runs it with leases alone, and checks the page tells a right
// pick and a wrong one apart, with what the database recorded; then runs
// the same thing fenced beside it.
func TestPredict_TheRevealComesFromARealLeasesAloneRun(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	for _, tc := range []struct {
		pick, says string
		width      int
	}{
		{"succeeds", "✓ Right.", 1280},
		{"rejected", "✗ Not this time.", 1280},
		{"succeeds", "✓ Right.", 375},
	} {
		t.Run(fmt.Sprintf("%s-%d", tc.pick, tc.width), func(t *testing.T) {
			t.Parallel()
			tab := e2etest.NewTab(t, tc.width, 800)
			e2etest.OpenLive(tab, srv.WithT(t).URL+"/")
			if got := tab.Text("question"); !strings.Contains(got, "is still working when A wakes up. With leases alone, what happens to A's commit?") {
				t.Fatalf("the question is %q", got)
			}
			// Nothing gives the answer away before the run.
			if tab.Attr("verdict", "data-state") != "none" || tab.Text("reveal") != "" || tab.Visible("compare") {
				t.Fatalf("before any run the page shows an outcome: %q / %q", tab.Text("verdict"), tab.Text("reveal"))
			}
			tab.Click("predict-" + tc.pick)
			tab.Click("predict-run")
			tab.PollJS(`document.querySelector('[data-testid="predict-result"]').textContent.includes("Running it with leases alone")`, 5*time.Second)
			tab.PollState(`s.alone !== null && s.alone !== undefined`, 60*time.Second)
			alone := tab.State()["alone"].(map[string]any)
			if alone["answer"] != "succeeds" || alone["safe"] != false || alone["ordering"] != "new-owner-first" {
				t.Fatalf("the leases-alone run: answer %v, safe %v, ordering %v", alone["answer"], alone["safe"], alone["ordering"])
			}
			got := tab.Text("predict-result")
			if !strings.Contains(got, tc.says) || !strings.Contains(got, "With leases alone: It succeeds, and A's result replaces B's") {
				t.Errorf("the prediction's result says %q, want %q", got, tc.says)
			}
			if want := map[string]string{"succeeds": "true", "rejected": "false"}[tc.pick]; tab.Attr("predict-result", "data-right") != want {
				t.Errorf("the prediction is marked right=%q, want %q", tab.Attr("predict-result", "data-right"), want)
			}
			// The reveal is the database's history: A's commit landed on B's
			// running work, and B's commit landed after it.
			reveal := tab.Text("compare-alone")
			for _, want := range []string{"Worker A's commit landed on top of worker B's work", "at epoch 2 and still running, went done with worker A's result", "completed twice"} {
				if !strings.Contains(reveal, want) {
					t.Errorf("the leases-alone side does not say %q:\n%s", want, reveal)
				}
			}
			if tab.Attr("compare-alone", "data-state") != "unsafe" {
				t.Errorf("the leases-alone side is marked %q", tab.Attr("compare-alone", "data-state"))
			}
			// The reader's answer sits beside the reveal, and both are in
			// view once the verdict has come, on a phone too.
			if said := tab.Text("compare-said"); said != got {
				t.Errorf("beside the reveal the reader's answer is %q, want %q", said, got)
			}
			inView := `(() => { const a = document.querySelector('[data-testid="compare-said"]').getBoundingClientRect(),
				u = document.querySelector('[data-testid="compare-alone"] ul').getBoundingClientRect();
				return a.top >= 0 && u.top >= 0 && u.top < innerHeight - 40 && a.bottom <= innerHeight; })()`
			deadline := time.Now().Add(5 * time.Second)
			for ok := false; !ok; time.Sleep(100 * time.Millisecond) {
				tab.Eval(inView, &ok)
				if !ok && time.Now().After(deadline) {
					var r string
					tab.Eval(`JSON.stringify({said: document.querySelector('[data-testid="compare-said"]').getBoundingClientRect(), box: document.querySelector('[data-testid="compare"]').getBoundingClientRect(), h: innerHeight, y: scrollY, max: document.documentElement.scrollHeight - innerHeight})`, &r)
					t.Fatalf("the reader's answer and the reveal are not both in view: %s", r)
				}
			}
			for _, want := range []string{"Worker A's result replaced worker B's."} {
				if !strings.Contains(tab.Text("compare-alone"), want) {
					t.Errorf("the leases-alone side does not say the article's answer, %q", want)
				}
			}
			e2etest.ViewShot(tab, fmt.Sprintf("predict-%s-%d", tc.pick, tc.width))
			// The same run, fenced, beside it.
			tab.Click("compare-run")
			tab.PollState(`s.fenced !== null && s.fenced !== undefined`, 60*time.Second)
			fenced := tab.Text("compare-fenced")
			if tab.Attr("compare-fenced", "data-state") != "safe" || !strings.Contains(fenced, "refused by the fencing token: worker A held epoch 1, the row was at epoch 2") {
				t.Errorf("the fenced side (%s) says:\n%s", tab.Attr("compare-fenced", "data-state"), fenced)
			}
			if !strings.Contains(tab.Text("compare-alone"), "landed on top") {
				t.Errorf("the fenced run replaced the leases-alone side: %s", tab.Text("compare-alone"))
			}
		})
	}
}

// TestStepFive_WhichOrderingFailsAndWhy runs the article's two experiments,
// and the same-identity one between them, from the page; each runs both
// orderings for real and ends in a sentence.
func TestStepFive_WhichOrderingFailsAndWhy(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	for _, tc := range []struct {
		batch string
		says  []string
	}{
		{"epoch-check", []string{"Neither ordering failed.", "owner check", "hid the missing epoch check", "one name"}},
		{"epoch-check-same-identity", []string{"New-owner-first failed", "Zombie-first failed", "only the token could have refused"}},
		{"receiver-check", []string{"New-owner-first failed", "Zombie-first was safe", "nothing there compared it"}},
	} {
		t.Run(tc.batch, func(t *testing.T) {
			t.Parallel()
			tab := e2etest.NewTab(t, 1280, 900)
			e2etest.OpenLive(tab, srv.WithT(t).URL+"/")
			tab.Open("experiments")
			tab.Click("exp-" + tc.batch + "-run")
			tab.PollState(`s.batches[`+e2etest.JSString(tc.batch)+`] && s.batches[`+e2etest.JSString(tc.batch)+`].phase === "finished"`, 90*time.Second)
			got := tab.Text("exp-" + tc.batch + "-answer")
			for _, want := range tc.says {
				if !strings.Contains(got, want) {
					t.Errorf("the answer to %s does not say %q:\n%s", tc.batch, want, got)
				}
			}
			tab.Screenshot("step5-" + tc.batch)

			// Each ordering in the answer is a button that puts its run on
			// the stage, in the server's words.
			runs, _ := tab.State()["batches"].(map[string]any)[tc.batch].(map[string]any)["runs"].([]any)
			if len(runs) != 2 {
				t.Fatalf("the finished %s names %d runs, want both orderings'", tc.batch, len(runs))
			}
			for _, x := range runs {
				r := x.(map[string]any)
				id, ordering, words := r["run"].(string), r["ordering"].(string), r["words"].(string)
				button := "exp-" + tc.batch + "-open-" + ordering
				if got := strings.TrimSpace(tab.Text(button)); got != words || !strings.HasPrefix(got, ordering+": ") {
					t.Errorf("the button to open %s says %q, the server %q", ordering, got, words)
				}
				if got := tab.Attr(button, "data-open-run"); got != id {
					t.Errorf("the button to open %s opens run %q, want %q", ordering, got, id)
				}
				tab.Click(button)
				tab.PollState(`s.view.run === `+e2etest.JSString(id)+` && s.view.replay === true && s.view.events > 0`, 20*time.Second)
				// The stage comes into view (and the next click waits for the
				// scroll to end, as a person's would).
				tab.PollJS(`(() => {
					const r = document.querySelector('[data-testid="stage"]').getBoundingClientRect();
					const still = window.__stageTop === r.top;
					window.__stageTop = r.top;
					return still && r.top >= -1 && r.top < innerHeight / 3 && r.bottom > innerHeight / 2;
				})()`, 10*time.Second)
			}
		})
	}
}

// TestLimits_TheOutboxMeansTheZombieIsNeverHeard runs zombie-first with a
// direct call (the zombie's call is an effect that happened) and with the
// outbox (it never happens), from the buttons under "What fencing does not
// do".
func TestLimits_TheOutboxMeansTheZombieIsNeverHeard(t *testing.T) {
	t.Parallel()
	srv := e2etest.StartServer(t)
	tab := e2etest.NewTab(t, 1280, 900)
	e2etest.OpenLive(tab, srv.URL+"/")
	tab.Open("limits")

	tab.Click("limit-heard-effects")
	tab.PollState(`s.outcome && s.outcome.delivery === "direct" && s.outcome.ordering === "zombie-first"`, 60*time.Second)
	o := tab.State()["outcome"].(map[string]any)
	if n := len(o["effects"].([]any)); n != 2 || o["zombie_receiver_call"] != "accepted_then_superseded" {
		t.Fatalf("direct delivery: %d effects, zombie's call %v; want 2 and accepted_then_superseded", n, o["zombie_receiver_call"])
	}
	if got := tab.Text("effects"); !strings.Contains(got, "2 effects") {
		t.Errorf("the effects list says %q", got)
	}

	tab.Click("limit-heard-outbox")
	tab.PollState(`s.outcome && s.outcome.delivery === "outbox"`, 60*time.Second)
	o = tab.State()["outcome"].(map[string]any)
	effects := o["effects"].([]any)
	if len(effects) != 1 || effects[0].(map[string]any)["from"] != "B" || o["zombie_receiver_call"] != "never_sent" || o["safe"] != true {
		t.Fatalf("outbox: effects %v, zombie's call %v, safe %v; want B's alone, never_sent, safe", effects, o["zombie_receiver_call"], o["safe"])
	}
	if got := tab.Text("reveal"); !strings.Contains(got, "Nothing from worker A ever reached the receiver") {
		t.Errorf("the reveal does not say the zombie was never heard:\n%s", got)
	}
	var relayed bool
	tab.Eval(`[...document.querySelectorAll('[data-testid="timeline"] li')].some(li => li.textContent.includes("relay"))`, &relayed)
	if !relayed {
		t.Errorf("the timeline shows no delivery by the relay")
	}
	tab.Screenshot("outbox-1280")
}
