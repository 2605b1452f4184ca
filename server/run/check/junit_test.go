package check_test

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/check"
)

type junitOut struct {
	Tests    int `xml:"tests,attr"`
	Failures int `xml:"failures,attr"`
	Errors   int `xml:"errors,attr"`
	Suite    struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Errors   int `xml:"errors,attr"`
		Cases    []struct {
			Name    string `xml:"name,attr"`
			Failure *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
			Error *struct {
				Message string `xml:"message,attr"`
			} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

func junit(t *testing.T, rep protocol.CheckReport, probes []experiments.CheckCase) (junitOut, string) {
	t.Helper()
	var b bytes.Buffer
	if err := check.WriteJUnit(&b, rep, probes); err != nil {
		t.Fatal(err)
	}
	var out junitOut
	if err := xml.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatalf("not XML: %v\n%s", err, b.String())
	}
	if out.Tests != out.Suite.Tests || out.Failures != out.Suite.Failures || out.Errors != out.Suite.Errors || out.Tests != len(out.Suite.Cases) {
		t.Fatalf("the counts disagree: %+v", out)
	}
	failures, errs := 0, 0
	for _, c := range out.Suite.Cases {
		if c.Failure != nil {
			failures++
		}
		if c.Error != nil {
			errs++
		}
	}
	if failures != out.Failures || errs != out.Errors {
		t.Fatalf("%d failures and %d errors counted, %d and %d in the cases", out.Failures, out.Errors, failures, errs)
	}
	return out, b.String()
}

func passedCase(c experiments.CheckCase) protocol.CheckCaseResult {
	return protocol.CheckCaseResult{Case: c, Title: c.Title(), OK: true, Mark: protocol.CaseMark(true)}
}

// The JUnit of a check is its report, case by case: a report that passes
// has no failure; a case that fails names what it shows broken and the
// cells that differ; a run that did not end is an error; a probe that
// found something is a failed case; and a report that fails on anything
// no case stands for still fails a case, so a course's CI never passes
// what the check does not. Text that XML cannot carry is still XML.
func TestWriteJUnit(t *testing.T) {
	probes := experiments.ProbeCases()
	runs := experiments.CheckCases()
	var pass protocol.CheckReport
	pass.Pass = true
	for _, c := range runs {
		pass.Cases = append(pass.Cases, passedCase(c))
	}
	out, _ := junit(t, pass, probes)
	if out.Tests != len(runs)+len(probes) || out.Failures != 0 || out.Errors != 0 {
		t.Fatalf("a passing report: %+v", out)
	}
	for i, c := range append(append([]experiments.CheckCase{}, runs...), probes...) {
		if out.Suite.Cases[i].Name != string(c) {
			t.Fatalf("case %d is %q, want %q", i, out.Suite.Cases[i].Name, c)
		}
	}

	fails := pass
	fails.Pass = false
	fails.Cases = append([]protocol.CheckCaseResult{}, pass.Cases...)
	zb := experiments.CheckBroken{Requirement: experiments.ReqEpochRaised, Case: experiments.CaseZombieFirst, Words: "your claim does not raise the epoch <&> \x00 \xff"}
	fails.Cases[1].OK = false
	fails.Cases[1].Broken = []experiments.CheckBroken{zb}
	fails.Cases[1].Table = []protocol.Cell{{Column: protocol.Columns()[0], Words: "taken", Expected: "refused"}, {Column: protocol.Columns()[1], Words: "same", Expected: "same", AsCorrect: true}}
	fails.Cases[2].OK = false
	fails.Cases[2].Error = &protocol.Failure{Code: protocol.ErrStepFailed, Message: "worker B did not answer"}
	fails.Broken = []experiments.CheckBroken{zb, {Requirement: experiments.ReqSkipLocked, Case: experiments.CaseClaimers, Words: "two claimers at once: the second waited"}}
	out, text := junit(t, fails, probes)
	if out.Failures != 2 || out.Errors != 1 {
		t.Fatalf("two failures (a run, a probe) and an error: %+v\n%s", out, text)
	}
	byName := map[string]int{}
	for i, c := range out.Suite.Cases {
		byName[c.Name] = i
	}
	z := out.Suite.Cases[byName[string(experiments.CaseZombieFirst)]]
	if z.Failure == nil || !strings.Contains(z.Failure.Message, "your claim does not raise the epoch <&>") ||
		!strings.Contains(z.Failure.Text, "taken (the article: refused)") || strings.Contains(z.Failure.Text, "same (the article") {
		t.Errorf("zombie-first's failure: %+v", z.Failure)
	}
	if c := out.Suite.Cases[byName[string(experiments.CaseCrash)]]; c.Error == nil || !strings.Contains(c.Error.Message, "worker B did not answer") || c.Failure != nil {
		t.Errorf("crash-before-commit: %+v %+v, want an error", c.Error, c.Failure)
	}
	if c := out.Suite.Cases[byName[string(experiments.CaseClaimers)]]; c.Failure == nil || !strings.Contains(c.Failure.Message, "the second waited") {
		t.Errorf("two-claimers: %+v", c.Failure)
	}

	// The receiver's probe found something, but the caller did not name it
	// among the probes played: a case still fails for it.
	rcv := pass
	rcv.Pass = false
	rcv.Broken = []experiments.CheckBroken{{Requirement: experiments.ReqReceiverOlder, Case: experiments.CaseReceiver, Words: "the receiver alone: it took epoch 1 after epoch 2"}}
	out, text = junit(t, rcv, probes[:len(probes)-1])
	if out.Failures != 1 || !strings.Contains(text, "it took epoch 1 after epoch 2") {
		t.Errorf("a broken requirement of a probe not named: %+v\n%s", out, text)
	}
	// What fencelab asks beyond the article is the holder's probe's
	// output, never a failure.
	beyond := pass
	beyond.Beyond = []experiments.CheckBroken{{Requirement: experiments.ReqFailRetries, Case: experiments.CaseHolderFails, Words: "the holder's own fail: no retry"}}
	if out, text = junit(t, beyond, probes); out.Failures != 0 || out.Errors != 0 || !strings.Contains(text, "beyond the article (not a failure): the holder&#39;s own fail: no retry") {
		t.Errorf("a note beyond the article: %+v\n%s", out, text)
	}
	// A report that fails with no case and nothing broken named fails all
	// the same.
	odd := pass
	odd.Pass, odd.Words = false, "It does not pass."
	if out, text = junit(t, odd, probes); out.Failures != 1 {
		t.Errorf("a failing report with every case passing: %+v\n%s", out, text)
	}
}

// The terminal's report lists what fencelab asks beyond the article under
// a heading of its own, as a note, apart from what the runs show broken.
func TestWriteText_BeyondTheArticleIsANote(t *testing.T) {
	rep := protocol.CheckReport{Pass: true, Words: "Your solution passes the article's test."}
	rep.Beyond = []experiments.CheckBroken{{Requirement: experiments.ReqFailRetries, Case: experiments.CaseHolderFails, Words: "the holder's own fail: no retry"}}
	var b bytes.Buffer
	if err := check.WriteText(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Beyond the article (a note, not a failure):\n  - the holder's own fail: no retry\n") || strings.Contains(b.String(), "What the runs show broken") {
		t.Errorf("the terminal's report:\n%s", b.String())
	}
}
