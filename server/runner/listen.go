package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/jackc/pgx/v5"
)

// rowChange is the payload the job_history trigger sends with NOTIFY.
type rowChange struct {
	Seq        int64      `json:"seq"`
	JobID      int64      `json:"job_id"`
	Op         string     `json:"op"`
	At         time.Time  `json:"at"`
	Status     string     `json:"status"`
	Owner      *string    `json:"owner"`
	Epoch      int64      `json:"epoch"`
	LeaseUntil *time.Time `json:"lease_until"`
	App        string     `json:"app"`
}

// listen opens the run's own connection, LISTENs on its jobs schema's
// channel and turns every row change Postgres reports into an event, until
// ctx ends.
func (r *Run) listen(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	st := engine.ChannelListen(r.cfg.Schemas.Channel())
	if _, err := conn.Exec(ctx, st.SQL); err != nil {
		conn.Close(context.Background())
		return fmt.Errorf("listen: %w", err)
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
			r.noteLease(ctx, c)
			r.emit(ctx, rowEvent(c))
		}
	}()
	return nil
}

// rowEvent says what Postgres reported about a job row, in words.
func rowEvent(c rowChange) engine.Event {
	owner := ""
	if c.Owner != nil {
		owner = *c.Owner
	}
	by := "an unnamed connection"
	if l := engine.LabelFromApp(c.App); l != "" {
		by = "worker " + l + "'s connection"
	} else if c.App != "" {
		by = c.App
	}
	e := engine.Event{Kind: engine.KindRow, Actor: "postgres", At: c.At, Op: c.Op, JobID: c.JobID, Owner: owner,
		Epoch: engine.Int64(c.Epoch), LeaseUntil: c.LeaseUntil, State: c.Status, Outcome: c.Op}
	lease := ""
	if c.LeaseUntil != nil {
		lease = ", leased until " + c.LeaseUntil.UTC().Format("15:04:05.000")
	}
	switch c.Op {
	case "insert":
		e.Text = fmt.Sprintf("Row: job %d is pending at epoch %d.", c.JobID, c.Epoch)
	case "claim":
		e.Text = fmt.Sprintf("Row: job %d is running, owned by %s at epoch %d%s (written by %s).", c.JobID, owner, c.Epoch, lease, by)
	case "renew":
		e.Text = fmt.Sprintf("Row: job %d's lease is extended%s (written by %s).", c.JobID, lease, by)
	case "complete":
		e.Text = fmt.Sprintf("Row: job %d is done at epoch %d (written by %s).", c.JobID, c.Epoch, by)
	case "fail":
		e.Text = fmt.Sprintf("Row: job %d has failed for good at epoch %d (written by %s).", c.JobID, c.Epoch, by)
	case "retry":
		e.Text = fmt.Sprintf("Row: job %d is pending again for a retry (written by %s).", c.JobID, by)
	default:
		e.Text = fmt.Sprintf("Row: job %d changed: %s at epoch %d (written by %s).", c.JobID, c.Status, c.Epoch, by)
	}
	return e
}

// timeAfter is time.After with a small margin, so a wait for the database
// clock to pass an instant ends after it, not at it.
func timeAfter(d time.Duration) <-chan time.Time { return time.After(d + 2*time.Millisecond) }
