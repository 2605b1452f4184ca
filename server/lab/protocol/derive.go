package protocol

import (
	"encoding/json"

	"github.com/fencelab/fencelab/server/lab/experiments"
)

// This file holds the rules a front end would otherwise decide for itself
// — which badge an event wears, who the zombie is, whether a delivery took
// effect, what mark a verdict or a cell gets — as fields derived from the
// facts, in one place. Each type that has such fields fills them when it
// is made and again when it is encoded (its MarshalJSON, on a copy, so a
// value shared between goroutines is never written), so every consumer
// gets them: a live page, an export, a recorded run from before the field
// existed, an event a worker we did not write sent.

// ZombieOf returns the label of the worker an ordering's script makes the
// zombie — A, which freezes (or dies) while holding the job and carries on
// after its lease ran out — or "" when the ordering has none: in
// clock-skew nobody freezes (A is healthy; B's clock is wrong), and free
// play has no script.
func ZombieOf(o experiments.Ordering) string {
	switch o {
	case experiments.NewOwnerFirst, experiments.ZombieFirst, experiments.OwnerDoneFirst, experiments.CrashBeforeCommit:
		return experiments.Zombie
	}
	return ""
}

// MarshalJSON writes the event with its badge key (BadgeKey) and its
// payload's derived fields filled from its other fields.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event // the fields, without this method
	e.Badge = BadgeKey(e)
	if e.Receiver != nil {
		r := *e.Receiver
		r.Accepted = r.Decision.Accepted()
		r.Replaces = r.Decision == AcceptedNewer || r.Decision == AcceptedOlder
		e.Receiver = &r
	}
	if e.Verdict != nil {
		v := *e.Verdict
		v.Mark = SafeMark(v.Safe)
		e.Verdict = &v
	}
	return json.Marshal(plain(e))
}

// MarshalJSON writes the run's info with its zombie (ZombieOf).
func (i RunInfo) MarshalJSON() ([]byte, error) {
	type plain RunInfo
	i.Zombie = ZombieOf(i.Ordering)
	return json.Marshal(plain(i))
}

// Derive fills the outcome's derived fields from its facts. It writes new
// slices for the effects and the table, never into the old ones.
func (o *Outcome) Derive() {
	o.Mark = SafeMark(o.Safe)
	o.Zombie = ZombieOf(o.Ordering)
	o.Also = furtherViolations(o.Violations)
	o.LeasesAlone = leasesAlone(o.Broken)
	o.Correct = len(o.Broken) == 0 && !o.SameIdentity && (o.Delivery == "" || o.Delivery == experiments.DeliverDirect)
	if o.Effects != nil {
		fx := make([]Effect, len(o.Effects))
		for i, e := range o.Effects {
			e.Zombie = o.Zombie != "" && e.From == o.Zombie
			e.Badge = receiverBadge(e.Decision)
			fx[i] = e
		}
		o.Effects = fx
	}
	if o.Table != nil {
		cells := make([]Cell, len(o.Table))
		for i, c := range o.Table {
			c.Mark = MarkNotAsCorrect
			if c.AsCorrect {
				c.Mark = MarkAsCorrect
			}
			cells[i] = c
		}
		o.Table = cells
	}
}

// MarshalJSON writes the outcome with its derived fields filled.
func (o Outcome) MarshalJSON() ([]byte, error) {
	type plain Outcome
	o.Derive()
	return json.Marshal(plain(o))
}

// Derive fills the report's derived fields from its facts.
func (r *Report) Derive() {
	r.Mark = SafeMark(r.Safe)
	r.Also = furtherViolations(r.Violations)
}

// MarshalJSON writes the report with its derived fields filled.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report
	r.Derive()
	return json.Marshal(plain(r))
}

// furtherViolations returns the words of every violation but the first
// (which the headline says), each once, and none that says what the first
// does.
func furtherViolations(vs []Violation) []string {
	if len(vs) < 2 {
		return nil
	}
	seen := map[string]bool{vs[0].Text: true}
	var out []string
	for _, v := range vs[1:] {
		if !seen[v.Text] {
			seen[v.Text] = true
			out = append(out, v.Text)
		}
	}
	return out
}
