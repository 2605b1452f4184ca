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
}

// Row is one student on the board, from their last check.
type Row struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Session is the session the student drives now: its watch link
	// (/s/SESSION, no token) shows their runs, a case's with ?run=RUN.
	Session string `json:"session,omitempty"`
	Checks  int    `json:"checks"` // how many the student has run
	// The last check: its time, whether it passed, each case's mark, the
	// first requirement it named broken (the article's order) in the
	// board's words, and the run of each case, to put on the stage.
	Checked     *time.Time              `json:"checked,omitempty"`
	Pass        *bool                   `json:"pass,omitempty"`
	Cases       []CaseMark              `json:"cases"`
	Requirement experiments.Requirement `json:"requirement,omitempty"`
	Words       string                  `json:"words,omitempty"`
}

// CaseMark is one case of a student's last check.
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
	rows, err := s.rows(ctx, c.ID)
	if err != nil {
		return Board{}, err
	}
	b := Board{Class: c, Students: []Row{}, Anonymous: anonymous, Summary: Summary{Requirements: []Named{}}}
	count := map[experiments.Requirement]int{}
	for i, r := range rows {
		row := Row{ID: r.id, Name: r.name, Session: r.session, Checks: r.checks, Cases: []CaseMark{}}
		if anonymous {
			row.Name = "Student " + strconv.Itoa(i+1)
		}
		if r.report != nil {
			at, pass := r.at, r.report.Pass
			row.Checked, row.Pass = &at, &pass
			for _, cs := range r.report.Cases {
				row.Cases = append(row.Cases, CaseMark{Case: cs.Case, Mark: protocol.CaseMark(cs.OK), Run: cs.Run})
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

func students(n int) string {
	if n == 1 {
		return "1 student"
	}
	return strconv.Itoa(n) + " students"
}

// HandIn is one student's hand-in: the statements of their last check,
// its result and its time.
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
	Solution    *sandbox.Solution       `json:"solution,omitempty"`
}

// HandIns reads every student's hand-in, in the order they joined; a
// student with no check has no solution.
func (s *Store) HandIns(ctx context.Context, classID string) ([]HandIn, error) {
	rows, err := s.rows(ctx, classID)
	if err != nil {
		return nil, err
	}
	out := make([]HandIn, 0, len(rows))
	for _, r := range rows {
		h := HandIn{Student: r.name, StudentID: r.id, Checks: r.checks}
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
	if err := cw.Write([]string{"student", "checks", "checked_at", "pass", "cases_passed", "cases", "requirement", "words", "claim", "complete", "fail", "receiver"}); err != nil {
		return err
	}
	for _, h := range hs {
		var at, pass string
		if h.Checked != nil {
			at = h.Checked.UTC().Format(time.RFC3339)
		}
		if h.Pass != nil {
			pass = strconv.FormatBool(*h.Pass)
		}
		var sol sandbox.Solution
		if h.Solution != nil {
			sol = *h.Solution
		}
		rec := []string{h.Student, strconv.Itoa(h.Checks), at, pass, strconv.Itoa(h.CasesPassed), strconv.Itoa(h.Cases), string(h.Requirement), h.Words,
			sol.Claim, sol.Complete, sol.Fail, sol.Receiver}
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

// row is one student as the tables hold them.
type row struct {
	id, name, session string
	checks            int
	at                time.Time
	solution          *sandbox.Solution
	report            *protocol.CheckReport
}

func (s *Store) rows(ctx context.Context, classID string) ([]row, error) {
	rs, err := s.pool.Query(ctx, boardSQL, classID)
	if err != nil {
		return nil, dbError("read the class's students", err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		var at *time.Time
		var pass *bool
		var sol, rep []byte
		if err := rs.Scan(&r.id, &r.name, &r.session, &at, &pass, &sol, &rep, &r.checks); err != nil {
			return nil, dbError("read the class's students", err)
		}
		if at != nil && rep != nil {
			r.at = *at
			r.report, r.solution = new(protocol.CheckReport), new(sandbox.Solution)
			if err := json.Unmarshal(rep, r.report); err != nil {
				return nil, fmt.Errorf("class: a kept report does not read: %w", err)
			}
			if err := json.Unmarshal(sol, r.solution); err != nil {
				return nil, fmt.Errorf("class: a kept solution does not read: %w", err)
			}
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, dbError("read the class's students", err)
	}
	return out, nil
}
