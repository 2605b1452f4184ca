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
