package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Try runs each of a solution's checked statements once, as the role, on
// the run's tables as they are, each in a transaction that is rolled
// back: a statement that passes Vet but fails when it runs (it sleeps
// past the statement timeout, recurses without end, spills past the
// temporary file limit, divides by zero) is refused here, before any
// worker runs it, with the same *Error a run would meet. Vet runs
// nothing; Try changes nothing. Each statement gets the values a worker
// would send for the first job (id 1, epoch 1, owner "worker-a"); put a job in
// the table first for the claim to find one.
func (r *Role) Try(ctx context.Context, st *Statements) error {
	conn, err := r.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background()) //nolint:errcheck // a connection of its own
	result, _ := json.Marshal(map[string]any{"worker": "A", "output": "a trial run"})
	// The owner is the one a run's worker A claims under (lab's
	// RunConfig.Owner), not a name of the trial's own: a statement that
	// behaves for the trial's name alone cannot pass it and fail the runs.
	const owner = "worker-a"
	args := map[Kind]map[string]any{
		Claim:    {"owner": owner, "lease": time.Second, "now": time.Now()},
		Complete: {"id": int64(1), "owner": owner, "epoch": int64(1), "result": string(result)},
		Fail:     {"id": int64(1), "owner": owner, "epoch": int64(1), "error": "a trial run"},
		Receiver: {"job_id": int64(1), "epoch": int64(1), "owner": owner, "body": string(result)},
	}
	for _, k := range Kinds() {
		c := st.Of(k)
		if c == nil {
			continue
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return fmt.Errorf("try the %s: %w", k, err)
		}
		_, err = Exec(ctx, conn, c, args[k])
		rerr := tx.Rollback(context.WithoutCancel(ctx))
		var refused *Error
		switch {
		case errors.As(err, &refused):
			refused.Message += " (in a trial run, before the workers ran it)"
			return refused
		case err != nil:
			return err
		case rerr != nil:
			return fmt.Errorf("try the %s: roll back: %w", k, rerr)
		}
	}
	return nil
}
