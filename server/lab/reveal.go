package lab

import (
	"fmt"
	"strings"

	"github.com/fencelab/fencelab/engine"
)

// reveal tells what happened to the two workers' work, one sentence each,
// from the database's own history of the job and the receiver's decisions
// (o's effects): what A's commit did, what became of B's, and what the
// receiver was left with. It is what the prediction is revealed with.
func reveal(o Outcome, history []HistoryRecord) []string {
	var claimB, commitA, commitB *HistoryRecord
	idx := func(h *HistoryRecord) int64 {
		if h == nil {
			return 1 << 62
		}
		return h.Seq
	}
	for i := range history {
		h := &history[i]
		w := WriterOf(*h)
		switch {
		case h.Op == "claim" && w == NewOwner && claimB == nil:
			claimB = h
		case (h.Op == "complete" || h.Op == "fail" || h.Op == "retry") && w == Zombie && commitA == nil:
			commitA = h
		case (h.Op == "complete" || h.Op == "fail" || h.Op == "retry") && w == NewOwner && commitB == nil:
			commitB = h
		}
	}
	a, b := who(Zombie), who(NewOwner)
	if o.Ordering == ClockSkew {
		a, b = "worker A", "worker B"
	}
	var out []string

	switch {
	case commitA != nil && claimB != nil && idx(commitA) > idx(claimB) && derefStr(commitA.OldStatus) == string(engine.StatusRunning):
		// The row was B's since B's claim, whatever name B claimed it by.
		// The article's answer, "A's result replaces B's", in its words.
		out = append(out, fmt.Sprintf("%s's commit landed on top of %s's work: at %s the row, %s's at epoch %d and still running, went %s with %s's result. %s's result replaced %s's.",
			upperFirst(a), b, clock(commitA.At), b, deref(commitA.OldEpoch), commitA.NewStatus, a, upperFirst(a), b))
	case commitA != nil && claimB != nil && idx(commitA) > idx(claimB):
		out = append(out, fmt.Sprintf("%s's commit landed on a job %s had already finished: at %s the row went from %s's result to %s's.",
			upperFirst(a), b, clock(commitA.At), b, a))
	case commitA != nil:
		out = append(out, fmt.Sprintf("%s committed at epoch %d while it held the job.", upperFirst(a), commitA.NewEpoch))
	case o.ZombieCommit == CallRejected:
		s := fmt.Sprintf("%s's commit was refused", upperFirst(a))
		if hasReason(o.ZombieFence, engine.ReasonEpochChanged) {
			s += fmt.Sprintf(" by the fencing token: %s held epoch 1, the row was at epoch %d", a, o.Final.Epoch)
		}
		var rs []string
		for _, r := range o.ZombieFence {
			if r != engine.ReasonEpochChanged || !strings.Contains(s, "token") {
				rs = append(rs, reasonClause(r))
			}
		}
		if len(rs) > 0 {
			s += " (" + strings.Join(rs, "; ") + ")"
		}
		out = append(out, s+".")
	default:
		out = append(out, fmt.Sprintf("%s never committed.", upperFirst(a)))
	}

	switch {
	case claimB == nil:
		out = append(out, fmt.Sprintf("%s never held the job.", upperFirst(b)))
	case commitB != nil && commitA != nil && idx(commitB) > idx(commitA):
		out = append(out, fmt.Sprintf("%s's commit landed after it, on a job already marked done: the job was completed twice, and the row ends with %s's result.",
			upperFirst(b), who(o.Final.ResultFrom)))
	case commitB != nil:
		out = append(out, fmt.Sprintf("%s's commit landed at epoch %d: the row ends with %s's result.", upperFirst(b), commitB.NewEpoch, who(o.Final.ResultFrom)))
	case commitA != nil:
		out = append(out, fmt.Sprintf("%s's commit never landed: %s's result took its place, and %s's work was lost.", upperFirst(b), a, b))
	default:
		out = append(out, fmt.Sprintf("%s never committed.", upperFirst(b)))
	}

	var heard []string
	for _, e := range o.Effects {
		if e.From == Zombie {
			heard = append(heard, fmt.Sprintf("epoch %d", e.Epoch))
		}
	}
	switch {
	case o.Delivery == DeliverOutbox && len(heard) == 0:
		out = append(out, fmt.Sprintf("Nothing from %s ever reached the receiver: its delivery waited in the outbox for a commit that was fenced, so it was never written, let alone sent.", a))
	case len(heard) > 0 && o.Receiver.PayloadFrom != Zombie && o.Ordering != ClockSkew:
		out = append(out, fmt.Sprintf("%s was heard all the same: the receiver took its delivery (%s) — an email sent, money moved — before %s's newer one superseded it; the receiver ends with %s's, at epoch %d.",
			upperFirst(a), strings.Join(heard, ", "), b, who(o.Receiver.PayloadFrom), o.Receiver.Epoch))
	case o.Receiver.PayloadFrom != "":
		out = append(out, fmt.Sprintf("The receiver ends with %s's delivery, at epoch %d.", who(o.Receiver.PayloadFrom), o.Receiver.Epoch))
	default:
		out = append(out, "The receiver got nothing.")
	}
	return out
}

// reasonClause says a fence reason as a clause, without the row's values.
func reasonClause(r engine.FenceReason) string {
	switch r {
	case engine.ReasonNotRunning:
		return "the job was no longer running"
	case engine.ReasonOwnerChanged:
		return "another owner held the job"
	case engine.ReasonEpochChanged:
		return "the row's epoch had moved on"
	}
	return string(r)
}

func derefStr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
