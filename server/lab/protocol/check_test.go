package protocol_test

import (
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// passing is a report whose every case ended as the article's table says.
func passing() protocol.CheckReport {
	rep := protocol.CheckReport{Pass: true, Mark: protocol.MarkAsCorrect, Broken: []experiments.CheckBroken{}}
	for _, c := range experiments.CheckCases() {
		rep.Cases = append(rep.Cases, protocol.CheckCaseResult{Case: c, Title: c.Title(), OK: true, Mark: protocol.MarkAsCorrect})
	}
	return rep
}

// Every probe a check played is in its report with its own mark, so a
// check that fails a probe alone never reads as all green: the probe
// that found something is not-as-correct, the others as-correct, and a
// probe that was not played is not listed at all.
func TestWithProbes_EachProbePlayedHasItsMark(t *testing.T) {
	right := []bool{true, true, true, false} // ReceiverProbe: first, newer, same again, older
	noSame := []bool{true, true, false, false}
	claimers := experiments.CheckBroken{Requirement: experiments.ReqSkipLocked, Case: experiments.CaseClaimers, Words: "two claimers at once: the second waited"}
	marks := func(rep protocol.CheckReport) map[experiments.CheckCase]protocol.Mark {
		m := map[experiments.CheckCase]protocol.Mark{}
		for _, p := range rep.Probes {
			m[p.Case] = p.Mark
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		probes experiments.Probes
		want   map[experiments.CheckCase]protocol.Mark
		pass   bool
	}{
		{name: "all played, nothing found", pass: true,
			probes: experiments.Probes{Receiver: right, Played: experiments.ProbeCases()},
			want: map[experiments.CheckCase]protocol.Mark{experiments.CaseClaimers: protocol.MarkAsCorrect, experiments.CaseExpired: protocol.MarkAsCorrect,
				experiments.CaseHolderFails: protocol.MarkAsCorrect, experiments.CaseOtherJob: protocol.MarkAsCorrect, experiments.CaseReceiver: protocol.MarkAsCorrect}},
		{name: "the receiver alone fails",
			probes: experiments.Probes{Receiver: noSame, Played: experiments.ProbeCases()},
			want: map[experiments.CheckCase]protocol.Mark{experiments.CaseClaimers: protocol.MarkAsCorrect, experiments.CaseExpired: protocol.MarkAsCorrect,
				experiments.CaseHolderFails: protocol.MarkAsCorrect, experiments.CaseOtherJob: protocol.MarkAsCorrect, experiments.CaseReceiver: protocol.MarkNotAsCorrect}},
		{name: "two claimers fail",
			probes: experiments.Probes{Receiver: right, Statements: []experiments.CheckBroken{claimers}, Played: experiments.ProbeCases()},
			want: map[experiments.CheckCase]protocol.Mark{experiments.CaseClaimers: protocol.MarkNotAsCorrect, experiments.CaseExpired: protocol.MarkAsCorrect,
				experiments.CaseHolderFails: protocol.MarkAsCorrect, experiments.CaseOtherJob: protocol.MarkAsCorrect, experiments.CaseReceiver: protocol.MarkAsCorrect}},
		{name: "the receiver alone played, and fails",
			probes: experiments.Probes{Receiver: noSame, Played: []experiments.CheckCase{experiments.CaseReceiver}},
			want:   map[experiments.CheckCase]protocol.Mark{experiments.CaseReceiver: protocol.MarkNotAsCorrect}},
		{name: "none played", pass: true, want: map[experiments.CheckCase]protocol.Mark{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := passing()
			rep.WithProbes(tc.probes)
			got := marks(rep)
			if len(got) != len(tc.want) {
				t.Errorf("probes %v, want %v", got, tc.want)
			}
			for c, m := range tc.want {
				if got[c] != m {
					t.Errorf("%s: %q, want %q", c, got[c], m)
				}
			}
			if rep.Pass != tc.pass {
				t.Errorf("pass %v, want %v (%s)", rep.Pass, tc.pass, rep.Words)
			}
			if !tc.pass && !strings.Contains(rep.Words, "but it fails") {
				t.Errorf("the words %q do not say which probe it fails", rep.Words)
			}
			for i, p := range rep.Probes { // in the order a report names them
				if i > 0 && indexOf(rep.Probes[i-1].Case) > indexOf(p.Case) {
					t.Errorf("probes out of order: %v", rep.Probes)
				}
			}
		})
	}
	// A probe that finds what a run already named keeps its own mark: the
	// requirement is named once, the probe still fails.
	rep := passing()
	rep.Pass, rep.Cases[1].OK, rep.Cases[1].Mark = false, false, protocol.MarkNotAsCorrect
	rep.Broken = []experiments.CheckBroken{{Requirement: experiments.ReqSkipLocked, Case: experiments.CaseZombieFirst, Words: "zombie first: …"}}
	rep.WithProbes(experiments.Probes{Receiver: right, Statements: []experiments.CheckBroken{claimers}, Played: experiments.ProbeCases()})
	if got := marks(rep)[experiments.CaseClaimers]; got != protocol.MarkNotAsCorrect || len(rep.Broken) != 1 {
		t.Errorf("a probe's finding a run named too: mark %q, broken %v", got, rep.Broken)
	}
}

func indexOf(c experiments.CheckCase) int {
	for i, p := range experiments.ProbeCases() {
		if p == c {
			return i
		}
	}
	return -1
}

// What fencelab asks beyond the article (a fail that retries) is a note
// beside the verdict, never a failure: the check passes, the probe that
// found it keeps its ✓, the note names it, and an article requirement
// found beside it still fails the check.
func TestWithProbes_BeyondTheArticleIsANote(t *testing.T) {
	right := []bool{true, true, true, false}
	noRetry := experiments.CheckBroken{Requirement: experiments.ReqFailRetries, Case: experiments.CaseHolderFails, Words: "the holder's own fail: the job is failed after its first failure"}
	rep := passing()
	rep.WithProbes(experiments.Probes{Receiver: right, Statements: []experiments.CheckBroken{noRetry}, Played: experiments.ProbeCases()})
	if !rep.Pass || rep.Mark != protocol.MarkAsCorrect || len(rep.Broken) != 0 {
		t.Fatalf("a fenced fail that never retries: pass %v, mark %q, broken %v", rep.Pass, rep.Mark, rep.Broken)
	}
	if len(rep.Beyond) != 1 || rep.Beyond[0] != noRetry {
		t.Errorf("the note: %v", rep.Beyond)
	}
	for _, p := range rep.Probes {
		if !p.OK {
			t.Errorf("probe %s is marked %q for what the article never asks", p.Case, p.Mark)
		}
	}
	if !strings.Contains(rep.Words, "passes the article's test") || !strings.Contains(rep.Words, protocol.RequirementWords(experiments.ReqFailRetries)) {
		t.Errorf("the words %q do not say it passes the article's test and what it asks beyond", rep.Words)
	}

	// An article requirement beside it: the check fails, on that one.
	claimers := experiments.CheckBroken{Requirement: experiments.ReqSkipLocked, Case: experiments.CaseClaimers, Words: "two claimers at once: the second waited"}
	rep = passing()
	rep.WithProbes(experiments.Probes{Receiver: right, Statements: []experiments.CheckBroken{noRetry, claimers}, Played: experiments.ProbeCases()})
	if rep.Pass || len(rep.Broken) != 1 || rep.Broken[0] != claimers || len(rep.Beyond) != 1 {
		t.Errorf("beside a real failure: pass %v, broken %v, beyond %v", rep.Pass, rep.Broken, rep.Beyond)
	}
	if strings.Contains(rep.Words, experiments.CaseHolderFails.Title()) {
		t.Errorf("the words name the holder's fail as failed: %q", rep.Words)
	}
}

// Every requirement is either a clause of one of the article's rules or
// beyond them, never both.
func TestRequirements_TheArticlesOrBeyond(t *testing.T) {
	for _, q := range experiments.RequirementOrder {
		if (q.Rule() == 0) != q.Beyond() {
			t.Errorf("%s: rule %d, beyond %v", q, q.Rule(), q.Beyond())
		}
	}
}
