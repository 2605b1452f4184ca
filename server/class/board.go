package class

import (
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/sandbox"
)

// Board is the class as the projector shows it: a row per student, and
// the class as a whole.
type Board struct {
	Class    Class `json:"class"`
	Students []Row `json:"students"`
	// Summary is how many pass, and the requirements the class's last
	// checks name most often.
	Summary Summary `json:"summary"`
	// Anonymous says the names are hidden: each row is "Student N", N in
	// the order they joined.
	Anonymous bool `json:"anonymous"`
	// Now is the database's time as the board was read: the times of the
	// rows are on its clock, so a page reads how long ago they were
	// against it, not against its own clock.
	Now time.Time `json:"now"`
}

// Row is one student on the board, from their last check and their
// history.
type Row struct {
	ID     string    `json:"id"`
	Name   string    `json:"name"`
	Joined time.Time `json:"joined"`
	// Session is the session the student drives now: its watch link
	// (/s/SESSION, no token) shows their runs, a case's with ?run=RUN.
	Session string `json:"session,omitempty"`
	Checks  int    `json:"checks"` // how many the student has run
	// The last check: its time, whether it passed, the mark of each case
	// it played and then of each probe, the first requirement it named
	// broken (the article's order) in the board's words, and the run of
	// each case, to put on the stage.
	Checked     *time.Time              `json:"checked,omitempty"`
	Pass        *bool                   `json:"pass,omitempty"`
	Cases       []CaseMark              `json:"cases"`
	Requirement experiments.Requirement `json:"requirement,omitempty"`
	Words       string                  `json:"words,omitempty"`
	// Since is when the student's checks began to name Requirement: the
	// first of the failing checks in a row, up to the last, that name
	// it first. FirstPassed is the time of their first check that passed.
	Since       *time.Time `json:"since,omitempty"`
	FirstPassed *time.Time `json:"first_passed,omitempty"`
}

// CaseMark is one case, or one probe, of a student's last check.
type CaseMark struct {
	Case experiments.CheckCase `json:"case"`
	Mark protocol.Mark         `json:"mark"`
	Run  string                `json:"run,omitempty"`
}

// Summary is the class as a whole.
type Summary struct {
	Students int `json:"students"`
	Checked  int `json:"checked"` // students with a check
	Passing  int `json:"passing"` // students whose last check passed
	// Requirements are those the last checks name broken, each with how
	// many students' last check names it: most first, then the article's
	// order.
	Requirements []Named `json:"requirements"`
}

// Named is one requirement and the students whose last check names it.
type Named struct {
	Requirement experiments.Requirement `json:"requirement"`
	Students    int                     `json:"students"`
	Words       string                  `json:"words"` // "9 students: your complete does not compare the epoch"
}

// Board reads the class's board. anonymous hides the names.
func (s *Store) Board(ctx context.Context, c Class, anonymous bool) (Board, error) {
	rows, now, err := s.rows(ctx, c.ID)
	if err != nil {
		return Board{}, err
	}
	b := Board{Class: c, Students: []Row{}, Anonymous: anonymous, Summary: Summary{Requirements: []Named{}}, Now: now}
	count := map[experiments.Requirement]int{}
	for i, r := range rows {
		row := Row{ID: r.id, Name: r.name, Joined: r.joined, Session: r.session, Checks: len(r.history), Cases: []CaseMark{}}
		if anonymous {
			row.Name = anonymousName(i)
		}
		row.Since, row.FirstPassed = r.since(), r.firstPassed()
		if r.report != nil {
			at, pass := r.at, r.report.Pass
			row.Checked, row.Pass = &at, &pass
			for _, cs := range r.report.Cases {
				row.Cases = append(row.Cases, CaseMark{Case: cs.Case, Mark: protocol.CaseMark(cs.OK), Run: cs.Run})
			}
			for _, p := range r.report.Probes {
				row.Cases = append(row.Cases, CaseMark{Case: p.Case, Mark: protocol.CaseMark(p.OK)})
			}
			seen := map[experiments.Requirement]bool{}
			for _, br := range r.report.Broken {
				if row.Requirement == "" { // the requirement in the board's own words, not the case's sentence
					row.Requirement, row.Words = br.Requirement, protocol.RequirementWords(br.Requirement)
				}
				if !seen[br.Requirement] {
					seen[br.Requirement] = true
					count[br.Requirement]++
				}
			}
			b.Summary.Checked++
			if pass {
				b.Summary.Passing++
			}
		}
		b.Students = append(b.Students, row)
	}
	b.Summary.Students = len(rows)
	for _, q := range experiments.RequirementOrder {
		if n := count[q]; n > 0 {
			b.Summary.Requirements = append(b.Summary.Requirements, Named{Requirement: q, Students: n, Words: fmt.Sprintf("%s: %s", students(n), protocol.RequirementWords(q))})
		}
	}
	slices.SortStableFunc(b.Summary.Requirements, func(a, b Named) int { return cmp.Compare(b.Students, a.Students) })
	return b, nil
}

