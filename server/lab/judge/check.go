package judge

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// CheckInput is what one case's run came to: its outcome, or the error
// that stopped it.
type CheckInput struct {
	Case    experiments.CheckCase
	Run     string
	Outcome *protocol.Outcome
	Err     *protocol.Failure
	// Notes are facts of the run reported beside its verdict and never
	// judged: how each worker program exited, say.
	Notes []string
}

// JudgeCheck reads what each case's run came to and says what the
// solution breaks. A case whose run gave no outcome fails.
func JudgeCheck(in []CheckInput) protocol.CheckReport {
	rep := protocol.CheckReport{Pass: len(in) > 0, Cases: []protocol.CheckCaseResult{}, Broken: []experiments.CheckBroken{}}
	seen := map[experiments.Requirement]bool{}
	for _, ci := range in {
		cr := protocol.CheckCaseResult{Case: ci.Case, Title: ci.Case.Title(), Run: ci.Run, Table: []protocol.Cell{}, Broken: []experiments.CheckBroken{}, Notes: ci.Notes}
		switch {
		case ci.Outcome == nil:
			cr.Error = ci.Err
			if cr.Error == nil {
				cr.Error = &protocol.Failure{Code: protocol.ErrNoOutcome, Message: "the run ended without a verdict"}
			}
			// A run that could not finish for a requirement's sake (its
			// code is the requirement's name) names that requirement.
			q := experiments.ReqRuns
			if slices.Contains(experiments.RequirementOrder, experiments.Requirement(cr.Error.Code)) {
				q = experiments.Requirement(cr.Error.Code)
			}
			cr.Broken = append(cr.Broken, experiments.CheckBroken{Requirement: q, Case: ci.Case,
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
		cr.Mark = protocol.CaseMark(cr.OK)
		for _, b := range cr.Broken {
			if !seen[b.Requirement] {
				seen[b.Requirement] = true
				rep.Broken = append(rep.Broken, b)
			}
		}
		rep.Cases = append(rep.Cases, cr)
	}
	rep.Mark = protocol.CaseMark(rep.Pass)
	switch n := protocol.FailedCases(rep.Cases); {
	case rep.Pass:
		rep.Words = fmt.Sprintf("Your solution passes: all %d cases end as the article's table says.", len(rep.Cases))
	default:
		rep.Words = fmt.Sprintf("Your solution fails %d of %d cases.", n, len(rep.Cases))
	}
	rep.SortBroken()
	return rep
}

// brokenBy names the requirements a case's violations break, each from
// what the history and the receiver's log recorded.
func brokenBy(c experiments.CheckCase, o *protocol.Outcome) []experiments.CheckBroken {
	out := []experiments.CheckBroken{}
	add := func(r experiments.Requirement, format string, a ...any) {
		for _, b := range out {
			if b.Requirement == r {
				return
			}
		}
		out = append(out, experiments.CheckBroken{Requirement: r, Case: c, Words: c.Title() + ": " + fmt.Sprintf(format, a...)})
	}
	// Two owners that shared one token explain a late write that matched
	// it: the claim is to blame, not the compare-and-set.
	shared, stale := false, false
	for _, v := range o.Violations {
		shared = shared || v.Invariant == protocol.InvEpochUnique
		stale = stale || v.Invariant == protocol.InvStaleWrite
	}
	for _, v := range o.Violations {
		switch v.Invariant {
		case protocol.InvStaleWrite, protocol.InvFinished:
			// With one token for both, a late write matched it, and the
			// owner's own commit may then have found the row moved on.
			if shared {
				continue
			}
		}
		switch v.Invariant {
		case protocol.InvEpochUnique:
			add(experiments.ReqEpochRaised, "both claims held epoch %d: your claim does not raise the epoch", o.Final.Epoch)
		case protocol.InvLeaseRespected:
			add(experiments.ReqDBClock, "worker %s claimed the job while worker %s's lease still ran on the database clock: your claim judges the lease by the worker's own clock", experiments.NewOwner, experiments.Zombie)
		case protocol.InvStaleWrite:
			op := v.Op
			if o.ZombieFails {
				op = "fail" // its fail may write any status: done, say
			}
			switch op {
			case "fail", "retry":
				if o.SameIdentity {
					add(experiments.ReqFailFence, "the zombie's fail matched a row at epoch %d that its own name held: your fail does not compare-and-set on owner and epoch (with one name for both, the epoch alone tells them apart)", o.Final.Epoch)
				} else {
					add(experiments.ReqFailFence, "the zombie's fail matched a row at epoch %d: your fail does not compare-and-set on owner and epoch", o.Final.Epoch)
				}
			case "complete":
				if o.SameIdentity {
					add(experiments.ReqCompleteFence, "the zombie's commit matched a row at epoch %d that its own name held: your complete does not compare the epoch", o.Final.Epoch)
				} else {
					add(experiments.ReqCompleteFence, "the zombie's commit matched a row at epoch %d: your complete does not compare-and-set on owner and epoch", o.Final.Epoch)
				}
			}
		case protocol.InvReceiverMonotonic:
			older, newer := backwards(o.Effects)
			add(experiments.ReqReceiverOlder, "the receiver took epoch %d after epoch %d: your receiver does not refuse an older epoch", older, newer)
		case protocol.InvFinished:
			if stale {
				continue // the late write moved the row on: the owner's complete found it so
			}
			add(experiments.ReqLands, "the job ends %s: the owner's own complete did not land", o.Final.Status)
		}
	}
	if o.ZombieCommit == experiments.CallAccepted && !shared && !experiments.HasRequirement(out, experiments.ReqCompleteFence) && !experiments.HasRequirement(out, experiments.ReqFailFence) && o.Ordering != experiments.ClockSkew {
		if o.ZombieFails {
			add(experiments.ReqFailFence, "the zombie's fail landed: your fail does not compare-and-set on owner and epoch")
		} else {
			add(experiments.ReqCompleteFence, "the zombie's commit landed: your complete does not compare-and-set on owner and epoch")
		}
	}
	return out
}

// backwards finds the receiver's first step back: an accepted epoch older
// than one it took before.
func backwards(effects []protocol.Effect) (older, newer int64) {
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
func cellsBroken(c experiments.CheckCase, o *protocol.Outcome) []experiments.CheckBroken {
	var out []experiments.CheckBroken
	for _, cell := range o.Table {
		if cell.AsCorrect {
			continue
		}
		r := experiments.ReqCompleteFence
		switch {
		case cell.Column == protocol.ColumnCall && experiments.Call(cell.Got) == experiments.CallRejected:
			r = experiments.ReqReceiverNewer
		case cell.Column == protocol.ColumnCall:
			r = experiments.ReqReceiverOlder
		case cell.Column == protocol.ColumnFinal && o.Final.Epoch == 0 && o.Final.Status != protocol.StatusPending:
			out = append(out, experiments.CheckBroken{Requirement: experiments.ReqEpochRaised, Case: c,
				Words: fmt.Sprintf("%s: the job ends at epoch 0 although it was claimed: your claim does not raise the epoch", c.Title())})
			continue
		case cell.Column == protocol.ColumnFinal && o.Final.Epoch == 0:
			r = experiments.ReqClaimTakes
		case cell.Column == protocol.ColumnFinal && o.Receiver.Epoch != o.Final.Epoch:
			r = experiments.ReqReceiverNewer
		case cell.Column == protocol.ColumnFinal:
			r = experiments.ReqLands
		}
		out = append(out, experiments.CheckBroken{Requirement: r, Case: c,
			Words: fmt.Sprintf("%s: the %s was %q where the article's table says %q", c.Title(), protocol.ColumnWords(cell.Column), cell.Words, cell.Expected)})
	}
	return out
}
