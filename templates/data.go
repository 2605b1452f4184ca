// Package templates renders fencelab's pages with templ: one layout, Page,
// and the components of the playground. Templates take engine types and
// plain data only; they never reach the database. Elements that tests read
// carry data-testid attributes, shared by the component tests and the
// browser tests. The first render carries the whole state for the script
// (templ.JSONScript), so the socket resumes exactly where it stopped.
package templates

import (
	"fmt"
	"strings"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/lab"
)

// PageData is everything a page needs.
type PageData struct {
	Title     string
	Nonce     string // the CSP nonce of this response
	AssetBase string // such as /static/0123abcd/
	Embed     bool   // ?embed=1: no page chrome, for an iframe
	Present   bool   // ?present=1: big type, for a projector
	Setup     Setup
	// State is handed to the script as JSON: the session's snapshot, the
	// current run's events, the scenarios, and the token if this page drives.
	State any
	// Notice, if set, is shown above everything (e.g. the live demo is busy).
	Notice string
}

// Setup is what the controls start at: from the permalink, or defaults.
type Setup struct {
	Ordering     lab.Ordering
	Mode         lab.Mode // auto or step
	Broken       engine.Guards
	Style        string
	SameIdentity bool
	LeaseMS      int64
	PaceMS       int64
	SkewMS       int64
	Delivery     lab.Delivery
}

// Asset returns the versioned URL of a static file.
func (p PageData) Asset(path string) string { return p.AssetBase + path }

// BodyClass returns the classes of <body> for the page's modes.
func (p PageData) BodyClass() string {
	var c []string
	if p.Embed {
		c = append(c, "embed")
	}
	if p.Present {
		c = append(c, "present")
	}
	return strings.Join(c, " ")
}

// orderingChoice is one option of the scenario picker.
type orderingChoice struct {
	Value string
	Label string
}

// orderingChoices lists the scenarios a person picks from, in the lab's words.
func orderingChoices() []orderingChoice {
	var out []orderingChoice
	for _, o := range append(lab.Orderings(), lab.FreePlay) {
		out = append(out, orderingChoice{string(o), lab.OrderingWords(o).Menu})
	}
	return out
}

// guardRows lists the matrix's rows: the correct build, then each guard off.
func guardRows() []string {
	out := []string{"none"}
	for _, g := range engine.AllGuards() {
		out = append(out, g.String())
	}
	return out
}

func guardLabel(name string) string {
	if name == "none" {
		return "all on"
	}
	g, err := engine.ParseGuard(name)
	if err != nil {
		return name
	}
	return lab.GuardWords(g).Off
}

func expectedWords(o lab.Ordering) lab.ExpectedWords {
	x, _ := lab.ExpectedOutcome(o)
	return x.Words
}

func leaseSeconds(ms int64) string { return fmt.Sprintf("%.1f s", float64(ms)/1000) }

func paceSeconds(ms int64) string {
	if ms == 0 {
		return "as fast as it goes"
	}
	return fmt.Sprintf("%.1f s a step", float64(ms)/1000)
}

func orderingTitle(o lab.Ordering) string { return lab.OrderingWords(o).Title }

// shortOrdering is an ordering's name for a narrow column.
func shortOrdering(o lab.Ordering) string { return lab.OrderingWords(o).Short }

func columnWords(c lab.Column) string { return lab.ColumnWords(c) }

func answerWords(a lab.Answer) string { return lab.AnswerWords(a) }

func deliveryWords(d lab.Delivery) string { return lab.DeliveryWords(d) }

func batchWords(b lab.BatchName) lab.BatchText { return lab.BatchWords(b) }

// stepFive lists the article's experiments, in its order.
func stepFive() []lab.BatchName {
	return []lab.BatchName{lab.BatchEpochCheck, lab.BatchEpochCheckSameName, lab.BatchReceiverCheck}
}

// limitDemo is one thing fencing does not do, with the runs that show it.
type limitDemo struct {
	ID, Title, Say string
	Runs           []limitRun
}

// limitRun is a button that starts one run: its words and its command.
type limitRun struct {
	ID, Button, Command string
}

// limitDemos lists what fencing does not do, in the article's words, each
// with the real runs that show it.
func limitDemos() []limitDemo {
	run := func(ordering lab.Ordering, extra string) string {
		return `{"action":"run","mode":"auto","pace_ms":400,"lease_ms":800,"ordering":"` + string(ordering) + `"` + extra + `}`
	}
	return []limitDemo{
		{ID: "receiver", Title: "The receiver must cooperate",
			Say: "Fencing protects only what checks the token. A third party that ignores the epoch takes the zombie's late call over the new owner's. The article's remedy: give it a stable key it deduplicates on, and look its state up before you retry. That makes one effect per job — but when the zombie calls first, the one effect is the zombie's.",
			Runs: []limitRun{
				{ID: "ignores", Button: "Run it: a receiver that ignores the epoch", Command: run(lab.NewOwnerFirst, `,"broken":["receiver-check"]`)},
				{ID: "keyed", Button: "With the remedy: a key it deduplicates on", Command: run(lab.NewOwnerFirst, `,"delivery":"keyed"`)},
				{ID: "keyed-zombie", Button: "The same key, the zombie first", Command: run(lab.ZombieFirst, `,"delivery":"keyed"`)},
			}},
		{ID: "heard", Title: "The zombie never wins, but it may be heard",
			Say: "When the zombie reaches the receiver first, its call is accepted before the new owner's newer epoch supersedes it. If that call sent an email or moved money, it happened. The fix the article names: an outbox, written in the same transaction as the compare-and-set and delivered by a relay only after the commit.",
			Runs: []limitRun{
				{ID: "effects", Button: "Run it, and count the effects", Command: run(lab.ZombieFirst, ``)},
				{ID: "outbox", Button: "With an outbox", Command: run(lab.ZombieFirst, `,"delivery":"outbox"`)},
			}},
		{ID: "clock", Title: "The database clock is trusted",
			Say: "Leases are judged on one clock, the database's. A worker that judged by its own, running fast, would take a lease that is still live: the token cannot fix a wrong clock.",
			Runs: []limitRun{
				{ID: "skew", Button: "Run it: a worker 2 s fast, judging by its own clock", Command: run(lab.ClockSkew, `,"broken":["db-clock"],"skew_ms":2000`)},
			}},
	}
}
