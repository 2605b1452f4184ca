package check

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// WriteJUnit writes a report as JUnit XML, for a course's CI to grade
// hand-ins in its own pipeline: one test case per case of the check, the
// runs in the order they played, then the probes played (probes: the
// cases a report names only when they find something broken, so the
// caller says which ran). A case that does not end as the article's table
// says is a failure, its message the first requirement it shows broken
// and its text the cells that differ; a run that did not reach its end is
// an error. The suite passes exactly when the report does: a report that
// fails on a requirement no case is named for still fails a test case.
// What fencelab asks beyond the article is a note in its probe's output.
func WriteJUnit(w io.Writer, rep protocol.CheckReport, probes []experiments.CheckCase) error {
	suite := junitSuite{Name: "fencelab check"}
	named := map[experiments.CheckCase]bool{}
	brokenBy := map[experiments.CheckCase][]experiments.CheckBroken{}
	for _, b := range rep.Broken {
		brokenBy[b.Case] = append(brokenBy[b.Case], b)
	}
	for _, c := range rep.Cases {
		named[c.Case] = true
		tc := junitCase{Name: string(c.Case), Classname: "fencelab.check"}
		var text strings.Builder
		for _, cell := range c.Table {
			if !cell.AsCorrect {
				fmt.Fprintf(&text, "%s: %s (the article: %s)\n", protocol.ColumnWords(cell.Column), cell.Words, cell.Expected)
			}
		}
		for _, b := range append(c.Broken, brokenBy[c.Case]...) {
			fmt.Fprintf(&text, "broken: %s\n", b.Words)
		}
		switch {
		case c.Error != nil:
			tc.Error = &junitFailure{Type: string(c.Error.Code), Message: c.Title + ": could not run to its end: " + c.Error.Message, Text: text.String()}
		case !c.OK:
			tc.Failure = &junitFailure{Type: string(protocol.MarkNotAsCorrect), Message: firstWords(c.Broken, brokenBy[c.Case], c.Title+": it does not end as the article's table says"), Text: text.String()}
		}
		if len(c.Notes) > 0 {
			tc.Out = strings.Join(c.Notes, "\n")
		}
		suite.add(tc)
	}
	for _, p := range probes {
		if named[p] {
			continue
		}
		named[p] = true
		tc := junitCase{Name: string(p), Classname: "fencelab.check.probe"}
		if bs := brokenBy[p]; len(bs) > 0 {
			tc.Failure = &junitFailure{Type: string(protocol.MarkNotAsCorrect), Message: bs[0].Words, Text: wordsOf(bs)}
		}
		// Beyond the article: a note in the case's output, never a failure.
		for _, b := range rep.Beyond {
			if b.Case == p {
				tc.Out += "beyond the article (not a failure): " + b.Words + "\n"
			}
		}
		suite.add(tc)
	}
	// What no case above stands for (a probe the caller did not name)
	// still fails: the suite never passes a report that does not.
	var rest []experiments.CheckBroken
	for _, b := range rep.Broken {
		if !named[b.Case] {
			rest = append(rest, b)
		}
	}
	if len(rest) > 0 || (!rep.Pass && suite.Failures+suite.Errors == 0) {
		msg := rep.Words
		if len(rest) > 0 {
			msg = rest[0].Words
		}
		suite.add(junitCase{Name: "requirements", Classname: "fencelab.check",
			Failure: &junitFailure{Type: string(protocol.MarkNotAsCorrect), Message: msg, Text: wordsOf(rest)}})
	}
	suite.Out = rep.Words
	all := junitSuites{Name: suite.Name, Tests: suite.Tests, Failures: suite.Failures, Errors: suite.Errors, Suites: []junitSuite{suite}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(all); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func firstWords(a, b []experiments.CheckBroken, otherwise string) string {
	for _, bs := range [][]experiments.CheckBroken{a, b} {
		if len(bs) > 0 {
			return bs[0].Words
		}
	}
	return otherwise
}

func wordsOf(bs []experiments.CheckBroken) string {
	var b strings.Builder
	for _, x := range bs {
		fmt.Fprintf(&b, "broken: %s\n", x.Words)
	}
	return b.String()
}

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Cases    []junitCase `xml:"testcase"`
	Out      string      `xml:"system-out,omitempty"`
}

func (s *junitSuite) add(c junitCase) {
	s.Tests++
	if c.Failure != nil {
		s.Failures++
	}
	if c.Error != nil {
		s.Errors++
	}
	s.Cases = append(s.Cases, c)
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Error     *junitFailure `xml:"error,omitempty"`
	Out       string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}
