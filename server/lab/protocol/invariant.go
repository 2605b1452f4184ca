package protocol

import (
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

// Rank orders violations from the plainest to say first (a stale write) to the least.
func (v Violation) Rank() int {
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
