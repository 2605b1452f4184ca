package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
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

func (i rowImage) image() protocol.RowImage {
	out := protocol.RowImage{Status: protocol.StatusOf(i.Status), Epoch: i.Epoch, LeaseUntil: i.LeaseUntil}
	if i.Owner != nil {
		out.Owner = *i.Owner
	}
	return out
}

// event is the change as the protocol tells it.
func (c rowChange) event() *protocol.RowEvent {
	e := &protocol.RowEvent{HistorySeq: c.Seq, JobID: c.JobID, Op: protocol.RowOp(c.Op), Writer: protocol.LabelFromApp(c.App), App: c.App, New: c.New.image()}
	if c.Old != nil {
		old := c.Old.image()
		e.Old = &old
	}
	return e
}

// fromHistory is the change a history record tells, as a notification
// would have told it.
func fromHistory(h protocol.HistoryRecord) rowChange {
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
// missed (the connection broke and came back, or the run fell behind), it
// reads them from the jobs' history instead, and tries again until it
// has: the run's row events have no gap and no duplicate.
func (r *Run) listen(ctx, bgctx context.Context) error {
	sub, err := r.env.Notify.Listen(ctx, r.spec.Schemas.Channel(), func(payload string) {
		if hook := notifyHook.Load(); hook != nil {
			(*hook)(r, payload)
		}
		var c rowChange
		if json.Unmarshal([]byte(payload), &c) == nil {
			r.tellRow(c)
		}
	}, func() { r.catchUpLater(bgctx) })
	if err != nil {
		return fmt.Errorf("listen for row changes: %w", err)
	}
	r.cleanup(sub.Close)
	return nil
}

// notifyHook, when a test sets it, sees each row change's notification
// before the run tells it: a test delays one to show the run does not
// wait for notifications to keep its log in order.
// Atomic: the notifier's goroutine reads it while a test sets it.
var notifyHook atomic.Pointer[func(r *Run, payload string)]

// rowFeed is which row changes a run has told. A change's seq is taken
// when its transaction writes the history, but its notification comes
// when it commits, so seqs arrive out of order: seq 11 may commit, and be
// told, before seq 10 does. A high-water mark would drop 10; the feed
// keeps every seq it told above floor, below which all were told (or
// never existed: a rolled-back write leaves a hole that floor stops at,
// and the set grows past it by one entry a change, which a run's few
// thousand changes afford).
type rowFeed struct {
	floor int64
	told  map[int64]bool
}

// mark records seq as told, and reports whether it was new.
func (f *rowFeed) mark(seq int64) bool {
	if seq <= f.floor || f.told[seq] {
		return false
	}
	if f.told == nil {
		f.told = map[int64]bool{}
	}
	f.told[seq] = true
	for f.told[f.floor+1] {
		delete(f.told, f.floor+1)
		f.floor++
	}
	return true
}

// tellRow makes a row change an event, once: a change told already (by a
// notification, or read back from the history) is not told again.
func (r *Run) tellRow(c rowChange) {
	r.mu.Lock()
	fresh := r.rows.mark(c.Seq)
	r.mu.Unlock()
	if !fresh {
		return
	}
	row := c.event()
	r.noteLease(*row, c.At)
	r.emit(context.Background(), protocol.Event{Kind: protocol.KindRow, Actor: protocol.ActorPostgres, At: c.At, Row: row})
}

// catchUpLater catches up in the background, trying again with a backoff
// until it has read the history or the run has ended: a catch-up after a
// restart can fail while Postgres is still starting.
func (r *Run) catchUpLater(bgctx context.Context) {
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		wait := 100 * time.Millisecond
		for {
			err := r.catchUp(bgctx)
			if err == nil || bgctx.Err() != nil {
				return
			}
			r.env.Log.Info("could not yet read the row changes a run missed; trying again", "run", r.spec.ID, "in", wait, "err", err)
			select {
			case <-bgctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 2*time.Second)
		}
	}()
}

// catchUp tells the row changes not told yet, from the jobs' history:
// those whose notifications were lost or are still on their way.
func (r *Run) catchUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r.mu.Lock()
	after := r.rows.floor
	r.mu.Unlock()
	for {
		hs, err := judge.HistoryAfter(ctx, r.env.Pool, r.spec.Schemas.Jobs, after, 1000)
		if err != nil {
			return err
		}
		for _, h := range hs {
			r.tellRow(fromHistory(h))
			after = h.Seq
		}
		if len(hs) < 1000 {
			return nil
		}
	}
}
