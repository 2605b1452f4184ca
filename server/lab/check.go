package lab

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
)

// This file is the article's Step 3, "Check it": the cases a reader's
// solution is run through, and what their runs show broken. Everything it
// says is read from a run's Outcome (the database's history and the
// receiver's log), never from the solution's text.

// CheckCase names one case of a check: one of the article's two orderings,
// or one of its hints.
type CheckCase string

// The cases, in the order a check runs them.
const (
	CaseNewOwnerFirst CheckCase = "new-owner-first"     // the article's table, first row
	CaseZombieFirst   CheckCase = "zombie-first"        // the article's table, second row
	CaseCrash         CheckCase = "crash-before-commit" // a hint: a crash before the commit
	CaseClockAhead    CheckCase = "clock-ahead"         // a hint: a worker whose clock runs ahead
	CaseSameName      CheckCase = "same-name"           // a hint: one name for both workers
	// CaseZombieFails is new-owner-first whose zombie's handler errors
	// after it wakes: it runs its fail, which must be fenced as its
	// complete is (the article's requirement 3, "complete and fail").
	CaseZombieFails CheckCase = "zombie-fails"
	// CaseClaimers is no run: the reader's claim run by two claimers at
	// once, on two pending jobs, the first one's transaction held open
	// while the second claims (the article's requirement 1, FOR UPDATE
	// SKIP LOCKED). Each must get its own job at once.
	CaseClaimers CheckCase = "two-claimers"
	// CaseExpired is no run: the reader's claim on a table whose one
	// claimable job is running under a lease that ran out a minute ago
	// (a crashed worker's). It must take it (the article's requirement
	// 1, "or running with an expired lease").
	CaseExpired CheckCase = "expired-lease"
	// CaseHolderFails is no run: the holder's own fail, on a job with two
	// attempts. The first failure sends it back for a retry; the second,
	// its last attempt, ends it failed.
	CaseHolderFails CheckCase = "holder-fails"
	// CaseOtherJob is no run: the reader's claim, complete and fail on
	// one job while another job is in the table, held by a third worker.
	// No statement may change the other job's row, and no epoch may go
	// down.
	CaseOtherJob CheckCase = "other-job"
	// CaseReceiver is no run: the receiver's rule alone, sent the
	// deliveries of ReceiverProbe one by one (Rule 4's "accepts the same
	// epoch again", which no run's ordering sends).
	CaseReceiver CheckCase = "receiver-alone"
)

// caseDef is one case, defined once: its name for people, and, for a
// case that is a run, the run that plays it (the runner plays it with a
// reader's statements, the harness with a reader's worker program, both
// from the same script, ScriptOf of its config). A probe (run false) is
// played by the check's probes alone.
type caseDef struct {
	c     CheckCase
	title string
	run   bool
	// config sets the case's run apart from the plain one (a lease,
	// Custom): its ordering, one name for both, a zombie that fails.
	config func(*RunConfig)
}

// caseDefs are every case, the runs first, in the order a check plays
// them, then the probes, in the order a report names them.
var caseDefs = []caseDef{
	{c: CaseNewOwnerFirst, title: "new owner first", run: true, config: func(rc *RunConfig) { rc.Ordering = NewOwnerFirst }},
	{c: CaseZombieFirst, title: "zombie first", run: true, config: func(rc *RunConfig) { rc.Ordering = ZombieFirst }},
	{c: CaseCrash, title: "a crash before the commit", run: true, config: func(rc *RunConfig) { rc.Ordering = CrashBeforeCommit }},
	{c: CaseClockAhead, title: "a worker whose clock runs ahead", run: true, config: func(rc *RunConfig) { rc.Ordering = ClockSkew }},
	{c: CaseSameName, title: "one name for both workers", run: true, config: func(rc *RunConfig) { rc.Ordering, rc.SameIdentity = NewOwnerFirst, true }},
	// One name for both, as the same-name case: a fail fenced by the
	// owner alone is caught too, not only one with no fence at all.
	{c: CaseZombieFails, title: "the zombie fails instead of completing", run: true,
		config: func(rc *RunConfig) { rc.Ordering, rc.ZombieFails, rc.SameIdentity = NewOwnerFirst, true, true }},
	{c: CaseClaimers, title: "two claimers at once"},
	{c: CaseExpired, title: "a job whose lease ran out"},
	{c: CaseHolderFails, title: "the holder's own fail"},
	{c: CaseOtherJob, title: "another job in the table"},
	{c: CaseReceiver, title: "the receiver alone"},
}

