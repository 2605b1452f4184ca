package protocol

import (
	"github.com/fencelab/fencelab/server/lab/experiments"
)

// FinalRow is the job row at the end of a run.
type FinalRow struct {
	Status     Status `json:"status"`
	Owner      string `json:"owner"`
	Epoch      int64  `json:"epoch"`
	ResultFrom string `json:"result_from"`
}

// FinalReceiver is what the receiver holds at the end of a run.
type FinalReceiver struct {
	Epoch       int64  `json:"epoch"`
	PayloadFrom string `json:"payload_from"`
}

// Cell is one cell of the article's table for a run: what happened, in a
// code where there is one and in words, beside the correct build's words,
// and whether the two agree.
type Cell struct {
	Column    Column `json:"column"`
	Got       string `json:"got,omitempty"` // the Call code (call and commit columns)
	Words     string `json:"words"`
	Expected  string `json:"expected"`
	AsCorrect bool   `json:"as_correct"`
	// Mark is AsCorrect as a mark (as-correct, not-as-correct): derived.
	Mark Mark `json:"mark,omitempty"`
}

// Outcome is the end of a scripted run, read from the database and the
// receiver, never from what the workers believe. Its words (Table,
// Violations, Verdict) are the ones the page shows.
type Outcome struct {
	Ordering     experiments.Ordering `json:"ordering"`
	Broken       []string             `json:"broken"`
	SameIdentity bool                 `json:"same_identity"`
	// ZombieFails: the zombie's late write was its fail, not its complete
	// (RunConfig.ZombieFails), whatever status that fail wrote.
	ZombieFails        bool             `json:"zombie_fails,omitempty"`
	JobID              int64            `json:"job_id"`
	ZombieReceiverCall experiments.Call `json:"zombie_receiver_call"`
	ZombieCommit       experiments.Call `json:"zombie_commit"`
	Final              FinalRow         `json:"final"`
	Receiver           FinalReceiver    `json:"receiver"`
	Safe               bool             `json:"safe"`
	// Violations lists every invariant the run broke, ranked.
	Violations []Violation `json:"violations"`
	// Because lists the broken guards that let the violations happen.
	Because  []string             `json:"because"`
	Delivery experiments.Delivery `json:"delivery"`
	// ZombieFence lists the kept guards that refused the zombie's commit,
	// as the commit's own statement judged them.
	ZombieFence []FenceReason `json:"zombie_fence"`
	// Answer is the article's prediction this run bears out: what happened
	// to A's commit.
	Answer experiments.Answer `json:"answer,omitempty"`
	// Reveal tells what happened, from the database's own history and the
	// receiver's log, one sentence each: what A's commit did to B's work,
	// what became of B's, and what the receiver was left with.
	Reveal []string `json:"reveal"`
	// Effects are the deliveries the receiver took, in order: each one an
	// effect that happened (an email sent, money moved), even when a newer
	// epoch superseded it later.
	Effects []Effect `json:"effects"`
	Table   []Cell   `json:"table"`
	// Headline is the verdict's first sentence; Verdict is all of it:
	// the headline and every further violation.
	Headline string `json:"headline"`
	Verdict  string `json:"verdict"`

	// The fields below are derived from the ones above, once, here
	// (derive), when the outcome is made and again whenever it is
	// encoded: a run recorded before they existed carries them too.

	// Mark is Safe as a mark: safe or unsafe.
	Mark Mark `json:"mark,omitempty"`
	// Zombie is the label of the worker that was the zombie in this run
	// (ZombieOf its ordering), or "" when none was.
	Zombie string `json:"zombie,omitempty"`
	// Also are the further violations' words, each once: the ones the
	// headline does not say.
	Also []string `json:"also,omitempty"`
	// LeasesAlone says nothing but the lease guarded the job: every check
	// the leases-alone style turns off was off. The article's prediction
	// is answered by such a run.
	LeasesAlone bool `json:"leases_alone,omitempty"`
	// Correct says the run was the correct build: every guard on, direct
	// delivery, two names.
	Correct bool `json:"correct,omitempty"`
}

// Effect is one delivery the receiver took.
type Effect struct {
	From     string   `json:"from"` // the worker label in its payload
	Epoch    int64    `json:"epoch"`
	Decision Decision `json:"decision"`
	At       string   `json:"at"`
	// Zombie says the zombie made this delivery; Badge is its decision's
	// badge key. Both are derived with the outcome's.
	Zombie bool   `json:"zombie,omitempty"`
	Badge  string `json:"badge,omitempty"`
}
