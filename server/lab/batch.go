package lab

import (
	"fmt"
	"strings"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
)

// BatchName names a batch of runs played in the background: the guard
// matrix, or one of the article's experiments (its Step 5).
type BatchName string

// The batches.
const (
	// BatchMatrix: every guard off, in every ordering, with distinct names
	// and with one name for both workers.
	BatchMatrix BatchName = "matrix"
	// BatchEpochCheck: the article's first experiment — "remove AND epoch =
	// :epoch from the compare-and-set" — in both of its orderings.
	BatchEpochCheck BatchName = "epoch-check"
	// BatchEpochCheckSameName: the same, with one name for both workers (a
	// restarted pod keeps its hostname).
	BatchEpochCheckSameName BatchName = "epoch-check-same-name"
	// BatchReceiverCheck: the second experiment — "remove the epoch check
	// from the receiver" — in both orderings.
	BatchReceiverCheck BatchName = "receiver-check"
	// BatchCheck: a reader's own statements, in every case of Step 3
	// (CheckCases). It is started by the check command, never by name.
	BatchCheck BatchName = "check"
)

// BatchNames lists the batches.
func BatchNames() []BatchName {
	return []BatchName{BatchMatrix, BatchEpochCheck, BatchEpochCheckSameName, BatchReceiverCheck, BatchCheck}
}

// ParseBatch parses a batch name.
func ParseBatch(s string) (BatchName, error) {
	if s == string(BatchCheck) {
		return "", playground.Invalidf("the batch %q is started by the check command, with a solution: {\"action\":\"check\",\"solution\":{…}}", s)
	}
	for _, b := range BatchNames() {
		if string(b) == s {
			return b, nil
		}
	}
	return "", playground.Invalidf("unknown batch %q (want matrix, epoch-check, epoch-check-same-name or receiver-check)", s)
}

// MinSkewLease is the shortest lease the matrix gives its clock-skew
// cells. What they show depends on worker A's lease being live when B
// claims: A is healthy and its heartbeat (every third of the lease) keeps
// it so, but on a busy machine a heartbeat comes late by more than a
// 300 ms lease, A's lease really runs out, and the cell shows what a real
// expiry does instead (seen: 2 matrices in 4 on a loaded 2-core machine).
// A clock-skew run never waits for its lease to run out, so a longer one
// costs it nothing; with the default skew of twice the lease, B's clock
// runs 2 s fast, as the lesson's does.
const MinSkewLease = time.Second

// BatchRuns returns the runs of a batch, each with its cell. The matrix's
// clock-skew cells hold a lease of at least MinSkewLease.
func BatchRuns(name BatchName, lease time.Duration) ([]RunConfig, error) {
	article := []Ordering{NewOwnerFirst, ZombieFirst}
	one := func(g playground.Guard, same bool) []RunConfig {
		var out []RunConfig
		for _, o := range article {
			out = append(out, RunConfig{Ordering: o, Broken: playground.Guards(0).Break(g), SameIdentity: same, Lease: lease})
		}
		return out
	}
	var rcs []RunConfig
	switch name {
	case BatchMatrix:
		for _, same := range []bool{false, true} {
			for _, o := range Orderings() {
				l := lease
				if o == ClockSkew {
					l = max(lease, MinSkewLease)
				}
				rcs = append(rcs, RunConfig{Ordering: o, SameIdentity: same, Lease: l})
				for _, g := range playground.AllGuards() {
					rcs = append(rcs, RunConfig{Ordering: o, Broken: playground.Guards(0).Break(g), SameIdentity: same, Lease: l})
				}
			}
		}
	case BatchEpochCheck:
		rcs = one(playground.EpochCheck, false)
	case BatchEpochCheckSameName:
		rcs = one(playground.EpochCheck, true)
	case BatchReceiverCheck:
		rcs = one(playground.ReceiverCheck, false)
	default:
		return nil, playground.Invalidf("unknown batch %q", name)
	}
	for i := range rcs {
		if err := rcs[i].Validate(); err != nil {
			return nil, err
		}
	}
	return rcs, nil
}

// CellOf returns the matrix cell a run of a batch fills.
func CellOf(run string, rc RunConfig) MatrixCell {
	c := MatrixCell{Run: run, Ordering: rc.Ordering, SameIdentity: rc.SameIdentity}
	if b := rc.Broken.Broken(); len(b) > 0 {
		c.Broken = b[0].String()
	}
	return c
}