// def is the case's definition; a name no case has, an empty one.
func (c CheckCase) def() caseDef {
	for _, d := range caseDefs {
		if d.c == c {
			return d
		}
	}
	return caseDef{c: c, title: string(c)}
}

// CheckCases lists every case that is a run, in the order a check plays
// them.
func CheckCases() []CheckCase {
	var cs []CheckCase
	for _, d := range caseDefs {
		if d.run {
			cs = append(cs, d.c)
		}
	}
	return cs
}

// ForWorkerPrograms reports whether `fencelab check --worker` plays the
// case as a run of a reader's worker program, and if not, why not: every
// run is, a probe is not (the harness plays its own probes of a program).
func (c CheckCase) ForWorkerPrograms() (ok bool, why string) {
	if !c.def().run {
		return false, "it is a probe, not a run"
	}
	return true, ""
}

// ParseCheckCase parses the name of a case that is a run.
func ParseCheckCase(s string) (CheckCase, error) {
	for _, c := range CheckCases() {
		if string(c) == s {
			return c, nil
		}
	}
	return "", playground.Invalidf("unknown check case %q", s)
}

// Config is the run that plays the case, with a lease; its ordering
// gives the expected row of the article's table. A probe's is the plain
// run's, and no case's.
func (c CheckCase) Config(lease time.Duration) RunConfig {
	rc := RunConfig{Lease: lease, Custom: true}
	if d := c.def(); d.config != nil {
		d.config(&rc)
	}
	return rc
}

// Title is the case's name for people.
func (c CheckCase) Title() string { return c.def().title }

// Requirement is one of the article's Step 2 requirements, as a check
// finds it broken.
type Requirement string

// The requirements a check can find broken.
const (
	ReqRuns          Requirement = "runs"           // each statement runs without an error
	ReqClaimTakes    Requirement = "claim-takes"    // the claim takes a claimable job
	ReqSkipLocked    Requirement = "skip-locked"    // two claimers at once each get their own job at once
	ReqTakesExpired  Requirement = "claim-expired"  // the claim takes a job whose lease ran out
	ReqFailRetries   Requirement = "fail-retries"   // the holder's fail retries with attempts left, and ends the job on its last
	ReqOwnRow        Requirement = "own-row"        // each statement changes its own job's row alone, and no epoch goes down
	ReqEpochRaised   Requirement = "epoch-raised"   // every claim raises the epoch
	ReqDBClock       Requirement = "db-clock"       // the lease is judged on the database clock
	ReqCompleteFence Requirement = "complete-fence" // complete matches owner and epoch, and drops a late result
	ReqFailFence     Requirement = "fail-fence"     // fail matches owner and epoch
	ReqReceiverOlder Requirement = "receiver-older" // the receiver refuses an older epoch
	ReqReceiverNewer Requirement = "receiver-newer" // the receiver takes a newer epoch
	ReqReceiverSame  Requirement = "receiver-same"  // the receiver accepts the same epoch again
	ReqLands         Requirement = "lands"          // the owner's own complete lands
)

// requirementOrder is the article's order of the requirements, Step 2's
// 1 to 4: the claim (it runs, takes a job, skips a locked one, takes an
// expired one, judges the lease on the database clock), the epoch it
// raises, the compare-and-set of complete and fail (and that they keep to
// their own row, and retry), the receiver. A report names its broken
// requirements in this order, so the first is the next to fix, whichever
// case found it.
var requirementOrder = []Requirement{ReqRuns, ReqClaimTakes, ReqSkipLocked, ReqTakesExpired, ReqDBClock, ReqEpochRaised,
	ReqCompleteFence, ReqFailFence, ReqOwnRow, ReqFailRetries, ReqLands, ReqReceiverOlder, ReqReceiverNewer, ReqReceiverSame}

// sortBroken puts the report's broken requirements in the article's
// order (requirementOrder), keeping the cases' order among equals.
func (r *CheckReport) sortBroken() {
	rank := func(q Requirement) int {
		if i := slices.Index(requirementOrder, q); i >= 0 {
			return i
		}
		return len(requirementOrder)
	}
	slices.SortStableFunc(r.Broken, func(a, b CheckBroken) int { return rank(a.Requirement) - rank(b.Requirement) })
}

// CheckBroken is a requirement a case's run showed broken: what happened,
// then which rule that breaks, in one sentence.
type CheckBroken struct {
	Requirement Requirement `json:"requirement"`
	Case        CheckCase   `json:"case"`
	Words       string      `json:"words"`
}

