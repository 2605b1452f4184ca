package protocol

import "github.com/fencelab/fencelab/engine"

// The engine's values as the protocol names them: a job's status, a
// receiver's decision, a fence's reason. They are the protocol's own
// types, so that the engine may rename a value of its own without the
// page's JSON Schema noticing: this file is the one seam where the
// engine's values become the protocol's, each named in a table, and a
// value the table does not name is a bug its test finds.

// Status is a job's status.
type Status string

// The statuses.
const (
	StatusPending Status = "pending"
	StatusRunning Status = "running"
	StatusDone    Status = "done"
	StatusFailed  Status = "failed"
)

// Decision is what the receiver did with a delivery.
type Decision string

// The receiver's decisions. AcceptedOlder only happens with the
// receiver-check guard off: the receiver went backwards.
const (
	AcceptedFirst Decision = "accepted-first" // nothing was held for the job yet
	AcceptedNewer Decision = "accepted-newer" // replaced an older epoch
	AcceptedSame  Decision = "accepted-same"  // the same epoch again: an idempotent retry
	AcceptedOlder Decision = "accepted-older" // replaced a NEWER epoch (guard off)
	RefusedStale  Decision = "refused-stale"  // older than the newest held: refused
	Duplicate     Decision = "duplicate"      // a keyed receiver had the key already: no effect
)

// Accepted reports whether the delivery was taken: an effect happened.
func (d Decision) Accepted() bool { return d != RefusedStale && d != Duplicate && d != "" }

// FenceReason is one kept guard a fenced write failed.
type FenceReason string

// The reasons, in the order a fence lists them.
const (
	ReasonNotRunning   FenceReason = "not-running"
	ReasonOwnerChanged FenceReason = "owner-changed"
	ReasonEpochChanged FenceReason = "epoch-changed"
)

var (
	statuses = map[engine.Status]Status{
		engine.StatusPending: StatusPending, engine.StatusRunning: StatusRunning,
		engine.StatusDone: StatusDone, engine.StatusFailed: StatusFailed,
	}
	decisions = map[engine.Decision]Decision{
		engine.AcceptedFirst: AcceptedFirst, engine.AcceptedNewer: AcceptedNewer, engine.AcceptedSame: AcceptedSame,
		engine.AcceptedOlder: AcceptedOlder, engine.RefusedStale: RefusedStale, engine.Duplicate: Duplicate,
	}
	fenceReasons = map[engine.FenceReason]FenceReason{
		engine.ReasonNotRunning: ReasonNotRunning, engine.ReasonOwnerChanged: ReasonOwnerChanged,
		engine.ReasonEpochChanged: ReasonEpochChanged,
	}
)

// StatusOf is the engine's status s in the protocol's words ("" for "").
func StatusOf(s engine.Status) Status { return statuses[s] }

// DecisionOf is the engine's decision d in the protocol's words.
func DecisionOf(d engine.Decision) Decision { return decisions[d] }

// FenceReasonsOf is the engine's fence reasons in the protocol's words.
func FenceReasonsOf(rs []engine.FenceReason) []FenceReason {
	out := make([]FenceReason, 0, len(rs))
	for _, r := range rs {
		out = append(out, fenceReasons[r])
	}
	return out
}
