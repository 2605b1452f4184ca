package sandbox

import (
	"context"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/jackc/pgx/v5"
)

// ReceiverRule returns the reader's receiver statement as an playground.Rule
// (playground.ReceiverHooks.Rule), run one delivery at a time on one
// connection of the role, opened on first use; close closes it, before
// the role is dropped.
func (r *Role) ReceiverRule(st *Vetted) (rule playground.Rule, close func()) {
	rr := &receiverRule{role: r, st: st}
	return rr.deliver, rr.close
}

type receiverRule struct {
	role *Role
	st   *Vetted
	mu   sync.Mutex
	conn *pgx.Conn
}

func (rr *receiverRule) deliver(ctx context.Context, d engine.Delivery) (bool, playground.Statement, error) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	args := map[string]any{"job_id": d.JobID, "epoch": d.Epoch, "owner": d.Owner, "body": string(d.Payload)}
	stmt := playground.Statement{Name: "ReaderReceiver", SQL: rr.st.SQL, Args: rr.st.Args(args)}
	if rr.conn == nil || rr.conn.IsClosed() {
		c, err := rr.role.Connect(ctx)
		if err != nil {
			return false, stmt, err
		}
		rr.conn = c
	}
	res, err := Exec(ctx, rr.conn, rr.st, args)
	if err != nil {
		return false, stmt, err
	}
	return res.Landed(), stmt, nil
}

func (rr *receiverRule) close() {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rr.conn.Close(ctx)
		rr.conn = nil
	}
}
