// Package templates renders fencelab's pages with templ: one layout, Page,
// and the components of the playground. Templates take plain data only —
// a view model (View) that the web package builds from the lab, in the
// lab's words — and never reach the lab or the database themselves: what
// the page offers and says is decided once, in Go, where it is built.
// Elements that tests read carry data-testid attributes, shared by the
// component tests and the browser tests. The first render carries the
// whole state for the script (templ.JSONScript), so the socket resumes
// exactly where it stopped.
package templates

import (
	"fmt"
	"strings"
)

// PageData is everything a page needs.
type PageData struct {
	Title     string
	Nonce     string // the CSP nonce of this response
	AssetBase string // such as /static/0123abcd/
	Embed     bool   // ?embed=1: no page chrome, for an iframe
	Present   bool   // ?present=1: big type, for a projector
	// View is what the page offers and says, with the controls set as the
	// setup asks (web.PageView builds it from the lab).
	View View
	// State is handed to the script as JSON: the session's snapshot, the
	// current run's events, the scenarios, and the token if this page drives.
	State any
	// Notice, if set, is shown above everything (e.g. the live demo is busy).
	Notice string
}

// View is the page's content as plain data, in the lab's words: the
// choices of the setup (each marked as the setup sets it), the article's
// question and table, its experiments, the guard matrix's rows and
// columns, and what fencing does not do.
type View struct {
	Setup      Setup
	Orderings  []Choice      // the Scenario menu
	Modes      []Choice      // auto, step
	Styles     []StyleChoice // the queue styles
	Guards     []GuardChoice // the guard switches; On: ticked, the guard kept
	Deliveries []Choice
	Question   string
	// QuestionSetup and QuestionAsk are Question's story and its question.
	QuestionSetup, QuestionAsk string
	Answers                    []Choice // the article's answers to its question
	Columns                    Columns  // the article's table's headers
	// Outcomes are the article's table's rows: each scripted ordering and
	// what a correct build shows for it.
	Outcomes    []OutcomeRow
	Experiments []Experiment // Step 5, in the article's order
	Matrix      Matrix
	Limits      []Limit
	Load        Load // the load lab's defaults and caps
}

// Load is what the load lab's form starts at, and its caps.
type Load struct {
	Workers, Jobs, Rounds int
	MaxWorkers, MaxJobs   int
	LeaseMS               int64
}

// Setup is what the numeric controls start at.
type Setup struct {
	SameIdentity bool
	LeaseMS      int64
	PaceMS       int64
	SkewMS       int64
}

// Choice is one option of a menu or a radio group.
type Choice struct {
	Value    string
	Label    string
	Selected bool
}

// StyleChoice is one queue style to pick.
type StyleChoice struct {
	Name, Title, Source string
	Selected            bool
}

// GuardChoice is one guard's switch.
type GuardChoice struct {
	Name, Help string
	On         bool
}

// Columns are the headers of the article's table.
type Columns struct{ Call, Commit, Final string }

// OutcomeRow is one row of the article's table, as a correct build fills it.
type OutcomeRow struct {
	Ordering, Title     string
	Call, Commit, Final string
}

// Experiment is one of Step 5's batches.
type Experiment struct{ Name, Title, Ask string }

// Matrix is the guard matrix's header and rows.
type Matrix struct {
	Orderings []MatrixOrdering
	Rows      []MatrixRow // the correct build ("none"), then each guard off
	Legend    []Sign      // what each cell's sign means
}

// Sign is a mark as the protocol's words give it: its tone (the class it
// wears), the sign, and its words.
type Sign struct{ Tone, Sign, Word string }

// MatrixOrdering is a column group of the matrix.
type MatrixOrdering struct{ Name, Title, Short string }

// MatrixRow is a row of the matrix: its key in the cells' test ids, and its label.
type MatrixRow struct{ Key, Label string }

// Limit is one thing fencing does not do, with the runs that show it.
type Limit struct {
	ID, Title, Say string
	Runs           []LimitRun
}

// LimitRun is a button that starts one run: its words and its command (JSON).
type LimitRun struct {
	ID, Button, Command string
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

func leaseSeconds(ms int64) string { return fmt.Sprintf("%.1f s", float64(ms)/1000) }

func paceSeconds(ms int64) string {
	if ms == 0 {
		return "as fast as it goes"
	}
	return fmt.Sprintf("%.1f s a step", float64(ms)/1000)
}

// Build is the article's Steps 2 and 3, Build it's body (BuildBody): the four statements
// the reader writes, each with what it may use and must give back, the
// tables they work on, and the cases "Check it" runs them through.
type Build struct {
	Editors []Editor
	Tables  []Table
	Cases   []CheckCase
	// NoCustomSQL says this server does not run readers' SQL: the editors
	// stay, the Check button is disabled.
	NoCustomSQL bool
	// MaxTextBytes is the longest statement the server takes, in bytes of
	// UTF-8: the longest a permalink carries too.
	MaxTextBytes int
}

// Editor is one statement's editor: its kind (claim, complete, fail,
// receiver), its label, the text it starts from (leases alone) and ours,
// the named parameters it may use, the table it writes, its possible
// first keywords, the columns it must return and how its result is read.
type Editor struct {
	Kind, Label string
	Start, Ours string
	Params      []Param
	Writes      string
	Verbs       []string
	Returns     []Returned
	Contract    string
}

// Param is a named parameter a statement may use, with its Postgres type.
type Param struct{ Name, Type, Doc string }

// Returned is a column a statement must return, with the types it may have.
type Returned struct {
	Name  string
	Types []string
}

// Table is a table the statements work on, with its columns and their
// Postgres types.
type Table struct {
	Name    string
	Columns []TableColumn
}

// TableColumn is one column of a table: its name and its Postgres type.
type TableColumn struct{ Name, Type string }

// CheckCase is one case a check runs: its code and its title.
type CheckCase struct{ Case, Title string }
