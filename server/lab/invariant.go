package lab

import (
	"fmt"
	"sort"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
)

// Invariant names a rule a correct build keeps. Check looks for each one
// in what Postgres and the receiver recorded.
type Invariant string

// The invariants.
const (
	InvStaleWrite        Invariant = "stale-write"         // no write lands from a worker whose claim was taken over
	InvEpochUnique       Invariant = "epoch-unique"        // every claim holds a newer epoch than the one before
	InvLeaseRespected    Invariant = "lease-respected"     // no claim while the previous lease is live on the database clock
	InvReceiverMonotonic Invariant = "receiver-monotonic"  // the receiver's epoch for a job never goes backwards
	InvReceiverKnown     Invariant = "receiver-known"      // the receiver takes only epochs a claim of the job held
	InvRowLastOwner      Invariant = "row-last-owner"      // the finished row holds its last owner's result
	InvReceiverLastOwner Invariant = "receiver-last-owner" // the receiver holds the last owner's result
	InvFinished          Invariant = "finished"            // the job ends done (liveness, not safety)
)

// Violation is one broken invariant: its code, the job and worker it is
// about, the guards whose absence lets it happen, and the sentence that
// says it.
type Violation struct {
	Invariant Invariant          `json:"invariant"`
	JobID     int64              `json:"job_id"`
	Worker    string             `json:"worker,omitempty"` // the worker whose write or claim broke it
	Op        string             `json:"op,omitempty"`     // a stale write: the history op that landed
	Guards    []playground.Guard `json:"guards"`
	Text      string             `json:"text"`
}

var (
	fenceGuards    = []playground.Guard{playground.StatusCheck, playground.OwnerCheck, playground.EpochCheck, playground.EpochIncrement}
	receiverGuards = []playground.Guard{playground.ReceiverCheck, playground.EpochIncrement}
)

// Check walks a job's history and the receiver's decisions for it and
// returns every invariant they break, ranked (Rank), each said once. It
// needs nothing but what Postgres and the receiver recorded; held is what
// the receiver holds at the end, or nil for nothing.
func Check(history []HistoryRecord, decisions []engine.DecisionRecord, held *engine.Held) []Violation {
	var out []Violation
	seen := map[string]bool{}
	add := func(key string, v Violation) {
		if !seen[key] {
			seen[key] = true
			out = append(out, v)
		}
	}
	var last, ended *HistoryRecord
	for i := range history {
		h := &history[i]
		w := WriterOf(*h)
		switch h.Op {
		case "claim":
			if h.OldStatus != nil && *h.OldStatus == string(engine.StatusRunning) && h.OldLeaseUntil != nil && h.OldLeaseUntil.After(h.At) {
				prev := "the previous owner"
				if last != nil {
					prev = who(WriterOf(*last))
				}
				left := h.OldLeaseUntil.Sub(h.At).Round(time.Millisecond)
				add("lease:"+h.App, Violation{Invariant: InvLeaseRespected, JobID: h.JobID, Worker: w, Guards: []playground.Guard{playground.DBClock},
					Text: fmt.Sprintf("%s claimed job %d while %s's lease still had %v to run on the database clock: two workers held the job at once.",
						upperFirst(who(w)), h.JobID, prev, left)})
			}
			if last != nil && h.NewEpoch <= last.NewEpoch {
				add("epoch:"+h.App, Violation{Invariant: InvEpochUnique, JobID: h.JobID, Worker: w, Guards: []playground.Guard{playground.EpochIncrement},
					Text: fmt.Sprintf("%s's claim holds epoch %d, no newer than %s's epoch %d: two owners shared one fencing token.",
						upperFirst(who(w)), h.NewEpoch, who(WriterOf(*last)), last.NewEpoch)})
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
				add("ended:"+h.App+":"+h.Op, Violation{Invariant: InvStaleWrite, JobID: h.JobID, Worker: w, Op: h.Op, Guards: fenceGuards,
					Text: fmt.Sprintf("%s's late %s landed after job %d had been ended for good: its lease had run out on the last attempt, and a claim had failed it at epoch %d.",
						upperFirst(who(w)), opWords(h.Op), h.JobID, ended.NewEpoch)})
				continue
			}
			if last != nil && h.App != last.App {
				add("stale:"+h.App+":"+h.Op, Violation{Invariant: InvStaleWrite, JobID: h.JobID, Worker: w, Op: h.Op, Guards: fenceGuards,
					Text: fmt.Sprintf("%s's late %s landed after %s had claimed job %d at epoch %d: a write from a lost lease got through.",
						upperFirst(who(w)), opWords(h.Op), who(WriterOf(*last)), h.JobID, last.NewEpoch)})
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
			add(fmt.Sprintf("unknown:%d", d.Epoch), Violation{Invariant: InvReceiverKnown, JobID: d.JobID, Guards: []playground.Guard{},
				Text: fmt.Sprintf("The receiver took epoch %d for job %d, which no claim of the job ever held: a delivery that did not come from its workers.", d.Epoch, d.JobID)})
		}
		if d.Decision == engine.AcceptedOlder {
			prev := int64(-1)
			if d.PrevEpoch != nil {
				prev = *d.PrevEpoch
			}
			from := ResultFrom(d.Payload)
			add("backwards:"+d.Owner, Violation{Invariant: InvReceiverMonotonic, JobID: d.JobID, Worker: from, Guards: []playground.Guard{playground.ReceiverCheck},
				Text: fmt.Sprintf("The receiver accepted epoch %d from %s after it held epoch %d: it went backwards.", d.Epoch, who(from), prev)})
		}
	}
	if last != nil && len(history) > 0 {
		owner := WriterOf(*last)
		end := history[len(history)-1]
		if end.NewStatus == string(engine.StatusDone) {
			if from := ResultFrom(end.Result); from != owner {
				add("row", Violation{Invariant: InvRowLastOwner, JobID: end.JobID, Worker: from, Guards: fenceGuards,
					Text: fmt.Sprintf("The row ends with %s's result, but %s was the job's last owner (epoch %d).", who(from), who(owner), last.NewEpoch)})
			}
			if held != nil {
				if from := ResultFrom(held.Payload); from != owner {
					add("receiver", Violation{Invariant: InvReceiverLastOwner, JobID: end.JobID, Worker: from, Guards: receiverGuards,
						Text: fmt.Sprintf("The receiver ends with %s's payload (epoch %d), but %s was the job's last owner (epoch %d).",
							who(from), held.Epoch, who(owner), last.NewEpoch)})
				}
			}
		}
	}
	Rank(out)
	return out
}

// unfinished is the liveness violation of a job that did not end done.
func unfinished(jobID int64, status engine.Status) Violation {
	return Violation{Invariant: InvFinished, JobID: jobID, Guards: []playground.Guard{},
		Text: fmt.Sprintf("The job did not finish: it ends %s.", status)}
}

// Rank orders violations by how plainly they show what went wrong, in
// place and stably: a late commit that landed first, then a wrong result in
// the row, at the receiver, a receiver that went backwards, a claim of a
// live lease, a reused token, a late heartbeat, and last a job that did
// not finish.
func Rank(vs []Violation) {
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].rank() < vs[j].rank() })
}

func (v Violation) rank() int {
	switch v.Invariant {
	case InvStaleWrite:
		if v.Op == "renew" {
			return 6
		}
		return 0
	case InvRowLastOwner:
		return 1
	case InvReceiverLastOwner:
		return 2
	case InvReceiverMonotonic, InvReceiverKnown:
		return 3
	case InvLeaseRespected:
		return 4
	case InvEpochUnique:
		return 5
	}
	return 7
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
