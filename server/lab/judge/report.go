package judge

import (
	"context"
	"fmt"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// ReportJobs checks every job (up to limit) of the lab jobs schema on db
// against the invariants, from what Postgres and the receiver recorded.
// Jobs still in progress are checked too: an invariant broken midway is
// broken.
func ReportJobs(ctx context.Context, db engine.DB, schema string, r ReceiverView, limit int) (protocol.Report, error) {
	rep := protocol.Report{Jobs: []protocol.JobReport{}, Violations: []protocol.Violation{}}
	q, err := engine.NewQueue(db, engine.QueueConfig{Schema: schema})
	if err != nil {
		return rep, fmt.Errorf("report: %w", err)
	}
	jobs, err := q.List(ctx, limit)
	if err != nil {
		return rep, fmt.Errorf("report: %w", err)
	}
	for _, j := range jobs {
		history, err := History(ctx, db, schema, j.ID)
		if err != nil {
			return rep, fmt.Errorf("report: %w", err)
		}
		decisions, err := r.Decisions(ctx, j.ID)
		if err != nil {
			return rep, fmt.Errorf("report: %w", err)
		}
		held, err := heldBy(ctx, r, j.ID)
		if err != nil {
			return rep, fmt.Errorf("report: %w", err)
		}
		jr := protocol.JobReport{JobID: j.ID, Status: protocol.StatusOf(j.Status), Owner: j.Owner, Epoch: j.Epoch, ResultFrom: protocol.ResultFrom(j.Result), Violations: []protocol.Violation{}}
		if held != nil {
			jr.ReceiverFrom = protocol.ResultFrom(held.Payload)
		}
		for _, h := range history {
			if h.Op == "claim" {
				jr.Claims++
			}
		}
		jr.Violations = append(jr.Violations, Violations(history, decisions, held)...)
		rep.Violations = append(rep.Violations, jr.Violations...)
		if j.Status == engine.StatusDone {
			rep.Done++
		}
		rep.Jobs = append(rep.Jobs, jr)
	}
	Rank(rep.Violations)
	rep.Safe = len(rep.Violations) == 0
	rep.Headline = protocol.ReportHeadline(rep)
	rep.Verdict = protocol.ReportVerdict(rep)
	rep.Derive()
	return rep, nil
}
