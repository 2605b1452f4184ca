package experiments

import (
	"time"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/fault"
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
	// BatchEpochCheckSameIdentity: the same, with one name for both workers (a
	// restarted pod keeps its hostname).
	BatchEpochCheckSameIdentity BatchName = "epoch-check-same-identity"
	// BatchReceiverCheck: the second experiment — "remove the epoch check
	// from the receiver" — in both orderings.
	BatchReceiverCheck BatchName = "receiver-check"
	// BatchCheck: a reader's own statements, in every case of Step 3
	// (CheckCases). It is started by the check command, never by name.
	BatchCheck BatchName = "check"
)

// BatchNames lists the batches.
func BatchNames() []BatchName {
	return []BatchName{BatchMatrix, BatchEpochCheck, BatchEpochCheckSameIdentity, BatchReceiverCheck, BatchCheck}
}

// batchAliases are the batches' older names, still understood.
var batchAliases = map[string]BatchName{"epoch-check-same-name": BatchEpochCheckSameIdentity}

// ParseBatch parses a batch name, or an older one (batchAliases).
func ParseBatch(s string) (BatchName, error) {
	if s == string(BatchCheck) {
		return "", fault.Invalidf("the batch %q is started by the check command, with a solution: {\"action\":\"check\",\"solution\":{…}}", s)
	}
	for _, b := range BatchNames() {
		if string(b) == s {
			return b, nil
		}
	}
	if b, ok := batchAliases[s]; ok {
		return b, nil
	}
	return "", fault.Invalidf("unknown batch %q (want matrix, epoch-check, epoch-check-same-identity or receiver-check)", s)
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
	case BatchEpochCheckSameIdentity:
		rcs = one(playground.EpochCheck, true)
	case BatchReceiverCheck:
		rcs = one(playground.ReceiverCheck, false)
	default:
		return nil, fault.Invalidf("unknown batch %q", name)
	}
	for i := range rcs {
		if err := rcs[i].Validate(); err != nil {
			return nil, err
		}
	}
	return rcs, nil
}
