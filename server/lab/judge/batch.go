package judge

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// CellOf returns the matrix cell a run of a batch fills.
func CellOf(run string, rc experiments.RunConfig) protocol.MatrixCell {
	c := protocol.MatrixCell{Run: run, Ordering: rc.Ordering, SameIdentity: rc.SameIdentity}
	if b := rc.Broken.Broken(); len(b) > 0 {
		c.Broken = b[0].String()
	}
	return c
}

// FinishBatch returns the finished event of a batch whose runs have all
// ended, from their outcomes (nil for a run that did not end with one):
// its answer, the runs that were unsafe, and each run to open from the
// answer with what it came to.
func FinishBatch(name experiments.BatchName, leaseMS int64, cells []protocol.MatrixCell, outcomes []*protocol.Outcome) *protocol.BatchEvent {
	ev := &protocol.BatchEvent{Name: name, Phase: protocol.BatchFinished, LeaseMS: leaseMS, Cells: cells, Unsafe: []string{}, Runs: []protocol.BatchRun{}}
	answer, unsafe := BatchAnswer(name, cells, outcomes)
	ev.Answer = answer
	ev.Unsafe = append(ev.Unsafe, unsafe...)
	for i, c := range cells {
		m := protocol.MarkError
		if o := outcomes[i]; o != nil {
			m = protocol.SafeMark(o.Safe)
		}
		ev.Runs = append(ev.Runs, protocol.BatchRun{Run: c.Run, Ordering: c.Ordering, Broken: c.Broken, SameIdentity: c.SameIdentity,
			Mark: m, Words: protocol.OpenRunWords(c.Ordering, m)})
	}
	return ev
}

// BatchAnswer says what a finished batch showed, from its runs' outcomes
// (nil for a run that did not end with one): which ordering failed, and
// why; and lists the runs that were unsafe.
func BatchAnswer(name experiments.BatchName, cells []protocol.MatrixCell, outcomes []*protocol.Outcome) (answer string, unsafe []string) {
	var lost, failed []string
	var safeOnes []*protocol.Outcome
	for i, c := range cells {
		o := outcomes[i]
		switch {
		case o == nil:
			lost = append(lost, string(c.Ordering))
		case !o.Safe:
			unsafe = append(unsafe, c.Run)
			failed = append(failed, fmt.Sprintf("%s failed: %s", c.Ordering, protocol.LowerFirst(strings.TrimSuffix(o.Violations[0].Text, "."))))
		default:
			safeOnes = append(safeOnes, o)
		}
	}
	if name == experiments.BatchMatrix {
		s := fmt.Sprintf("%d of %d runs were unsafe.", len(unsafe), len(cells))
		if len(lost) > 0 {
			s += fmt.Sprintf(" %d could not finish.", len(lost))
		}
		return s, unsafe
	}
	var parts []string
	if len(failed) == 0 && len(lost) == 0 {
		parts = append(parts, "Neither ordering failed.")
	}
	for _, f := range failed {
		parts = append(parts, protocol.UpperFirst(f)+".")
	}
	for _, o := range safeOnes {
		parts = append(parts, fmt.Sprintf("%s was safe: %s.", protocol.UpperFirst(string(o.Ordering)), whySafe(o)))
	}
	for _, l := range lost {
		parts = append(parts, fmt.Sprintf("%s did not finish.", protocol.UpperFirst(l)))
	}
	// The identity point, from what fenced the zombie: with distinct names
	// the owner check alone refused it, hiding the missing epoch check.
	if name == experiments.BatchEpochCheck && len(failed) == 0 {
		ownerOnly := len(safeOnes) > 0
		for _, o := range safeOnes {
			ownerOnly = ownerOnly && o.ZombieCommit == experiments.CallRejected && slices.Contains(o.ZombieFence, protocol.ReasonOwnerChanged)
		}
		if ownerOnly {
			parts = append(parts, "With distinct names the owner check still told A from B (the job was owned by worker-b), so it hid the missing epoch check. Give both workers one name — a restarted pod keeps its hostname — and run it again.")
		}
	}
	if name == experiments.BatchEpochCheckSameIdentity && len(failed) > 0 {
		parts = append(parts, "With one name the owner check cannot tell A from B, and nothing compared the epoch: only the token could have refused A's late commit.")
	}
	if name == experiments.BatchReceiverCheck && len(failed) > 0 {
		parts = append(parts, "The database still fenced A's commit; the receiver, another system, took the older epoch because nothing there compared it.")
	}
	return strings.Join(parts, " "), unsafe
}

// whySafe says, from an outcome's facts, why a run was safe.
func whySafe(o *protocol.Outcome) string {
	var why []string
	switch o.ZombieCommit {
	case experiments.CallRejected:
		s := "A's late commit was refused"
		if len(o.ZombieFence) > 0 {
			var rs []string
			for _, r := range o.ZombieFence {
				rs = append(rs, map[protocol.FenceReason]string{
					protocol.ReasonNotRunning:   "the status check",
					protocol.ReasonOwnerChanged: "the owner check",
					protocol.ReasonEpochChanged: "the epoch check",
				}[r])
			}
			s += " by " + strings.Join(rs, " and ")
		}
		why = append(why, s)
	case experiments.CallNotAttempted:
		why = append(why, "A never committed")
	}
	why = append(why, fmt.Sprintf("the receiver ended with %s's epoch %d", protocol.Who(o.Receiver.PayloadFrom), o.Receiver.Epoch))
	return strings.Join(why, ", and ")
}
