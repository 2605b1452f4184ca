package experiments

import (
	"strings"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/fault"
)

// Style is a well-known queue's way of guarding a late completion, expressed
// as the guards it keeps. None of them fences the external receiver.
type Style struct {
	Name   string            `json:"name"`
	Title  string            `json:"title"`
	Short  string            `json:"short"`  // in a few words, as the load lab's chart names it
	Source string            `json:"source"` // where in that queue's code the check lives
	Broken playground.Guards `json:"broken"`
}

// Styles lists the queue-style presets, fencelab's own first.
func Styles() []Style {
	noFence := playground.Guards(0).Break(playground.ReceiverCheck)
	return []Style{
		{
			Name:   "leases-alone",
			Short:  "leases alone",
			Title:  "leases alone: a plain UPDATE … SET status = 'done'",
			Source: "the article's starting point: a claim with a lease, and no token checked on completion (UPDATE jobs SET status = 'done' WHERE id = $1) or at the receiver",
			Broken: noFence.Break(playground.StatusCheck).Break(playground.OwnerCheck).Break(playground.EpochCheck),
		},
		{
			Name:   "fencelab",
			Short:  "fencelab",
			Title:  "fencelab: owner + epoch compare-and-set, fenced receiver",
			Source: "engine/queries.go: JobComplete, ReceiverDeliver",
		},
		{
			Name:   "state-only",
			Short:  "state only",
			Title:  "state only (River, pg-boss)",
			Source: "River: JobSetStateIfRunningMany (riverpgxv5 river_job.sql) matches state = 'running', never the attempt; pg-boss: completeJobs (src/plans.ts) matches state = 'active'",
			Broken: noFence.Break(playground.OwnerCheck).Break(playground.EpochCheck),
		},
		{
			Name:   "id-only",
			Short:  "job id only",
			Title:  "job id only (Oban, graphile-worker)",
			Source: "Oban: Engines.Basic complete_job updates where id = job.id; graphile-worker: batchCompleteJobs (src/sql/completeJobs.ts) deletes where id = n",
			Broken: noFence.Break(playground.StatusCheck).Break(playground.OwnerCheck).Break(playground.EpochCheck),
		},
		{
			Name:   "token",
			Short:  "attempt or token",
			Title:  "attempt or token (Temporal, Hatchet, BullMQ)",
			Source: "Temporal: RespondActivityTaskCompleted refuses a task token whose attempt differs; Hatchet: ReleaseTasks drops a stale retry_count; BullMQ: moveToFinished.lua checks the lock token",
			Broken: noFence,
		},
	}
}

// StyleByName finds a preset by its name.
func StyleByName(name string) (Style, error) {
	var names []string
	for _, s := range Styles() {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Style{}, fault.Invalidf("unknown queue style %q (want one of %s)", name, strings.Join(names, ", "))
}
