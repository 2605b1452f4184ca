package lab

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
)

// ReceiverView reads what a receiver holds and decided: an
// *engine.Receiver on the same database, or a standalone receiver over its
// HTTP API. Get returns an error that wraps engine.ErrJobNotFound when the
// receiver holds nothing for the job.
type ReceiverView interface {
	Get(ctx context.Context, jobID int64) (engine.Held, error)
	Decisions(ctx context.Context, jobID int64) ([]engine.DecisionRecord, error)
}

// Call is what became of one of the zombie's calls.
type Call string

// The values of Outcome.ZombieReceiverCall and Outcome.ZombieCommit.
const (
	CallRejected               Call = "rejected"
	CallAccepted               Call = "accepted"
	CallAcceptedThenSuperseded Call = "accepted_then_superseded"
	CallNotAttempted           Call = "not_attempted"
	// CallNeverSent: the outbox delivery; the zombie's delivery waited for
	// a commit that was fenced, so it was never written, let alone sent.
	CallNeverSent Call = "never_sent"
	// CallSkipped: the keyed delivery; the zombie looked its key up, found
	// it taken, and did not call.
	CallSkipped Call = "skipped"
)

// FinalRow is the job row at the end of a run.
type FinalRow struct {
	Status     engine.Status `json:"status"`
	Owner      string        `json:"owner"`
	Epoch      int64         `json:"epoch"`
	ResultFrom string        `json:"result_from"`
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
	Ordering     Ordering `json:"ordering"`
	Broken       []string `json:"broken"`
	SameIdentity bool     `json:"same_identity"`
	// ZombieFails: the zombie's late write was its fail, not its complete
	// (RunConfig.ZombieFails), whatever status that fail wrote.
	ZombieFails        bool          `json:"zombie_fails,omitempty"`
	JobID              int64         `json:"job_id"`
	ZombieReceiverCall Call          `json:"zombie_receiver_call"`
	ZombieCommit       Call          `json:"zombie_commit"`
	Final              FinalRow      `json:"final"`
	Receiver           FinalReceiver `json:"receiver"`
	Safe               bool          `json:"safe"`
	// Violations lists every invariant the run broke, ranked.
	Violations []Violation `json:"violations"`
	// Because lists the broken guards that let the violations happen.
	Because  []string `json:"because"`
	Delivery Delivery `json:"delivery"`
	// ZombieFence lists the kept guards that refused the zombie's commit,
	// as the commit's own statement judged them.
	ZombieFence []engine.FenceReason `json:"zombie_fence"`
	// Answer is the article's prediction this run bears out: what happened
	// to A's commit.
	Answer Answer `json:"answer,omitempty"`
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
	From     string          `json:"from"` // the worker label in its payload
	Epoch    int64           `json:"epoch"`
	Decision engine.Decision `json:"decision"`
	At       string          `json:"at"`
	// Zombie says the zombie made this delivery; Badge is its decision's
	// badge key. Both are derived with the outcome's.
	Zombie bool   `json:"zombie,omitempty"`
	Badge  string `json:"badge,omitempty"`
}

// Answer is one of the article's answers to its question: with leases
// alone, what happens to A's commit?
type Answer string

// The answers, in the article's order.
const (
	AnswerRejected Answer = "rejected" // Postgres rejects it, because the lease expired
	AnswerSucceeds Answer = "succeeds" // It succeeds, and A's result replaces B's
	AnswerBlocks   Answer = "blocks"   // It blocks until B finishes
)

// Answers lists the article's answers in its order.
func Answers() []Answer { return []Answer{AnswerRejected, AnswerSucceeds, AnswerBlocks} }

// Expected is what a correct build shows for an ordering: the article's
// table, and its row for the crash and the skewed clock. It is what each
// run's cells are marked against; the tests check that the engine meets it.
type Expected struct {
	ZombieReceiverCall Call          `json:"zombie_receiver_call"`
	ZombieCommit       Call          `json:"zombie_commit"`
	Epoch              int64         `json:"epoch"`
	ResultFrom         string        `json:"result_from"`
	ReceiverFrom       string        `json:"receiver_from"`
	Words              ExpectedWords `json:"words"`
}

// ExpectedWords is the correct build's row of the article's table, in words.
type ExpectedWords struct {
	Call   string `json:"call"`
	Commit string `json:"commit"`
	Final  string `json:"final"`
}