// CheckCaseResult is one case of a check: its run, the article's table
// for it cell by cell, and whether every cell is the article's.
type CheckCaseResult struct {
	Case  CheckCase `json:"case"`
	Title string    `json:"title"`
	Run   string    `json:"run,omitempty"`
	OK    bool      `json:"ok"`
	// Mark is OK as a mark: as-correct or not-as-correct.
	Mark  Mark   `json:"mark"`
	Table []Cell `json:"table"`
	// Verdict is the run's own verdict; Error, a run that did not reach
	// one.
	Verdict string   `json:"verdict,omitempty"`
	Error   *Failure `json:"error,omitempty"`
	// Broken are the requirements this case's run showed broken.
	Broken []CheckBroken `json:"broken"`
	// Notes are CheckInput's: reported, never judged.
	Notes []string `json:"notes,omitempty"`
}

// CheckReport is a whole check: it passes when every case's cells are the
// article's.
type CheckReport struct {
	Pass bool `json:"pass"`
	// Mark is Pass as a mark: as-correct or not-as-correct.
	Mark   Mark              `json:"mark"`
	Cases  []CheckCaseResult `json:"cases"`
	Broken []CheckBroken     `json:"broken"`
	// Words say the result in one sentence.
	Words string `json:"words"`
}

// CheckInput is what one case's run came to: its outcome, or the error
// that stopped it.
type CheckInput struct {
	Case    CheckCase
	Run     string
	Outcome *Outcome
	Err     *Failure
	// Notes are facts of the run reported beside its verdict and never
	// judged: how each worker program exited, say.
	Notes []string
}

// JudgeCheck reads what each case's run came to and says what the
// solution breaks. A case whose run gave no outcome fails.
func JudgeCheck(in []CheckInput) CheckReport {
	rep := CheckReport{Pass: len(in) > 0, Cases: []CheckCaseResult{}, Broken: []CheckBroken{}}
	seen := map[Requirement]bool{}
	for _, ci := range in {
		cr := CheckCaseResult{Case: ci.Case, Title: ci.Case.Title(), Run: ci.Run, Table: []Cell{}, Broken: []CheckBroken{}, Notes: ci.Notes}
		switch {
		case ci.Outcome == nil:
			cr.Error = ci.Err
			if cr.Error == nil {
				cr.Error = &Failure{Code: "no-outcome", Message: "the run ended without a verdict"}
			}
			// A run that could not finish for a requirement's sake (its
			// code is the requirement's name) names that requirement.
			q := ReqRuns
			if slices.Contains(requirementOrder, Requirement(cr.Error.Code)) {
				q = Requirement(cr.Error.Code)
			}
			cr.Broken = append(cr.Broken, CheckBroken{Requirement: q, Case: ci.Case,
				Words: fmt.Sprintf("%s: the run could not finish (%s)", ci.Case.Title(), strings.TrimSuffix(cr.Error.Message, "."))})
		default:
			// Read only: the run's outcome is shared with its events (and
			// derived already, by Evaluate).
			o := ci.Outcome
			cr.Table, cr.Verdict = o.Table, o.Verdict
			cr.OK = len(o.Table) > 0
			for _, c := range o.Table {
				cr.OK = cr.OK && c.AsCorrect
			}
			cr.Broken = brokenBy(ci.Case, o)
			if !cr.OK && len(cr.Broken) == 0 {
				cr.Broken = append(cr.Broken, cellsBroken(ci.Case, o)...)
			}
		}
		if cr.Error != nil {
			cr.OK = false
		}
		rep.Pass = rep.Pass && cr.OK
		cr.Mark = cellMark(cr.OK)
		for _, b := range cr.Broken {
			if !seen[b.Requirement] {
				seen[b.Requirement] = true
				rep.Broken = append(rep.Broken, b)
			}
		}
		rep.Cases = append(rep.Cases, cr)
	}
	rep.Mark = cellMark(rep.Pass)
	switch n := failedCases(rep.Cases); {
	case rep.Pass:
		rep.Words = fmt.Sprintf("Your solution passes: all %d cases end as the article's table says.", len(rep.Cases))
	default:
		rep.Words = fmt.Sprintf("Your solution fails %d of %d cases.", n, len(rep.Cases))
	}
	rep.sortBroken()
	return rep
}

func cellMark(ok bool) Mark {
	if ok {
		return MarkAsCorrect
	}
	return MarkNotAsCorrect
}

func failedCases(cs []CheckCaseResult) int {
	n := 0
	for _, c := range cs {
		if !c.OK {
			n++
		}
	}
	return n
}

