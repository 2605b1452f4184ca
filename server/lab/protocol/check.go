package protocol

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fencelab/fencelab/server/lab/experiments"
)

// SortBroken puts the report's broken requirements in the article's
// order (experiments.RequirementOrder), keeping the cases' order among equals.
func (r *CheckReport) SortBroken() {
	rank := func(q experiments.Requirement) int {
		if i := slices.Index(experiments.RequirementOrder, q); i >= 0 {
			return i
		}
		return len(experiments.RequirementOrder)
	}
	slices.SortStableFunc(r.Broken, func(a, b experiments.CheckBroken) int { return rank(a.Requirement) - rank(b.Requirement) })
}

// CheckCaseResult is one case of a check: its run, the article's table
// for it cell by cell, and whether every cell is the article's.
type CheckCaseResult struct {
	Case  experiments.CheckCase `json:"case"`
	Title string                `json:"title"`
	Run   string                `json:"run,omitempty"`
	OK    bool                  `json:"ok"`
	// Mark is OK as a mark: as-correct or not-as-correct.
	Mark  Mark   `json:"mark"`
	Table []Cell `json:"table"`
	// Verdict is the run's own verdict; Error, a run that did not reach
	// one.
	Verdict string   `json:"verdict,omitempty"`
	Error   *Failure `json:"error,omitempty"`
	// Broken are the requirements this case's run showed broken.
	Broken []experiments.CheckBroken `json:"broken"`
	// Notes are CheckInput's: reported, never judged.
	Notes []string `json:"notes,omitempty"`
}

// CheckReport is a whole check: it passes when every case's cells are the
// article's.
type CheckReport struct {
	Pass bool `json:"pass"`
	// Mark is Pass as a mark: as-correct or not-as-correct.
	Mark  Mark              `json:"mark"`
	Cases []CheckCaseResult `json:"cases"`
	// Probes are the probes the check played (no run: the receiver alone,
	// two claimers at once, …), in the order a report names them, each
	// with whether it found nothing broken; a check that played none has
	// none.
	Probes []ProbeResult             `json:"probes,omitempty"`
	Broken []experiments.CheckBroken `json:"broken"`
	// Beyond is what fencelab asks beyond the article's five requirements
	// (experiments.Requirement.Beyond) and found wanting: a note beside
	// the verdict, never a failure.
	Beyond []experiments.CheckBroken `json:"beyond,omitempty"`
	// Words say the result in one sentence.
	Words string `json:"words"`
}

// ProbeResult is one probe a check played: OK when it found nothing
// broken (what it found is in the report's Broken, under its case).
type ProbeResult struct {
	Case  experiments.CheckCase `json:"case"`
	Title string                `json:"title"`
	OK    bool                  `json:"ok"`
	// Mark is OK as a mark: as-correct or not-as-correct.
	Mark Mark `json:"mark"`
}

func CaseMark(ok bool) Mark {
	if ok {
		return MarkAsCorrect
	}
	return MarkNotAsCorrect
}

func FailedCases(cs []CheckCaseResult) int {
	n := 0
	for _, c := range cs {
		if !c.OK {
			n++
		}
	}
	return n
}