// anonymousName is the i-th student's name (from 0) while names are
// hidden: "Student 1" for the first to join.
func anonymousName(i int) string { return "Student " + strconv.Itoa(i+1) }

func students(n int) string {
	if n == 1 {
		return "1 student"
	}
	return strconv.Itoa(n) + " students"
}

// HandIn is one student's hand-in: the statements of their last check,
// its result and its time, and every check they ran.
type HandIn struct {
	Student     string                  `json:"student"`
	StudentID   string                  `json:"student_id"`
	Checks      int                     `json:"checks"`
	Checked     *time.Time              `json:"checked,omitempty"`
	Pass        *bool                   `json:"pass,omitempty"`
	CasesPassed int                     `json:"cases_passed"`
	Cases       int                     `json:"cases"`
	Requirement experiments.Requirement `json:"requirement,omitempty"`
	Words       string                  `json:"words,omitempty"`
	// Since and FirstPassed are the board's (Row).
	Since       *time.Time        `json:"since,omitempty"`
	FirstPassed *time.Time        `json:"first_passed,omitempty"`
	Solution    *sandbox.Solution `json:"solution,omitempty"`
	// History is every check the student ran, oldest first.
	History []Attempt `json:"history"`
}

// Attempt is one check in a student's history: when, whether it passed,
// and the first requirement it named broken.
type Attempt struct {
	At          time.Time               `json:"at"`
	Pass        bool                    `json:"pass"`
	Requirement experiments.Requirement `json:"requirement,omitempty"`
}

// HandIns reads every student's hand-in, in the order they joined; a
// student with no check has no solution. anonymous names each "Student
// N", as the board does while names are hidden.
func (s *Store) HandIns(ctx context.Context, classID string, anonymous bool) ([]HandIn, error) {
	rows, _, err := s.rows(ctx, classID)
	if err != nil {
		return nil, err
	}
	out := make([]HandIn, 0, len(rows))
	for i, r := range rows {
		h := HandIn{Student: r.name, StudentID: r.id, Checks: len(r.history), History: r.history, Since: r.since(), FirstPassed: r.firstPassed()}
		if anonymous {
			h.Student = anonymousName(i)
		}
		if h.History == nil {
			h.History = []Attempt{}
		}
		if r.report != nil {
			at, pass := r.at, r.report.Pass
			h.Checked, h.Pass, h.Solution = &at, &pass, r.solution
			h.Cases = len(r.report.Cases)
			h.CasesPassed = len(r.report.Cases) - protocol.FailedCases(r.report.Cases)
			if len(r.report.Broken) > 0 {
				h.Requirement, h.Words = r.report.Broken[0].Requirement, r.report.Broken[0].Words
			}
		}
		out = append(out, h)
	}
	return out, nil
}

