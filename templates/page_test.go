package templates_test

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"regexp"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/templates"
	"github.com/fencelab/fencelab/web"
)

func render(t *testing.T, p templates.PageData) string {
	t.Helper()
	var b bytes.Buffer
	if err := templates.Page(p).Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func page() templates.PageData {
	return templates.PageData{Title: "t", Nonce: "n0nce", AssetBase: "/static/v1/",
		View: web.PageView(web.Setup{Ordering: experiments.NewOwnerFirst, Mode: "step", LeaseMS: 1500, PaceMS: 0,
			Broken: playground.Guards(0).Break(playground.EpochCheck), SameIdentity: true}),
		State: map[string]any{"hello": "</script><script>alert(1)</script>"}}
}

func TestPage_CarriesEveryControlTheTestsRead(t *testing.T) {
	html := render(t, page())
	var want []string
	for _, g := range playground.AllGuards() {
		want = append(want, "guard-"+g.String())
	}
	for _, s := range experiments.Styles() {
		want = append(want, "style-"+s.Name)
	}
	for _, o := range experiments.Orderings() {
		want = append(want, "outcome-"+string(o), "outcome-"+string(o)+"-call", "outcome-"+string(o)+"-commit", "outcome-"+string(o)+"-final")
		for _, g := range append([]string{"none"}, guardNames()...) {
			want = append(want, "matrix-"+string(o)+"-"+g+"-distinct", "matrix-"+string(o)+"-"+g+"-same")
		}
	}
	want = append(want, "ordering", "mode", "run", "step", "back", "reset", "lease", "pace", "skew", "same-identity", "timeline",
		"lanes", "verdict", "predict", "predict-rejected", "predict-succeeds", "predict-blocks", "predict-run", "question", "reveal", "violations",
		"compare", "compare-run", "effects", "exp-epoch-check-run", "exp-epoch-check-same-identity-run", "exp-receiver-check-run", "exp-epoch-check-answer",
		"limit-receiver-ignores", "limit-receiver-keyed", "limit-heard-effects", "limit-heard-outbox", "limit-clock-skew", "delivery-outbox",
		"matrix-run", "matrix-answer", "connection", "help", "scrub", "live-feed", "share", "share-qr", "join", "permalink",
		"exp-epoch-check-runs", "exp-epoch-check-same-identity-runs", "exp-receiver-check-runs")
	for _, id := range want {
		if !strings.Contains(html, `data-testid="`+id+`"`) {
			t.Errorf("the page lacks data-testid=%q", id)
		}
	}
}

// TestPage_SaysEveryCodeInTheLabsWords: the Scenario menu, the article's
// table and the matrix name each ordering in its words, never its code.
func TestPage_SaysEveryCodeInTheLabsWords(t *testing.T) {
	page := render(t, page())
	for _, o := range append(experiments.Orderings(), experiments.FreePlay) {
		w := experiments.OrderingWords(o)
		w.Title, w.Menu, w.Short = html.EscapeString(w.Title), html.EscapeString(w.Menu), html.EscapeString(w.Short)
		if !strings.Contains(page, `<option value="`+string(o)+`">`+w.Menu+`</option>`) && !strings.Contains(page, `<option value="`+string(o)+`" selected>`+w.Menu+`</option>`) {
			t.Errorf("the Scenario menu does not offer %s as %q", o, w.Menu)
		}
		if o == experiments.FreePlay {
			continue
		}
		if !strings.Contains(page, `<th scope="row">`+w.Title+`</th>`) {
			t.Errorf("the article's table does not name %s %q", o, w.Title)
		}
		if !strings.Contains(page, `<span class="short" aria-hidden="true">`+w.Short+`</span>`) {
			t.Errorf("the matrix does not name %s %q", o, w.Short)
		}
	}
	if strings.Contains(page, `<th scope="row">owner-done-first</th>`) || strings.Contains(page, `>owner-done-first</option>`) {
		t.Error("owner-done-first is shown as its code")
	}
}

func guardNames() []string {
	var out []string
	for _, g := range playground.AllGuards() {
		out = append(out, g.String())
	}
	return out
}

func TestPage_StartsFromTheSetup(t *testing.T) {
	html := render(t, page())
	checks := map[string]bool{
		`<option value="new-owner-first" selected>`:                    true,
		`<option value="step" selected>`:                               true,
		`value="epoch-check" data-testid="guard-epoch-check">`:         true, // unticked: broken
		`value="owner-check" data-testid="guard-owner-check" checked>`: true,
		`name="same" data-testid="same-identity" checked>`:             true,
		`name="lease" min="100" max="5000" step="100" value="1500"`:    true,
		`<option value="zombie-first" selected>`:                       false,
		`value="epoch-check" data-testid="guard-epoch-check" checked>`: false,
	}
	for frag, want := range checks {
		if got := strings.Contains(html, frag); got != want {
			t.Errorf("%q in the page: %v, want %v", frag, got, want)
		}
	}
}

// TestPage_StateScriptIsSafeAndCarriesTheNonce: the state goes to the script
// as JSON that cannot close its own <script>, with the CSP nonce.
func TestPage_StateScriptIsSafeAndCarriesTheNonce(t *testing.T) {
	html := render(t, page())
	m := regexp.MustCompile(`(?s)<script id="fencelab-state" type="application/json" nonce="n0nce">(.*?)</script>`).FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no state script with the nonce in:\n%.2000s", html)
	}
	var state map[string]string
	if err := json.Unmarshal([]byte(m[1]), &state); err != nil || state["hello"] != "</script><script>alert(1)</script>" {
		t.Fatalf("state does not round-trip: %v %v", state, err)
	}
	for _, s := range regexp.MustCompile(`<script[^>]*>`).FindAllString(html, -1) {
		if !strings.Contains(s, `nonce="n0nce"`) && !strings.Contains(s, `src="/static/`) {
			t.Errorf("a script without the nonce or a static source: %s", s)
		}
	}
	if strings.Contains(html, " style=") || strings.Contains(html, "<style") {
		t.Error("inline styles would break the CSP's style-src 'self'")
	}
}

func TestPage_Modes(t *testing.T) {
	p := page()
	p.Embed, p.Present = true, true
	p.Notice = "busy <now>"
	html := render(t, p)
	for _, frag := range []string{`<body class="embed present">`, `data-testid="notice">busy &lt;now&gt;</p>`} {
		if !strings.Contains(html, frag) {
			t.Errorf("missing %q", frag)
		}
	}
}

// The page's steps are the article's, numbered as it numbers them: 1
// Predict, 2 Build it, 3 Check it, 4 Understand, 5 Your turn, in the order
// the page reads.
func TestPage_TheStepsAreTheArticles(t *testing.T) {
	html := render(t, page())
	var got []string
	for _, m := range regexp.MustCompile(`<span class="n">(\d)</span> ([^<·]+)`).FindAllStringSubmatch(html, -1) {
		got = append(got, m[1]+" "+strings.TrimSpace(m[2]))
	}
	want := []string{"1 Predict", "2 Build it", "3 Check it", "4 Understand: run it", "5 Your turn: break one guard at a time"}
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Errorf("the page's steps are %q, want the article's %q", got, want)
	}
}
