package runner

import (
	"context"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/jackc/pgx/v5"
)

// readerSQL readies a run that plays a reader's own statements: the
// run's role, made on its schemas and dropped at its end; the four
// statements checked as that role before any worker starts; the
// environment that gives the workers the statements and the role; and the
// receiver's rule, the reader's, run on a connection of the role's own.
// A run with no reader's statements gets a nil rule: the engine's.
func (r *Run) readerSQL(ctx context.Context) (engine.Rule, error) {
	sol := r.spec.Solution
	if sol == nil {
		return nil, nil
	}
	pool := r.env.Pool
	role, err := sandbox.NewRole(ctx, pool, r.spec.Schemas)
	if err != nil {
		return nil, err
	}
	r.cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := role.Drop(dctx, pool); err != nil {
			r.env.Log.Warn("could not drop a run's role", "run", r.spec.ID, "role", role, "err", err)
		}
	})
	st, err := role.CheckSolution(ctx, *sol)
	if err != nil {
		return nil, err
	}
	env, err := role.WorkerEnv(*sol)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.sqlEnv = env
	r.mu.Unlock()
	rule := &readerRule{role: role, st: st.Receiver}
	r.cleanup(rule.close) // before the role is dropped: cleanups run last first
	return rule.deliver, nil
}

// readerRule runs a reader's receiver statement, one delivery at a time,
// on one connection of the run's role.
type readerRule struct {
	role *sandbox.Role
	st   *sandbox.Checked
	mu   sync.Mutex
	conn *pgx.Conn
}

func (rr *readerRule) deliver(ctx context.Context, d engine.Delivery) (bool, engine.Statement, error) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	args := map[string]any{"job_id": d.JobID, "epoch": d.Epoch, "owner": d.Owner, "body": string(d.Payload)}
	stmt := engine.Statement{Name: "ReaderReceiver", SQL: rr.st.SQL, Args: rr.st.Args(args)}
	if rr.conn == nil || rr.conn.IsClosed() {
		c, err := rr.role.Connect(ctx)
		if err != nil {
			return false, stmt, err
		}
		rr.conn = c
	}
	res, err := sandbox.Exec(ctx, rr.conn, rr.st, args)
	if err != nil {
		return false, stmt, err
	}
	return res.Landed(), stmt, nil
}

func (rr *readerRule) close() {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rr.conn.Close(ctx)
		rr.conn = nil
	}
}