// brokenBy names the requirements a case's violations break, each from
// what the history and the receiver's log recorded.
func brokenBy(c CheckCase, o *Outcome) []CheckBroken {
	out := []CheckBroken{}
	add := func(r Requirement, format string, a ...any) {
		for _, b := range out {
			if b.Requirement == r {
				return
			}
		}
		out = append(out, CheckBroken{Requirement: r, Case: c, Words: c.Title() + ": " + fmt.Sprintf(format, a...)})
	}
	// Two owners that shared one token explain a late write that matched
	// it: the claim is to blame, not the compare-and-set.
	shared, stale := false, false
	for _, v := range o.Violations {
		shared = shared || v.Invariant == InvEpochUnique
		stale = stale || v.Invariant == InvStaleWrite
	}
	for _, v := range o.Violations {
		switch v.Invariant {
		case InvStaleWrite, InvFinished:
			// With one token for both, a late write matched it, and the
			// owner's own commit may then have found the row moved on.
			if shared {
				continue
			}
		}
		switch v.Invariant {
		case InvEpochUnique:
			add(ReqEpochRaised, "both claims held epoch %d: your claim does not raise the epoch", o.Final.Epoch)
		case InvLeaseRespected:
			add(ReqDBClock, "worker %s claimed the job while worker %s's lease still ran on the database clock: your claim judges the lease by the worker's own clock", NewOwner, Zombie)
		case InvStaleWrite:
			op := v.Op
			if o.ZombieFails {
				op = "fail" // its fail may write any status: done, say
			}
			switch op {
			case "fail", "retry":
				if o.SameIdentity {
					add(ReqFailFence, "the zombie's fail matched a row at epoch %d that its own name held: your fail does not compare-and-set on owner and epoch (with one name for both, the epoch alone tells them apart)", o.Final.Epoch)
				} else {
					add(ReqFailFence, "the zombie's fail matched a row at epoch %d: your fail does not compare-and-set on owner and epoch", o.Final.Epoch)
				}
			case "complete":
				if o.SameIdentity {
					add(ReqCompleteFence, "the zombie's commit matched a row at epoch %d that its own name held: your complete does not compare the epoch", o.Final.Epoch)
				} else {
					add(ReqCompleteFence, "the zombie's commit matched a row at epoch %d: your complete does not compare-and-set on owner and epoch", o.Final.Epoch)
				}
			}
		case InvReceiverMonotonic:
			older, newer := backwards(o.Effects)
			add(ReqReceiverOlder, "the receiver took epoch %d after epoch %d: your receiver does not refuse an older epoch", older, newer)
		case InvFinished:
			if stale {
				continue // the late write moved the row on: the owner's complete found it so
			}
			add(ReqLands, "the job ends %s: the owner's own complete did not land", o.Final.Status)
		}
	}
	if o.ZombieCommit == CallAccepted && !shared && !has(out, ReqCompleteFence) && !has(out, ReqFailFence) && o.Ordering != ClockSkew {
		if o.ZombieFails {
			add(ReqFailFence, "the zombie's fail landed: your fail does not compare-and-set on owner and epoch")
		} else {
			add(ReqCompleteFence, "the zombie's commit landed: your complete does not compare-and-set on owner and epoch")
		}
	}
	return out
}

func has(bs []CheckBroken, r Requirement) bool {
	for _, b := range bs {
		if b.Requirement == r {
			return true
		}
	}
	return false
}

// backwards finds the receiver's first step back: an accepted epoch older
// than one it took before.
func backwards(effects []Effect) (older, newer int64) {
	var top int64
	for _, e := range effects {
		if e.Epoch < top {
			return e.Epoch, top
		}
		top = max(top, e.Epoch)
	}
	return 0, top
}

// cellsBroken names what a run's table shows when no invariant says more:
// each cell that is not the article's, with what the requirement is.
func cellsBroken(c CheckCase, o *Outcome) []CheckBroken {
	var out []CheckBroken
	for _, cell := range o.Table {
		if cell.AsCorrect {
			continue
		}
		r := ReqCompleteFence
		switch {
		case cell.Column == ColumnCall && Call(cell.Got) == CallRejected:
			r = ReqReceiverNewer
		case cell.Column == ColumnCall:
			r = ReqReceiverOlder
		case cell.Column == ColumnFinal && o.Final.Epoch == 0 && o.Final.Status != engine.StatusPending:
			out = append(out, CheckBroken{Requirement: ReqEpochRaised, Case: c,
				Words: fmt.Sprintf("%s: the job ends at epoch 0 although it was claimed: your claim does not raise the epoch", c.Title())})
			continue
		case cell.Column == ColumnFinal && o.Final.Epoch == 0:
			r = ReqClaimTakes
		case cell.Column == ColumnFinal && o.Receiver.Epoch != o.Final.Epoch:
			r = ReqReceiverNewer
		case cell.Column == ColumnFinal:
			r = ReqLands
		}
		out = append(out, CheckBroken{Requirement: r, Case: c,
			Words: fmt.Sprintf("%s: the %s was %q where the article's table says %q", c.Title(), ColumnWords(cell.Column), cell.Words, cell.Expected)})
	}
	return out
}

