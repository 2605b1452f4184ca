package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/lab"
	"github.com/jackc/pgx/v5"
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

// listen opens the run's own connection, LISTENs on its jobs schema's
// channel and turns every row change Postgres reports into an event, until
// ctx ends.
func (r *Run) listen(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.env.DatabaseURL)
	if err != nil {
		return fmt.Errorf("listen for row changes: %w", engine.ErrUnavailable)
	}
	st := engine.ChannelListen(r.spec.Schemas.Channel())
	if _, err := conn.Exec(ctx, st.SQL); err != nil {
		conn.Close(context.Background())
		return fmt.Errorf("listen for row changes: %w", engine.ErrUnavailable)
	}
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		defer conn.Close(context.Background())
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return // ctx is done, or the connection is gone with the database
			}
			var c rowChange
			if json.Unmarshal([]byte(n.Payload), &c) != nil {
				continue
			}
			row := c.event()
			r.noteLease(*row, c.At)
			r.emit(ctx, lab.Event{Kind: lab.KindRow, Actor: lab.ActorPostgres, At: c.At, Row: row})
			r.mu.Lock()
			r.rowSeq = max(r.rowSeq, c.Seq)
			r.mu.Unlock()
		}
	}()
	return nil
}
