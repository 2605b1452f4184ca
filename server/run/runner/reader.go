package runner

import (
	"context"
	"time"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/sandbox"
)

// readerSQL readies a run that plays a reader's own statements: the
// run's role, made on its schemas and dropped at its end; the four
// statements checked as that role before any worker starts; the
// environment that gives the workers the statements and the role; and the
// receiver's rule, the reader's, run on a connection of the role's own.
// A run with no reader's statements gets a nil rule: the engine's.
func (r *Run) readerSQL(ctx context.Context) (playground.Rule, error) {
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
	st, err := role.VetSolution(ctx, *sol)
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
	rule, closeRule := role.ReceiverRule(st.Receiver)
	r.cleanup(closeRule) // before the role is dropped: cleanups run last first
	return rule, nil
}