// ExpectedOutcome returns the correct build's outcome for an ordering;
// free play has none.
func ExpectedOutcome(o Ordering) (Expected, bool) {
	var x Expected
	switch o {
	case NewOwnerFirst:
		x = Expected{ZombieReceiverCall: CallRejected, ZombieCommit: CallRejected, Epoch: 2, ResultFrom: NewOwner, ReceiverFrom: NewOwner}
	case ZombieFirst:
		x = Expected{ZombieReceiverCall: CallAcceptedThenSuperseded, ZombieCommit: CallRejected, Epoch: 2, ResultFrom: NewOwner, ReceiverFrom: NewOwner}
	case OwnerDoneFirst:
		x = Expected{ZombieReceiverCall: CallRejected, ZombieCommit: CallRejected, Epoch: 2, ResultFrom: NewOwner, ReceiverFrom: NewOwner}
	case CrashBeforeCommit:
		x = Expected{ZombieReceiverCall: CallAcceptedThenSuperseded, ZombieCommit: CallNotAttempted, Epoch: 2, ResultFrom: NewOwner, ReceiverFrom: NewOwner}
	case ClockSkew:
		x = Expected{ZombieReceiverCall: CallAccepted, ZombieCommit: CallAccepted, Epoch: 1, ResultFrom: Zombie, ReceiverFrom: Zombie}
	default:
		return Expected{}, false
	}
	x.Words = ExpectedWords{Call: x.ZombieReceiverCall.Words(), Commit: x.ZombieCommit.Words(),
		Final: FinalWordsIn(o, x.Epoch, x.ResultFrom, x.ReceiverFrom, engine.StatusDone)}
	return x, true
}

// EvaluateInput names what Evaluate looks at.
type EvaluateInput struct {
	Config RunConfig
	JobID  int64
	// ZombieTriedCommit tells a refused commit from one never sent: a
	// refused UPDATE leaves no trace in the database, so this one fact comes
	// from the runner, which saw the statement go out. Whether it landed is
	// still read from the database.
	ZombieTriedCommit bool
	// ZombieFence is what the zombie's refused commit statement said about
	// the row it judged (SQLEvent.Fenced.Reasons).
	ZombieFence []engine.FenceReason
	// ZombieSkipped: in the keyed delivery, the zombie looked its key up
	// and did not call (a lookup leaves no decision at the receiver).
	ZombieSkipped bool
}