// FinishBatch returns the finished event of a batch whose runs have all
// ended, from their outcomes (nil for a run that did not end with one):
// its answer, the runs that were unsafe, and each run to open from the
// answer with what it came to.
func FinishBatch(name BatchName, leaseMS int64, cells []MatrixCell, outcomes []*Outcome) *BatchEvent {
	ev := &BatchEvent{Name: name, Phase: BatchFinished, LeaseMS: leaseMS, Cells: cells, Unsafe: []string{}, Runs: []BatchRun{}}
	answer, unsafe := BatchAnswer(name, cells, outcomes)
	ev.Answer = answer
	ev.Unsafe = append(ev.Unsafe, unsafe...)
	for i, c := range cells {
		m := MarkError
		if o := outcomes[i]; o != nil {
			m = SafeMark(o.Safe)
		}
		ev.Runs = append(ev.Runs, BatchRun{Run: c.Run, Ordering: c.Ordering, Broken: c.Broken, SameIdentity: c.SameIdentity,
			Mark: m, Words: OpenRunWords(c.Ordering, m)})
	}
	return ev
}

// OpenRunWords are the words of a button that opens a batch's run:
// "new-owner-first: ✗ unsafe — open this run".
func OpenRunWords(o Ordering, m Mark) string {
	w := MarkWords(m)
	return fmt.Sprintf("%s: %s %s — open this run", o, w.Sign, w.Word)
}

// BatchAnswer says what a finished batch showed, from its runs' outcomes
// (nil for a run that did not end with one): which ordering failed, and
// why; and lists the runs that were unsafe.
func BatchAnswer(name BatchName, cells []MatrixCell, outcomes []*Outcome) (answer string, unsafe []string) {
	var lost, failed []string
	var safeOnes []*Outcome
	for i, c := range cells {
		o := outcomes[i]
		switch {
		case o == nil:
			lost = append(lost, string(c.Ordering))
		case !o.Safe:
			unsafe = append(unsafe, c.Run)
			failed = append(failed, fmt.Sprintf("%s failed: %s", c.Ordering, lowerFirst(strings.TrimSuffix(o.Violations[0].Text, "."))))
		default:
			safeOnes = append(safeOnes, o)
		}
	}
	if name == BatchMatrix {
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
		parts = append(parts, upperFirst(f)+".")
	}
	for _, o := range safeOnes {
		parts = append(parts, fmt.Sprintf("%s was safe: %s.", upperFirst(string(o.Ordering)), whySafe(o)))
	}
	for _, l := range lost {
		parts = append(parts, fmt.Sprintf("%s did not finish.", upperFirst(l)))
	}
	// The identity point, from what fenced the zombie: with distinct names
	// the owner check alone refused it, hiding the missing epoch check.
	if name == BatchEpochCheck && len(failed) == 0 {
		ownerOnly := len(safeOnes) > 0
		for _, o := range safeOnes {
			ownerOnly = ownerOnly && o.ZombieCommit == CallRejected && hasReason(o.ZombieFence, engine.ReasonOwnerChanged)
		}
		if ownerOnly {
			parts = append(parts, "With distinct names the owner check still told A from B (the job was owned by worker-b), so it hid the missing epoch check. Give both workers one name — a restarted pod keeps its hostname — and run it again.")
		}
	}
	if name == BatchEpochCheckSameName && len(failed) > 0 {
		parts = append(parts, "With one name the owner check cannot tell A from B, and nothing compared the epoch: only the token could have refused A's late commit.")
	}
	if name == BatchReceiverCheck && len(failed) > 0 {
		parts = append(parts, "The database still fenced A's commit; the receiver, another system, took the older epoch because nothing there compared it.")
	}
	return strings.Join(parts, " "), unsafe
}

func hasReason(rs []engine.FenceReason, r engine.FenceReason) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// whySafe says, from an outcome's facts, why a run was safe.
func whySafe(o *Outcome) string {
	var why []string
	switch o.ZombieCommit {
	case CallRejected:
		s := "A's late commit was refused"
		if len(o.ZombieFence) > 0 {
			var rs []string
			for _, r := range o.ZombieFence {
				rs = append(rs, map[engine.FenceReason]string{
					engine.ReasonNotRunning:   "the status check",
					engine.ReasonOwnerChanged: "the owner check",
					engine.ReasonEpochChanged: "the epoch check",
				}[r])
			}
			s += " by " + strings.Join(rs, " and ")
		}
		why = append(why, s)
	case CallNotAttempted:
		why = append(why, "A never committed")
	}
	why = append(why, fmt.Sprintf("the receiver ended with %s's epoch %d", who(o.Receiver.PayloadFrom), o.Receiver.Epoch))
	return strings.Join(why, ", and ")
}
