package lab

import (
	"context"
	"fmt"

	"github.com/fencelab/fencelab/engine"
)

// JobReport is one job's end in a free-play run.
type JobReport struct {
	JobID        int64         `json:"job_id"`
	Status       engine.Status `json:"status"`
	Owner        string        `json:"owner"`
	Epoch        int64         `json:"epoch"`
	ResultFrom   string        `json:"result_from"`
	ReceiverFrom string        `json:"receiver_from"`
	Claims       int           `json:"claims"`
	Violations   []Violation   `json:"violations"`
}

// Report is the outcome of a free-play run: every job, checked.
type Report struct {
	Jobs       []JobReport `json:"jobs"`
	Done       int         `json:"done"`
	Safe       bool        `json:"safe"`
	Violations []Violation `json:"violations"`
	Headline   string      `json:"headline"`
	Verdict    string      `json:"verdict"`
	// Mark and Also are derived as an Outcome's are: Safe as a mark, and
	// the further violations' words, each once.
	Mark Mark     `json:"mark,omitempty"`
	Also []string `json:"also,omitempty"`
}

// ReportJobs checks every job (up to limit) of the lab jobs schema on db
// against the invariants, from what Postgres and the receiver recorded.
// Jobs still in progress are checked too: an invariant broken midway is
// broken.
func ReportJobs(ctx context.Context, db engine.DB, schema string, r ReceiverView, limit int) (Report, error) {
	rep := Report{Jobs: []JobReport{}, Violations: []Violation{}}
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
		jr := JobReport{JobID: j.ID, Status: j.Status, Owner: j.Owner, Epoch: j.Epoch, ResultFrom: ResultFrom(j.Result), Violations: []Violation{}}
		if held != nil {
			jr.ReceiverFrom = ResultFrom(held.Payload)
		}
		for _, h := range history {
			if h.Op == "claim" {
				jr.Claims++
			}
		}
		jr.Violations = append(jr.Violations, Check(history, decisions, held)...)
		rep.Violations = append(rep.Violations, jr.Violations...)
		if j.Status == engine.StatusDone {
			rep.Done++
		}
		rep.Jobs = append(rep.Jobs, jr)
	}
	Rank(rep.Violations)
	rep.Safe = len(rep.Violations) == 0
	rep.Headline = reportHeadline(rep)
	rep.Verdict = reportVerdict(rep)
	rep.derive()
	return rep, nil
}