// Evaluate reads the job's row and history, in the lab jobs schema on db,
// and the receiver's state and decisions, and says what happened and
// whether it was safe.
func Evaluate(ctx context.Context, db engine.DB, schema string, r ReceiverView, in EvaluateInput) (Outcome, error) {
	o := Outcome{Ordering: in.Config.Ordering, Broken: in.Config.Broken.Names(), SameIdentity: in.Config.SameIdentity, ZombieFails: in.Config.ZombieFails,
		JobID: in.JobID, Violations: []Violation{}, Because: []string{}, Delivery: in.Config.Delivery,
		ZombieFence: []engine.FenceReason{}, Reveal: []string{}, Effects: []Effect{}}
	if o.Delivery == "" {
		o.Delivery = DeliverDirect
	}
	q, err := engine.NewQueue(db, engine.QueueConfig{Schema: schema})
	if err != nil {
		return o, fmt.Errorf("evaluate: %w", err)
	}
	job, err := q.Get(ctx, in.JobID)
	if err != nil {
		return o, fmt.Errorf("evaluate: %w", err)
	}
	history, err := History(ctx, db, schema, in.JobID)
	if err != nil {
		return o, fmt.Errorf("evaluate: %w", err)
	}
	decisions, err := r.Decisions(ctx, in.JobID)
	if err != nil {
		return o, fmt.Errorf("evaluate: %w", err)
	}
	held, err := heldBy(ctx, r, in.JobID)
	if err != nil {
		return o, fmt.Errorf("evaluate: %w", err)
	}
	if held != nil {
		o.Receiver = FinalReceiver{Epoch: held.Epoch, PayloadFrom: ResultFrom(held.Payload)}
	}
	o.Final = FinalRow{Status: job.Status, Owner: job.Owner, Epoch: job.Epoch, ResultFrom: ResultFrom(job.Result)}

	o.ZombieCommit = CallNotAttempted
	if in.ZombieTriedCommit {
		o.ZombieCommit = CallRejected
		o.ZombieFence = append(o.ZombieFence, in.ZombieFence...)
	}
	for _, h := range history {
		if (h.Op == "complete" || h.Op == "fail" || h.Op == "retry") && WriterOf(h) == Zombie {
			o.ZombieCommit = CallAccepted
		}
	}
	o.ZombieReceiverCall = CallNotAttempted
	for _, d := range decisions {
		if ResultFrom(d.Payload) != Zombie {
			continue
		}
		switch {
		case d.Decision.Accepted():
			o.ZombieReceiverCall = CallAccepted
		case d.Decision == engine.Duplicate && o.ZombieReceiverCall == CallNotAttempted:
			o.ZombieReceiverCall = CallSkipped
		case o.ZombieReceiverCall == CallNotAttempted:
			o.ZombieReceiverCall = CallRejected
		}
	}
	if o.ZombieReceiverCall == CallAccepted && o.Receiver.PayloadFrom != Zombie {
		o.ZombieReceiverCall = CallAcceptedThenSuperseded
	}
	switch {
	case o.ZombieReceiverCall != CallNotAttempted:
	case o.Delivery == DeliverOutbox:
		o.ZombieReceiverCall = CallNeverSent
	case in.ZombieSkipped:
		o.ZombieReceiverCall = CallSkipped
	}
	if o.ZombieCommit == CallAccepted {
		o.ZombieFence = []engine.FenceReason{}
	}
	for _, d := range decisions {
		if d.Decision.Accepted() {
			o.Effects = append(o.Effects, Effect{From: ResultFrom(d.Payload), Epoch: d.Epoch, Decision: d.Decision, At: d.At.UTC().Format(time.RFC3339Nano)})
		}
	}
	switch o.ZombieCommit {
	case CallAccepted:
		o.Answer = AnswerSucceeds
	case CallRejected:
		o.Answer = AnswerRejected
	}

	vs := Check(history, decisions, held)
	if job.Status != engine.StatusDone {
		vs = append(vs, unfinished(job.ID, job.Status))
	}
	Rank(vs)
	o.Violations = vs
	o.Because = because(vs, in.Config.Broken)
	o.Safe = len(vs) == 0
	o.Reveal = reveal(o, history)
	o.Table = table(o)
	o.Headline = headline(o)
	o.Verdict = verdict(o)
	o.derive()
	return o, nil
}

// heldBy reads what the receiver holds for a job: nil when it holds
// nothing, an error when it could not be read.
func heldBy(ctx context.Context, r ReceiverView, jobID int64) (*engine.Held, error) {
	h, err := r.Get(ctx, jobID)
	switch {
	case errors.Is(err, engine.ErrJobNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &h, nil
}

// because lists, in guard order, the broken guards whose absence let the
// violations happen.
func because(vs []Violation, broken playground.Guards) []string {
	hit := map[playground.Guard]bool{}
	for _, v := range vs {
		for _, g := range v.Guards {
			if !broken.On(g) {
				hit[g] = true
			}
		}
	}
	out := []string{}
	for _, g := range playground.AllGuards() {
		if hit[g] {
			out = append(out, g.String())
		}
	}
	return out
}

// table fills the article's table row for o, cell by cell, against the
// correct build.
func table(o Outcome) []Cell {
	x, ok := ExpectedOutcome(o.Ordering)
	final := FinalWordsIn(o.Ordering, o.Final.Epoch, o.Final.ResultFrom, o.Receiver.PayloadFrom, o.Final.Status)
	return []Cell{
		{Column: ColumnCall, Got: string(o.ZombieReceiverCall), Words: o.ZombieReceiverCall.Words(), Expected: x.Words.Call,
			AsCorrect: ok && o.ZombieReceiverCall == x.ZombieReceiverCall},
		{Column: ColumnCommit, Got: string(o.ZombieCommit), Words: o.ZombieCommit.Words(), Expected: x.Words.Commit,
			AsCorrect: ok && o.ZombieCommit == x.ZombieCommit},
		{Column: ColumnFinal, Words: final, Expected: x.Words.Final,
			AsCorrect: ok && o.Final.Status == engine.StatusDone && o.Final.Epoch == x.Epoch &&
				o.Final.ResultFrom == x.ResultFrom && o.Receiver.PayloadFrom == x.ReceiverFrom},
	}
}
