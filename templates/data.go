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
	Ordering     engine.Ordering
	Mode         string // auto or step
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

// orderingChoices lists the scenarios a person picks from.
func orderingChoices() []orderingChoice {
	return []orderingChoice{
		{string(engine.NewOwnerFirst), "New owner reaches the receiver first"},
		{string(engine.ZombieFirst), "Zombie reaches the receiver first"},
		{string(engine.CrashBeforeCommit), "A worker dies before its commit"},
		{string(engine.ClockSkew), "A worker's clock runs ahead"},
		{string(engine.FreePlay), "Free play"},
	}
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
	return name + " off"
}

func expectedWords(o engine.Ordering) (call, commit, final string) {
	x, ok := engine.ExpectedOutcome(o)
	if !ok {
		return "", "", ""
	}
	who := map[string]string{engine.Zombie: "the zombie's", engine.NewOwner: "the new owner's"}
	return x.ZombieReceiverCall.Words(), x.ZombieCommit.Words(), fmt.Sprintf("epoch %d, %s result in the row and at the receiver", x.Epoch, who[x.ResultFrom])
}

func leaseSeconds(ms int64) string { return fmt.Sprintf("%.1f s", float64(ms)/1000) }

func paceSeconds(ms int64) string {
	if ms == 0 {
		return "as fast as it goes"
	}
	return fmt.Sprintf("%.1f s a step", float64(ms)/1000)
}

// shortOrdering is an ordering's name for a narrow column.
func shortOrdering(o engine.Ordering) string {
	switch o {
	case engine.NewOwnerFirst:
		return "owner 1st"
	case engine.ZombieFirst:
		return "zombie 1st"
	case engine.CrashBeforeCommit:
		return "crash"
	case engine.ClockSkew:
		return "skew"
	}
	return string(o)
}
