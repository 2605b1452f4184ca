package protocol

import (
	"encoding/json"
	"time"
)

// HistoryRecord is one change to a job as Postgres itself recorded it: the
// job_history trigger (sql/history.sql) writes one for every insert and
// update of a job row, with the database time and the application_name of
// the connection that made it. It is the queue's own account of what
// happened, independent of what any worker believes.
type HistoryRecord struct {
	Seq           int64           `json:"seq"`
	JobID         int64           `json:"job_id"`
	Op            string          `json:"op"` // a RowOp: insert, claim, renew, complete, fail, expire, retry, update
	At            time.Time       `json:"at"`
	OldStatus     *string         `json:"old_status"`
	NewStatus     string          `json:"new_status"`
	OldOwner      *string         `json:"old_owner"`
	NewOwner      *string         `json:"new_owner"`
	OldEpoch      *int64          `json:"old_epoch"`
	NewEpoch      int64           `json:"new_epoch"`
	OldLeaseUntil *time.Time      `json:"old_lease_until"`
	NewLeaseUntil *time.Time      `json:"new_lease_until"`
	Attempts      int             `json:"attempts"`
	Result        json.RawMessage `json:"result"`
	App           string          `json:"app"` // the writer's application_name
}