// WriteCSV writes hand-ins as CSV, one row per student, with a header. A
// cell that a spreadsheet would read as a formula (it starts with =, +,
// -, @, a tab or a carriage return: a name, or a statement that opens with
// a -- comment) is written with a ' before it; the JSON export has every
// text exactly.
func WriteCSV(w io.Writer, hs []HandIn) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"student", "checks", "checked_at", "pass", "cases_passed", "cases", "requirement", "words", "since", "first_passed", "claim", "complete", "fail", "receiver"}); err != nil {
		return err
	}
	stamp := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, h := range hs {
		var pass string
		if h.Pass != nil {
			pass = strconv.FormatBool(*h.Pass)
		}
		var sol sandbox.Solution
		if h.Solution != nil {
			sol = *h.Solution
		}
		rec := []string{h.Student, strconv.Itoa(h.Checks), stamp(h.Checked), pass, strconv.Itoa(h.CasesPassed), strconv.Itoa(h.Cases), string(h.Requirement), h.Words,
			stamp(h.Since), stamp(h.FirstPassed), sol.Claim, sol.Complete, sol.Fail, sol.Receiver}
		for i, v := range rec {
			rec[i] = cell(v)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func cell(v string) string {
	if v != "" && strings.ContainsRune("=+-@\t\r", rune(v[0])) {
		return "'" + v
	}
	return v
}

// row is one student as the tables hold them: their last check, and
// every check they ran.
type row struct {
	id, name, session string
	joined            time.Time
	at                time.Time
	solution          *sandbox.Solution
	report            *protocol.CheckReport
	history           []Attempt
}

// since is when the student's checks began to name what their last one
// names first: the first of the failing checks in a row, up to the last,
// naming it. nil when the last check passed, or there is none.
func (r row) since() *time.Time {
	n := len(r.history)
	if n == 0 || r.history[n-1].Pass {
		return nil
	}
	q, i := r.history[n-1].Requirement, n-1
	for i > 0 && !r.history[i-1].Pass && r.history[i-1].Requirement == q {
		i--
	}
	at := r.history[i].At
	return &at
}

// firstPassed is the time of the student's first check that passed.
func (r row) firstPassed() *time.Time {
	for _, a := range r.history {
		if a.Pass {
			at := a.At
			return &at
		}
	}
	return nil
}

// rows reads a class's students, in the order they joined, with their
// last check and their history, and the database's time as it read them.
func (s *Store) rows(ctx context.Context, classID string) ([]row, time.Time, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return nil, time.Time{}, dbError("read the class's students", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only: nothing to undo
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, time.Time{}, dbError("read the class's students", err)
	}
	rs, err := tx.Query(ctx, boardSQL, classID)
	if err != nil {
		return nil, time.Time{}, dbError("read the class's students", err)
	}
	var out []row
	index := map[string]int{}
	for rs.Next() {
		var r row
		var at *time.Time
		var sol, rep []byte
		if err := rs.Scan(&r.id, &r.name, &r.joined, &r.session, &at, &sol, &rep); err != nil {
			rs.Close()
			return nil, time.Time{}, dbError("read the class's students", err)
		}
		if at != nil && rep != nil {
			r.at = *at
			r.report, r.solution = new(protocol.CheckReport), new(sandbox.Solution)
			if err := json.Unmarshal(rep, r.report); err != nil {
				rs.Close()
				return nil, time.Time{}, fmt.Errorf("class: a kept report does not read: %w", err)
			}
			if err := json.Unmarshal(sol, r.solution); err != nil {
				rs.Close()
				return nil, time.Time{}, fmt.Errorf("class: a kept solution does not read: %w", err)
			}
		}
		index[r.id] = len(out)
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, time.Time{}, dbError("read the class's students", err)
	}
	hs, err := tx.Query(ctx, historySQL, classID)
	if err != nil {
		return nil, time.Time{}, dbError("read the class's checks", err)
	}
	defer hs.Close()
	for hs.Next() {
		var student string
		var a Attempt
		var q string
		if err := hs.Scan(&student, &a.At, &a.Pass, &q); err != nil {
			return nil, time.Time{}, dbError("read the class's checks", err)
		}
		a.Requirement = experiments.Requirement(q)
		if i, ok := index[student]; ok {
			out[i].history = append(out[i].history, a)
		}
	}
	if err := hs.Err(); err != nil {
		return nil, time.Time{}, dbError("read the class's checks", err)
	}
	return out, now, nil
}