// ProbeDelivery is one delivery of the receiver's probe, and what a
// receiver that keeps rule 4 does with it.
type ProbeDelivery struct {
	JobID int64
	Epoch int64
	Owner string
	From  string // the worker label in its payload
	Take  bool   // a correct receiver takes it
}

// ReceiverProbe is the probe: a first delivery, a newer epoch, the same
// epoch again (a retry of the newer owner's), then an older one.
func ReceiverProbe() []ProbeDelivery {
	return []ProbeDelivery{
		{JobID: 1, Epoch: 1, Owner: "worker-a", From: Zombie, Take: true},
		{JobID: 1, Epoch: 2, Owner: "worker-b", From: NewOwner, Take: true},
		{JobID: 1, Epoch: 2, Owner: "worker-b", From: NewOwner, Take: true},
		{JobID: 1, Epoch: 1, Owner: "worker-a", From: Zombie, Take: false},
	}
}

// Probes are what the checks that are no run showed: what the receiver
// took of ReceiverProbe's deliveries (nil when it was not probed), and
// what the probes of the reader's claim, complete and fail found broken
// (CaseClaimers, CaseExpired, CaseHolderFails, CaseOtherJob; empty when
// nothing, or when they were not probed).
type Probes struct {
	Receiver   []bool
	Statements []CheckBroken
}

// WithProbes adds the probes to the report (WithProbe, then the
// statements'): each thing they found broken is named, and the check does
// not pass.
func (r *CheckReport) WithProbes(p Probes) {
	r.WithProbe(p.Receiver)
	var named []string
	for _, b := range p.Statements {
		if !has(r.Broken, b.Requirement) {
			r.Broken = append(r.Broken, b)
		}
		named = append(named, b.Case.Title())
	}
	r.sortBroken()
	if r.Pass && len(named) > 0 {
		r.Pass, r.Mark = false, cellMark(false)
		r.Words = fmt.Sprintf("Your solution's %d cases end as the article's table says, but it fails %s.", len(r.Cases), strings.Join(named, " and "))
	}
}

// WithProbe adds what the receiver's probe showed, taken[i] saying
// whether the receiver took ReceiverProbe()[i]: each delivery it treated
// otherwise than rule 4 says is a broken requirement, and the check does
// not pass.
func (r *CheckReport) WithProbe(taken []bool) {
	probe := ReceiverProbe()
	if len(taken) != len(probe) {
		return
	}
	var found []CheckBroken
	add := func(q Requirement, words string) {
		found = append(found, CheckBroken{Requirement: q, Case: CaseReceiver, Words: CaseReceiver.Title() + ": " + words})
	}
	switch {
	case !taken[0]:
		add(ReqReceiverNewer, "it refused the first delivery of a job: your receiver takes nothing")
	case !taken[1]:
		add(ReqReceiverNewer, "it refused epoch 2 after epoch 1: your receiver does not take a newer epoch")
	}
	if taken[0] && taken[1] && !taken[2] {
		add(ReqReceiverSame, "it refused epoch 2 when the same delivery came again: your receiver does not accept the same epoch again (a retry is not a zombie)")
	}
	if taken[3] {
		add(ReqReceiverOlder, "it took epoch 1 after epoch 2: your receiver does not refuse an older epoch")
	}
	if len(found) == 0 {
		return
	}
	seen := map[Requirement]bool{}
	for _, b := range r.Broken {
		seen[b.Requirement] = true
	}
	for _, b := range found {
		if !seen[b.Requirement] {
			r.Broken = append(r.Broken, b)
		}
	}
	r.sortBroken()
	if r.Pass {
		r.Pass, r.Mark = false, cellMark(false)
		r.Words = fmt.Sprintf("Your solution's %d cases end as the article's table says, but its receiver breaks rule 4 on its own.", len(r.Cases))
	}
}