// WithProbes adds the probes to the report (the receiver's, then the
// statements'): each probe played is listed with its mark, each thing
// they found broken is named, and the check does not pass.
func (r *CheckReport) WithProbes(p experiments.Probes) {
	// What fencelab asks beyond the article is a note, never a failure.
	found := slices.DeleteFunc(append(receiverFound(p.Receiver), p.Statements...), func(b experiments.CheckBroken) bool {
		if b.Requirement.Beyond() && !experiments.HasRequirement(r.Beyond, b.Requirement) {
			r.Beyond = append(r.Beyond, b)
		}
		return b.Requirement.Beyond()
	})
	var named []string // the probes that found something, the receiver's first
	for _, b := range found {
		if !slices.Contains(named, b.Case.Title()) {
			named = append(named, b.Case.Title())
		}
	}
	for _, c := range experiments.ProbeCases() {
		if !slices.Contains(p.Played, c) {
			continue
		}
		ok := !slices.ContainsFunc(found, func(b experiments.CheckBroken) bool { return b.Case == c })
		r.Probes = append(r.Probes, ProbeResult{Case: c, Title: c.Title(), OK: ok, Mark: CaseMark(ok)})
	}
	for _, b := range found {
		if !experiments.HasRequirement(r.Broken, b.Requirement) {
			r.Broken = append(r.Broken, b)
		}
	}
	r.SortBroken()
	if r.Pass && len(named) > 0 {
		r.Pass, r.Mark = false, CaseMark(false)
		r.Words = fmt.Sprintf("Your solution's %d cases end as the article's table says, but it fails %s.", len(r.Cases), strings.Join(named, " and "))
	}
	if r.Pass && len(r.Beyond) > 0 {
		var more []string
		for _, b := range r.Beyond {
			more = append(more, RequirementWords(b.Requirement))
		}
		r.Words = fmt.Sprintf("Your solution passes the article's test: all %d cases end as its table says. Beyond it, fencelab asks for more: %s.", len(r.Cases), strings.Join(more, "; "))
	}
}

// receiverFound is what the receiver's probe showed broken, taken[i]
// saying whether the receiver took ReceiverProbe()[i]: each delivery it
// treated otherwise than the receiver's rule says (a newer or first epoch
// taken, the same epoch taken again, an older one refused). nil taken: it
// was not probed.
func receiverFound(taken []bool) []experiments.CheckBroken {
	probe := experiments.ReceiverProbe()
	if len(taken) != len(probe) {
		return nil
	}
	var found []experiments.CheckBroken
	add := func(q experiments.Requirement, words string) {
		found = append(found, experiments.CheckBroken{Requirement: q, Case: experiments.CaseReceiver, Words: experiments.CaseReceiver.Title() + ": " + words})
	}
	switch {
	case !taken[0]:
		add(experiments.ReqReceiverNewer, "it refused the first delivery of a job: your receiver takes nothing")
	case !taken[1]:
		add(experiments.ReqReceiverNewer, "it refused epoch 2 after epoch 1: your receiver does not take a newer epoch")
	}
	if taken[0] && taken[1] && !taken[2] {
		add(experiments.ReqReceiverSame, "it refused epoch 2 when the same delivery came again: your receiver does not accept the same epoch again (a retry is not a zombie)")
	}
	if taken[3] {
		add(experiments.ReqReceiverOlder, "it took epoch 1 after epoch 2: your receiver does not refuse an older epoch")
	}
	return found
}

// requirementWords say each requirement broken, as a class's board sums
// its students up ("9 students: your complete does not compare the
// epoch").
var requirementWords = map[experiments.Requirement]string{
	experiments.ReqRuns:          "a statement does not run",
	experiments.ReqClaimTakes:    "your claim does not take a claimable job",
	experiments.ReqSkipLocked:    "your claim does not skip the rows another claimer holds (FOR UPDATE SKIP LOCKED)",
	experiments.ReqTakesExpired:  "your claim does not take a job whose lease ran out",
	experiments.ReqFailRetries:   "your fail does not retry with attempts left, or does not end the job on its last",
	experiments.ReqOwnRow:        "a statement changes another job's row, or an epoch goes down",
	experiments.ReqEpochRaised:   "your claim does not raise the epoch",
	experiments.ReqDBClock:       "your lease is not judged on the database clock",
	experiments.ReqCompleteFence: "your complete does not compare the owner and the epoch",
	experiments.ReqFailFence:     "your fail does not compare the owner and the epoch",
	experiments.ReqReceiverOlder: "your receiver does not refuse an older epoch",
	experiments.ReqReceiverNewer: "your receiver does not take a newer epoch",
	experiments.ReqReceiverSame:  "your receiver does not accept the same epoch again",
	experiments.ReqLands:         "the owner's own complete does not land",
}

// RequirementWords says a requirement broken, in one phrase.
func RequirementWords(r experiments.Requirement) string {
	if w, ok := requirementWords[r]; ok {
		return w
	}
	return string(r)
}
