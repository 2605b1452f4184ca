package judge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// ReceiverView reads what a receiver holds and decided: an
// *engine.Receiver on the same database, or a standalone receiver over its
// HTTP API. Get returns an error that wraps engine.ErrJobNotFound when the
// receiver holds nothing for the job.
type ReceiverView interface {
	Get(ctx context.Context, jobID int64) (engine.Held, error)
	Decisions(ctx context.Context, jobID int64) ([]engine.DecisionRecord, error)
}

// EvaluateInput names what Evaluate looks at.
type EvaluateInput struct {
	Config experiments.RunConfig
	JobID  int64
	// ZombieTriedCommit tells a refused commit from one never sent: a
	// refused UPDATE leaves no trace in the database, so this one fact comes
	// from the runner, which saw the statement go out. Whether it landed is
	// still read from the database.
	ZombieTriedCommit bool
	// ZombieFence is what the zombie's refused commit statement said about
	// the row it judged (SQLEvent.Fenced.Reasons).
	ZombieFence []protocol.FenceReason
	// ZombieSkipped: in the keyed delivery, the zombie looked its key up
	// and did not call (a lookup leaves no decision at the receiver).
	ZombieSkipped bool
}

// Evaluate reads the job's row and history, in the lab jobs schema on db,
// and the receiver's state and decisions, and says what happened and
// whether it was safe.
func Evaluate(ctx context.Context, db engine.DB, schema string, r ReceiverView, in EvaluateInput) (protocol.Outcome, error) {
	o := protocol.Outcome{Ordering: in.Config.Ordering, Broken: in.Config.Broken.Names(), SameIdentity: in.Config.SameIdentity, ZombieFails: in.Config.ZombieFails,
		JobID: in.JobID, Violations: []protocol.Violation{}, Because: []string{}, Delivery: in.Config.Delivery,
		ZombieFence: []protocol.FenceReason{}, Reveal: []string{}, Effects: []protocol.Effect{}}
	if o.Delivery == "" {
		o.Delivery = experiments.DeliverDirect
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
		o.Receiver = protocol.FinalReceiver{Epoch: held.Epoch, PayloadFrom: protocol.ResultFrom(held.Payload)}
	}
	o.Final = protocol.FinalRow{Status: protocol.StatusOf(job.Status), Owner: job.Owner, Epoch: job.Epoch, ResultFrom: protocol.ResultFrom(job.Result)}

	o.ZombieCommit = experiments.CallNotAttempted
	if in.ZombieTriedCommit {
		o.ZombieCommit = experiments.CallRejected
		o.ZombieFence = append(o.ZombieFence, in.ZombieFence...)
	}
	for _, h := range history {
		if (h.Op == "complete" || h.Op == "fail" || h.Op == "retry") && protocol.WriterOf(h) == experiments.Zombie {
			o.ZombieCommit = experiments.CallAccepted
		}
	}
	o.ZombieReceiverCall = experiments.CallNotAttempted
	for _, d := range decisions {
		if protocol.ResultFrom(d.Payload) != experiments.Zombie {
			continue
		}
		switch {
		case d.Decision.Accepted():
			o.ZombieReceiverCall = experiments.CallAccepted
		case d.Decision == engine.Duplicate && o.ZombieReceiverCall == experiments.CallNotAttempted:
			o.ZombieReceiverCall = experiments.CallSkipped
		case o.ZombieReceiverCall == experiments.CallNotAttempted:
			o.ZombieReceiverCall = experiments.CallRejected
		}
	}
	if o.ZombieReceiverCall == experiments.CallAccepted && o.Receiver.PayloadFrom != experiments.Zombie {
		o.ZombieReceiverCall = experiments.CallAcceptedThenSuperseded
	}
	switch {
	case o.ZombieReceiverCall != experiments.CallNotAttempted:
	case o.Delivery == experiments.DeliverOutbox:
		o.ZombieReceiverCall = experiments.CallNeverSent
	case in.ZombieSkipped:
		o.ZombieReceiverCall = experiments.CallSkipped
	}
	if o.ZombieCommit == experiments.CallAccepted {
		o.ZombieFence = []protocol.FenceReason{}
	}
	for _, d := range decisions {
		if d.Decision.Accepted() {
			o.Effects = append(o.Effects, protocol.Effect{From: protocol.ResultFrom(d.Payload), Epoch: d.Epoch, Decision: protocol.DecisionOf(d.Decision), At: d.At.UTC().Format(time.RFC3339Nano)})
		}
	}
	switch o.ZombieCommit {
	case experiments.CallAccepted:
		o.Answer = experiments.AnswerSucceeds
	case experiments.CallRejected:
		o.Answer = experiments.AnswerRejected
	}

	vs := Violations(history, decisions, held)
	if job.Status != engine.StatusDone {
		vs = append(vs, unfinished(job.ID, job.Status))
	}
	Rank(vs)
	o.Violations = vs
	o.Because = because(vs, in.Config.Broken)
	o.Safe = len(vs) == 0
	o.Reveal = reveal(o, history)
	o.Table = table(o)
	o.Headline = protocol.Headline(o)
	o.Verdict = protocol.OutcomeVerdict(o)
	o.Derive()
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
func because(vs []protocol.Violation, broken playground.Guards) []string {
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
func table(o protocol.Outcome) []protocol.Cell {
	x, ok := experiments.ExpectedOutcome(o.Ordering)
	final := experiments.FinalWordsIn(o.Ordering, o.Final.Epoch, o.Final.ResultFrom, o.Receiver.PayloadFrom, string(o.Final.Status))
	return []protocol.Cell{
		{Column: protocol.ColumnCall, Got: string(o.ZombieReceiverCall), Words: o.ZombieReceiverCall.Words(), Expected: x.Words.Call,
			AsCorrect: ok && o.ZombieReceiverCall == x.ZombieReceiverCall},
		{Column: protocol.ColumnCommit, Got: string(o.ZombieCommit), Words: o.ZombieCommit.Words(), Expected: x.Words.Commit,
			AsCorrect: ok && o.ZombieCommit == x.ZombieCommit},
		{Column: protocol.ColumnFinal, Words: final, Expected: x.Words.Final,
			AsCorrect: ok && o.Final.Status == protocol.StatusDone && o.Final.Epoch == x.Epoch &&
				o.Final.ResultFrom == x.ResultFrom && o.Receiver.PayloadFrom == x.ReceiverFrom},
	}
}
