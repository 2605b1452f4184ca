package judge

import (
	"fmt"
	"sort"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

var (
	fenceGuards    = []playground.Guard{playground.StatusCheck, playground.OwnerCheck, playground.EpochCheck, playground.EpochIncrement}
	receiverGuards = []playground.Guard{playground.ReceiverCheck, playground.EpochIncrement}
)

// Violations walks a job's history and the receiver's decisions for it and
// returns every invariant they break, ranked (Rank), each said once. It
// needs nothing but what Postgres and the receiver recorded; held is what
// the receiver holds at the end, or nil for nothing.
func Violations(history []protocol.HistoryRecord, decisions []engine.DecisionRecord, held *engine.Held) []protocol.Violation {
	var out []protocol.Violation
	seen := map[string]bool{}
	add := func(key string, v protocol.Violation) {
		if !seen[key] {
			seen[key] = true
			out = append(out, v)
		}
	}
	var last, ended *protocol.HistoryRecord
	for i := range history {
		h := &history[i]
		w := protocol.WriterOf(*h)
		switch h.Op {
		case "claim":
			if h.OldStatus != nil && *h.OldStatus == string(protocol.StatusRunning) && h.OldLeaseUntil != nil && h.OldLeaseUntil.After(h.At) {
				prev := "the previous owner"
				if last != nil {
					prev = protocol.Who(protocol.WriterOf(*last))
				}
				left := h.OldLeaseUntil.Sub(h.At).Round(time.Millisecond)
				add("lease:"+h.App, protocol.Violation{Invariant: protocol.InvLeaseRespected, JobID: h.JobID, Worker: w, Guards: []playground.Guard{playground.DBClock},
					Text: fmt.Sprintf("%s claimed job %d while %s's lease still had %v to run on the database clock: two workers held the job at once.",
						protocol.UpperFirst(protocol.Who(w)), h.JobID, prev, left)})
			}
			if last != nil && h.NewEpoch <= last.NewEpoch {
				add("epoch:"+h.App, protocol.Violation{Invariant: protocol.InvEpochUnique, JobID: h.JobID, Worker: w, Guards: []playground.Guard{playground.EpochIncrement},
					Text: fmt.Sprintf("%s's claim holds epoch %d, no newer than %s's epoch %d: two owners shared one fencing token.",
						protocol.UpperFirst(protocol.Who(w)), h.NewEpoch, protocol.Who(protocol.WriterOf(*last)), last.NewEpoch)})
			}
			last = h
		case "expire":
			// The claim that found the lease run out on the job's last
			// attempt ended it: its writer never held the job, and it is no
			// write of the holder's. The job ends failed, taken from its
			// holder as a claim takes it: a write of the holder's after it
			// is as late as a zombie's.
			ended = h
		case "renew", "complete", "fail", "retry":
			if last != nil && ended != nil && ended.Seq > last.Seq && h.Seq > ended.Seq {
				add("ended:"+h.App+":"+h.Op, protocol.Violation{Invariant: protocol.InvStaleWrite, JobID: h.JobID, Worker: w, Op: h.Op, Guards: fenceGuards,
					Text: fmt.Sprintf("%s's late %s landed after job %d had been ended for good: its lease had run out on the last attempt, and a claim had failed it at epoch %d.",
						protocol.UpperFirst(protocol.Who(w)), opWords(h.Op), h.JobID, ended.NewEpoch)})
				continue
			}
			if last != nil && h.App != last.App {
				add("stale:"+h.App+":"+h.Op, protocol.Violation{Invariant: protocol.InvStaleWrite, JobID: h.JobID, Worker: w, Op: h.Op, Guards: fenceGuards,
					Text: fmt.Sprintf("%s's late %s landed after %s had claimed job %d at epoch %d: a write from a lost lease got through.",
						protocol.UpperFirst(protocol.Who(w)), opWords(h.Op), protocol.Who(protocol.WriterOf(*last)), h.JobID, last.NewEpoch)})
			}
		}
	}
	claimed := map[int64]bool{}
	for _, h := range history {
		if h.Op == "claim" {
			claimed[h.NewEpoch] = true
		}
	}
	for i := range decisions {
		d := &decisions[i]
		if d.Decision != engine.RefusedStale && d.Decision != engine.Duplicate && len(history) > 0 && !claimed[d.Epoch] {
			add(fmt.Sprintf("unknown:%d", d.Epoch), protocol.Violation{Invariant: protocol.InvReceiverKnown, JobID: d.JobID, Guards: []playground.Guard{},
				Text: fmt.Sprintf("The receiver took epoch %d for job %d, which no claim of the job ever held: a delivery that did not come from its workers.", d.Epoch, d.JobID)})
		}
		if d.Decision == engine.AcceptedOlder {
			prev := int64(-1)
			if d.PrevEpoch != nil {
				prev = *d.PrevEpoch
			}
			from := protocol.ResultFrom(d.Payload)
			add("backwards:"+d.Owner, protocol.Violation{Invariant: protocol.InvReceiverMonotonic, JobID: d.JobID, Worker: from, Guards: []playground.Guard{playground.ReceiverCheck},
				Text: fmt.Sprintf("The receiver accepted epoch %d from %s after it held epoch %d: it went backwards.", d.Epoch, protocol.Who(from), prev)})
		}
	}
	if last != nil && len(history) > 0 {
		owner := protocol.WriterOf(*last)
		end := history[len(history)-1]
		if end.NewStatus == string(protocol.StatusDone) {
			if from := protocol.ResultFrom(end.Result); from != owner {
				add("row", protocol.Violation{Invariant: protocol.InvRowLastOwner, JobID: end.JobID, Worker: from, Guards: fenceGuards,
					Text: fmt.Sprintf("The row ends with %s's result, but %s was the job's last owner (epoch %d).", protocol.Who(from), protocol.Who(owner), last.NewEpoch)})
			}
			if held != nil {
				if from := protocol.ResultFrom(held.Payload); from != owner {
					add("receiver", protocol.Violation{Invariant: protocol.InvReceiverLastOwner, JobID: end.JobID, Worker: from, Guards: receiverGuards,
						Text: fmt.Sprintf("The receiver ends with %s's payload (epoch %d), but %s was the job's last owner (epoch %d).",
							protocol.Who(from), held.Epoch, protocol.Who(owner), last.NewEpoch)})
				}
			}
		}
	}
	Rank(out)
	return out
}

// unfinished is the liveness violation of a job that did not end done.
func unfinished(jobID int64, status engine.Status) protocol.Violation {
	return protocol.Violation{Invariant: protocol.InvFinished, JobID: jobID, Guards: []playground.Guard{},
		Text: fmt.Sprintf("The job did not finish: it ends %s.", status)}
}

// Rank orders violations by how plainly they show what went wrong, in
// place and stably: a late commit that landed first, then a wrong result in
// the row, at the receiver, a receiver that went backwards, a claim of a
// live lease, a reused token, a late heartbeat, and last a job that did
// not finish.
func Rank(vs []protocol.Violation) {
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].Rank() < vs[j].Rank() })
}

func opWords(op string) string {
	switch op {
	case "complete":
		return "commit"
	case "renew":
		return "lease renewal"
	case "fail", "retry":
		return "failure report"
	}
	return op
}
