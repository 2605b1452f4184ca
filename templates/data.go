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

func storyWords(s lab.Story) string { return lab.StoryWords(s) }
