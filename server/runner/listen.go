package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/lab"
)

// rowChange is the payload the job_history trigger sends with NOTIFY.
type rowChange struct {
	Seq   int64     `json:"seq"`
	JobID int64     `json:"job_id"`
	Op    string    `json:"op"`
	At    time.Time `json:"at"`
	Old   *rowImage `json:"old"`
	New   rowImage  `json:"new"`
	App   string    `json:"app"`
}

type rowImage struct {
	Status     engine.Status `json:"status"`
	Owner      *string       `json:"owner"`
	Epoch      int64         `json:"epoch"`
	LeaseUntil *time.Time    `json:"lease_until"`
}

func (i rowImage) image() lab.RowImage {
	out := lab.RowImage{Status: i.Status, Epoch: i.Epoch, LeaseUntil: i.LeaseUntil}
	if i.Owner != nil {
		out.Owner = *i.Owner
	}
	return out
}

// event is the change as the protocol tells it.
func (c rowChange) event() *lab.RowEvent {
	e := &lab.RowEvent{HistorySeq: c.Seq, JobID: c.JobID, Op: lab.RowOp(c.Op), Writer: lab.LabelFromApp(c.App), App: c.App, New: c.New.image()}
	if c.Old != nil {
		old := c.Old.image()
		e.Old = &old
	}
	return e
}

// fromHistory is the change a history record tells, as a notification
// would have told it.
func fromHistory(h engine.HistoryRecord) rowChange {
	c := rowChange{Seq: h.Seq, JobID: h.JobID, Op: h.Op, At: h.At, App: h.App,
		New: rowImage{Status: engine.Status(h.NewStatus), Owner: h.NewOwner, Epoch: h.NewEpoch, LeaseUntil: h.NewLeaseUntil}}
	if h.OldStatus != nil {
		old := rowImage{Status: engine.Status(*h.OldStatus), Owner: h.OldOwner, LeaseUntil: h.OldLeaseUntil}
		if h.OldEpoch != nil {
			old.Epoch = *h.OldEpoch
		}
		c.Old = &old
	}
	return c
}

// listen LISTENs on the run's jobs schema's channel, through the server's
// one listening connection, and turns every row change Postgres reports
// into an event until the run ends. When notifications may have been
// missed (the connection broke and came back), it reads them from the
// jobs' history instead: the run's row events have no gap.
func (r *Run) listen(ctx context.Context) error {
	sub, err := r.env.Notify.Listen(ctx, r.spec.Schemas.Channel(), func(payload string) {
		var c rowChange
		if json.Unmarshal([]byte(payload), &c) == nil {
			r.tellRow(c)
		}
	}, func() { r.catchUp() })
	if err != nil {
		return fmt.Errorf("listen for row changes: %w", err)
	}
	r.cleanup(sub.Close)
	return nil
}

// tellRow makes a row change an event, once: a change told already (by a
// notification, or read back from the history) is not told again.
func (r *Run) tellRow(c rowChange) {
	r.mu.Lock()
	if c.Seq <= r.rowSeq {
		r.mu.Unlock()
		return
	}
	r.rowSeq = c.Seq
	r.mu.Unlock()
	row := c.event()
	r.noteLease(*row, c.At)
	r.emit(context.Background(), lab.Event{Kind: lab.KindRow, Actor: lab.ActorPostgres, At: c.At, Row: row})
}

// catchUp tells the row changes after the last one told, from the jobs'
// history: those whose notifications were lost.
func (r *Run) catchUp() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		r.mu.Lock()
		after := r.rowSeq
		r.mu.Unlock()
		hs, err := r.queue.HistoryAfter(ctx, after, 1000)
		if err != nil {
			r.env.Log.Warn("could not read the row changes a run missed", "run", r.spec.ID, "err", err)
			return
		}
		for _, h := range hs {
			r.tellRow(fromHistory(h))
		}
		if len(hs) < 1000 {
			return
		}
	}
}
