package experiments

import (
	"time"

	"github.com/fencelab/fencelab/server/fault"
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
	CaseClockSkew     CheckCase = "clock-skew"          // a hint: a worker whose clock runs ahead
	CaseSameIdentity  CheckCase = "same-identity"       // a hint: one name for both workers
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
	{c: CaseClockSkew, title: "a worker whose clock runs ahead", run: true, config: func(rc *RunConfig) { rc.Ordering = ClockSkew }},
	{c: CaseSameIdentity, title: "one name for both workers", run: true, config: func(rc *RunConfig) { rc.Ordering, rc.SameIdentity = NewOwnerFirst, true }},
	// One name for both, as the same-identity case: a fail fenced by the
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

// ProbeCases lists every case that is a probe, not a run, in the order a
// report names them.
func ProbeCases() []CheckCase {
	var cs []CheckCase
	for _, d := range caseDefs {
		if !d.run {
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

// caseAliases are the cases' older names, still understood: a case is
// named as the ordering or the run's field it plays.
var caseAliases = map[string]CheckCase{"clock-ahead": CaseClockSkew, "same-name": CaseSameIdentity}

// ParseCheckCase parses the name of a case that is a run, or its older
// name (caseAliases).
func ParseCheckCase(s string) (CheckCase, error) {
	for _, c := range CheckCases() {
		if string(c) == s {
			return c, nil
		}
	}
	if c, ok := caseAliases[s]; ok {
		return c, nil
	}
	return "", fault.Invalidf("unknown check case %q", s)
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

// RequirementOrder is the article's order of the requirements, Step 2's
// 1 to 4: the claim (it runs, takes a job, skips a locked one, takes an
// expired one, judges the lease on the database clock), the epoch it
// raises, the compare-and-set of complete and fail (and that they keep to
// their own row, and retry), the receiver. A report names its broken
// requirements in this order, so the first is the next to fix, whichever
// case found it.
var RequirementOrder = []Requirement{ReqRuns, ReqClaimTakes, ReqSkipLocked, ReqTakesExpired, ReqDBClock, ReqEpochRaised,
	ReqCompleteFence, ReqFailFence, ReqOwnRow, ReqFailRetries, ReqLands, ReqReceiverOlder, ReqReceiverNewer, ReqReceiverSame}

// Beyond says the requirement is fencelab's own, beyond the article's
// five: a fail that retries while attempts are left and ends the job on
// its last, which the article never asks for. A check names it in a note
// beside its verdict (CheckReport.Beyond) and passes without it.
func (r Requirement) Beyond() bool { return r == ReqFailRetries }

// Rule is the article's requirement (1 to 5, DESIGN's "rules the engine
// keeps") a requirement is a clause of; 0 for one beyond them. Rule 5,
// the test of both orderings with a real zombie, is the check itself.
func (r Requirement) Rule() int {
	switch r {
	case ReqRuns, ReqClaimTakes, ReqSkipLocked, ReqTakesExpired:
		return 1
	case ReqDBClock, ReqEpochRaised:
		return 2
	case ReqCompleteFence, ReqFailFence, ReqOwnRow, ReqLands:
		return 3
	case ReqReceiverOlder, ReqReceiverNewer, ReqReceiverSame:
		return 4
	}
	return 0
}

// CheckBroken is a requirement a case's run showed broken: what happened,
// then which rule that breaks, in one sentence.
type CheckBroken struct {
	Requirement Requirement `json:"requirement"`
	Case        CheckCase   `json:"case"`
	Words       string      `json:"words"`
}

func HasRequirement(bs []CheckBroken, r Requirement) bool {
	for _, b := range bs {
		if b.Requirement == r {
			return true
		}
	}
	return false
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
	// Played are the probes that ran, each a case of ProbeCases: a
	// report lists each with its mark.
	Played []CheckCase
}
