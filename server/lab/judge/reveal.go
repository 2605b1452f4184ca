package judge

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// reveal tells what happened to the two workers' work, one sentence each,
// from the database's own history of the job and the receiver's decisions
// (o's effects): what A's commit did, what became of B's, and what the
// receiver was left with. It is what the prediction is revealed with.
func reveal(o protocol.Outcome, history []protocol.HistoryRecord) []string {
	var claimB, commitA, commitB *protocol.HistoryRecord
	idx := func(h *protocol.HistoryRecord) int64 {
		if h == nil {
			return 1 << 62
		}
		return h.Seq
	}
	for i := range history {
		h := &history[i]
		w := protocol.WriterOf(*h)
		switch {
		case h.Op == "claim" && w == experiments.NewOwner && claimB == nil:
			claimB = h
		case (h.Op == "complete" || h.Op == "fail" || h.Op == "retry") && w == experiments.Zombie && commitA == nil:
			commitA = h
		case (h.Op == "complete" || h.Op == "fail" || h.Op == "retry") && w == experiments.NewOwner && commitB == nil:
			commitB = h
		}
	}
	a, b := protocol.Who(experiments.Zombie), protocol.Who(experiments.NewOwner)
	if o.Ordering == experiments.ClockSkew {
		a, b = "worker A", "worker B"
	}
	var out []string

	switch {
	case commitA != nil && claimB != nil && idx(commitA) > idx(claimB) && derefStr(commitA.OldStatus) == string(protocol.StatusRunning):
		// The row was B's since B's claim, whatever name B claimed it by.
		// The article's answer, "A's result replaces B's", in its words.
		out = append(out, fmt.Sprintf("%s's commit landed on top of %s's work: at %s the row, %s's at epoch %d and still running, went %s with %s's result. %s's result replaced %s's.",
			protocol.UpperFirst(a), b, protocol.ClockTime(commitA.At), b, protocol.Int64Of(commitA.OldEpoch), commitA.NewStatus, a, protocol.UpperFirst(a), b))
	case commitA != nil && claimB != nil && idx(commitA) > idx(claimB):
		out = append(out, fmt.Sprintf("%s's commit landed on a job %s had already finished: at %s the row went from %s's result to %s's.",
			protocol.UpperFirst(a), b, protocol.ClockTime(commitA.At), b, a))
	case commitA != nil:
		out = append(out, fmt.Sprintf("%s committed at epoch %d while it held the job.", protocol.UpperFirst(a), commitA.NewEpoch))
	case o.ZombieCommit == experiments.CallRejected:
		s := fmt.Sprintf("%s's commit was refused", protocol.UpperFirst(a))
		if slices.Contains(o.ZombieFence, protocol.ReasonEpochChanged) {
			s += fmt.Sprintf(" by the fencing token: %s held epoch 1, the row was at epoch %d", a, o.Final.Epoch)
		}
		var rs []string
		for _, r := range o.ZombieFence {
			if r != protocol.ReasonEpochChanged || !strings.Contains(s, "token") {
				rs = append(rs, protocol.FenceReasonPast(r))
			}
		}
		if len(rs) > 0 {
			s += " (" + strings.Join(rs, "; ") + ")"
		}
		out = append(out, s+".")
	default:
		out = append(out, fmt.Sprintf("%s never committed.", protocol.UpperFirst(a)))
	}

	switch {
	case claimB == nil:
		out = append(out, fmt.Sprintf("%s never held the job.", protocol.UpperFirst(b)))
	case commitB != nil && commitA != nil && idx(commitB) > idx(commitA):
		out = append(out, fmt.Sprintf("%s's commit landed after it, on a job already marked done: the job was completed twice, and the row ends with %s's result.",
			protocol.UpperFirst(b), protocol.Who(o.Final.ResultFrom)))
	case commitB != nil:
		out = append(out, fmt.Sprintf("%s's commit landed at epoch %d: the row ends with %s's result.", protocol.UpperFirst(b), commitB.NewEpoch, protocol.Who(o.Final.ResultFrom)))
	case commitA != nil:
		out = append(out, fmt.Sprintf("%s's commit never landed: %s's result took its place, and %s's work was lost.", protocol.UpperFirst(b), a, b))
	default:
		out = append(out, fmt.Sprintf("%s never committed.", protocol.UpperFirst(b)))
	}

	var heard []string
	for _, e := range o.Effects {
		if e.From == experiments.Zombie {
			heard = append(heard, fmt.Sprintf("epoch %d", e.Epoch))
		}
	}
	switch {
	case o.Delivery == experiments.DeliverOutbox && len(heard) == 0:
		out = append(out, fmt.Sprintf("Nothing from %s ever reached the receiver: its delivery waited in the outbox for a commit that was fenced, so it was never written, let alone sent.", a))
	case len(heard) > 0 && o.Receiver.PayloadFrom != experiments.Zombie && o.Ordering != experiments.ClockSkew:
		out = append(out, fmt.Sprintf("%s was heard all the same: the receiver took its delivery (%s) — an email sent, money moved — before %s's newer one superseded it; the receiver ends with %s's, at epoch %d.",
			protocol.UpperFirst(a), strings.Join(heard, ", "), b, protocol.Who(o.Receiver.PayloadFrom), o.Receiver.Epoch))
	case o.Receiver.PayloadFrom != "":
		out = append(out, fmt.Sprintf("The receiver ends with %s's delivery, at epoch %d.", protocol.Who(o.Receiver.PayloadFrom), o.Receiver.Epoch))
	default:
		out = append(out, "The receiver got nothing.")
	}
	return out
}

func derefStr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
