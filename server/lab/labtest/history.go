package labtest

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/fencelab/fencelab/server/lab/protocol"
)

// T0 is the moment a History's times count from.
var T0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// At is ms milliseconds after T0.
func At(ms int) time.Time { return T0.Add(time.Duration(ms) * time.Millisecond) }

// Payload is the result a worker's commit carries.
func Payload(worker string) json.RawMessage {
	b, _ := json.Marshal(protocol.Result{Worker: worker})
	return b
}

// History builds job 1's history as the history trigger records it, one
// change at a time, for the tests of what reads it (the judge, the
// narration). Recs is the history so far.
type History struct {
	Recs []protocol.HistoryRecord
	cur  protocol.HistoryRecord
}

// NewHistory is the history of job 1 just inserted, pending.
func NewHistory() *History {
	h := &History{cur: protocol.HistoryRecord{JobID: 1, NewStatus: "pending", App: "fencelab"}}
	h.Push("insert", 0)
	return h
}

// Push records the row as it is now, by op, at ms.
func (h *History) Push(op string, ms int) {
	r := h.cur
	r.Seq = int64(len(h.Recs) + 1)
	r.Op, r.At = op, At(ms)
	h.Recs = append(h.Recs, r)
}

// Change records worker ("A", "B") changing the row by op at ms: its
// status, epoch, lease and result; a claim also makes it the owner.
func (h *History) Change(op string, ms int, worker, status string, epoch int64, lease *time.Time, result json.RawMessage) {
	prev := h.cur
	oldStatus, oldEpoch := prev.NewStatus, prev.NewEpoch
	h.cur.OldStatus, h.cur.OldOwner, h.cur.OldEpoch, h.cur.OldLeaseUntil = &oldStatus, prev.NewOwner, &oldEpoch, prev.NewLeaseUntil
	h.cur.NewStatus, h.cur.NewEpoch, h.cur.NewLeaseUntil, h.cur.Result = status, epoch, lease, result
	if op == "claim" {
		owner := "worker-" + strings.ToLower(worker)
		h.cur.NewOwner = &owner
		h.cur.Attempts++
	}
	h.cur.App = protocol.AppName(worker)
	h.Push(op, ms)
}

// Claim records worker claiming the job at ms under epoch, for leaseMS.
func (h *History) Claim(ms int, worker string, epoch int64, leaseMS int) {
	until := At(ms + leaseMS)
	h.Change("claim", ms, worker, "running", epoch, &until, nil)
}

// Complete records worker completing the job at ms, at the row's epoch.
func (h *History) Complete(ms int, worker string) {
	h.Change("complete", ms, worker, "done", h.cur.NewEpoch, nil, Payload(worker))
}
