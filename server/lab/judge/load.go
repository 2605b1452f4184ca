package judge

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// TallyJobs reads how many of a style's jobs there are and how many are
// done and failed: one statement over the jobs alone, cheap enough to ask
// often.
func TallyJobs(ctx context.Context, db engine.DB, s Schemas) (experiments.LoadTally, error) {
	var t experiments.LoadTally
	st := jobsTally(s.Jobs)
	if err := db.QueryRow(ctx, st.SQL).Scan(&t.Done, &t.Failed, &t.Jobs); err != nil {
		return t, dbErr("tally the jobs", err)
	}
	return t, nil
}

// Tally reads a style's live counts from its queue's history and its
// receiver's decisions: three statements, no lock taken.
func Tally(ctx context.Context, db engine.DB, s Schemas) (experiments.LoadTally, error) {
	t, err := TallyJobs(ctx, db, s)
	if err != nil {
		return t, err
	}
	st := historyLateWrites(s.Jobs)
	if err := db.QueryRow(ctx, st.SQL).Scan(&t.LateRow); err != nil {
		return t, dbErr("tally the late writes", err)
	}
	st = decisionsOlderAccepted(s.Receiver)
	if err := db.QueryRow(ctx, st.SQL).Scan(&t.LateReceiver); err != nil {
		return t, dbErr("tally the receiver", err)
	}
	return t, nil
}

// Span reads how long a style's workers took over its jobs, on the
// database clock: from the first claim until every job had ended once.
// Zero if nothing was claimed or nothing ended.
func Span(ctx context.Context, db engine.DB, s Schemas) (time.Duration, error) {
	st := historySpan(s.Jobs)
	var from, to *time.Time
	if err := db.QueryRow(ctx, st.SQL).Scan(&from, &to); err != nil {
		return 0, dbErr("read the style's span", err)
	}
	if from == nil || to == nil || !to.After(*from) {
		return 0, nil
	}
	return to.Sub(*from), nil
}

// AuditLoad runs the invariant checker over every job of a style (up to
// limit) in the lab jobs schema on db, from what Postgres and the
// receiver recorded.
func AuditLoad(ctx context.Context, db engine.DB, schema string, r ReceiverView, limit int) (experiments.LoadCheck, error) {
	rep, err := ReportJobs(ctx, db, schema, r, limit)
	if err != nil {
		return experiments.LoadCheck{}, err
	}
	c := experiments.LoadCheck{Jobs: len(rep.Jobs)}
	for _, j := range rep.Jobs {
		if j.Status != protocol.StatusDone && j.Status != protocol.StatusFailed {
			c.Unfinished++
		}
		if len(j.Violations) > 0 {
			c.Broken++
		}
		zombie := false
		for _, v := range j.Violations {
			switch {
			case v.Invariant == protocol.InvRowLastOwner || v.Invariant == protocol.InvReceiverLastOwner:
				zombie = true
			case v.Invariant == protocol.InvStaleWrite && v.Op != "renew":
				c.StaleWrites++
			case v.Invariant == protocol.InvReceiverMonotonic:
				c.OlderAccepted++
			}
		}
		if zombie {
			c.ZombieResult++
		}
	}
	if len(rep.Violations) > 0 {
		c.Example = rep.Violations[0].Text
	}
	return c, nil
}

// LoadVerdict says what a finished load lab showed, from its results: how
// many jobs each style left with a zombie's result, and fencelab's count
// and throughput beside them (CompareLoad), said as the same only when
// the difference is within the spread of the rounds, and otherwise as a
// ratio with its range.
func LoadVerdict(rs []experiments.LoadStyleResult) string {
	var parts []string
	var fenced *experiments.LoadStyleResult
	for i := range rs {
		r := &rs[i]
		if r.Style == "fencelab" {
			fenced = r
			continue
		}
		if len(parts) == 0 {
			parts = append(parts, fmt.Sprintf("%s: %s of %s jobs ended with a zombie's result", protocol.StyleShort(r.Style), experiments.Thousands(r.Check.ZombieResult), experiments.Thousands(r.Check.Jobs)))
		} else {
			parts = append(parts, fmt.Sprintf("%s: %s", protocol.StyleShort(r.Style), experiments.Thousands(r.Check.ZombieResult)))
		}
	}
	if fenced != nil {
		s := fmt.Sprintf("fencelab: %s", experiments.Thousands(fenced.Check.ZombieResult))
		if len(parts) == 0 {
			s = fmt.Sprintf("fencelab: %s of %s jobs ended with a zombie's result", experiments.Thousands(fenced.Check.ZombieResult), experiments.Thousands(fenced.Check.Jobs))
		}
		if c, ok := experiments.CompareLoad(rs); ok {
			s += ", " + c.Words()
		}
		parts = append(parts, s)
	}
	v := protocol.UpperFirst(strings.Join(parts, "; ")) + "."
	for _, r := range rs {
		if !r.Agrees {
			v += fmt.Sprintf(" The live counts and the checker's disagree for %s.", protocol.StyleShort(r.Style))
		}
		if r.CutShort {
			v += fmt.Sprintf(" %s was cut short at %v with jobs left.", protocol.UpperFirst(protocol.StyleShort(r.Style)), experiments.MaxLoadStyleTime)
		}
	}
	return v
}
