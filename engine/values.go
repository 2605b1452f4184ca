package engine

import "encoding/json"

// This file holds the values a job's row and the receiver's hold, which
// every statement reads or writes, and nothing that acts on them.

// Status is a job's state: pending → running → done or failed.
type Status string

// The four states of a job.
const (
	StatusPending Status = "pending"
	StatusRunning Status = "running"
	StatusDone    Status = "done"
	StatusFailed  Status = "failed"
)

// Delivery is one call to the external receiver: the job, the epoch the
// caller holds, who it is, and what it delivers.
type Delivery struct {
	JobID   int64           `json:"job_id"`
	Epoch   int64           `json:"epoch"`
	Owner   string          `json:"owner"`
	Payload json.RawMessage `json:"payload"`
}

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
	// Duplicate: a keyed receiver (one that knows no epochs) already has a
	// delivery for this key; this one changes nothing, and is not an error.
	Duplicate Decision = "duplicate"
)

// Accepted reports whether the delivery was taken: an effect happened.
func (d Decision) Accepted() bool { return d != RefusedStale && d != Duplicate && d != "" }
