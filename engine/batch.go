package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencelab/fencelab/engine/internal/hook"
)

// The production path: the same claim and compare-and-set, many jobs to a
// statement. Every completion is fenced: each job of a batch lands only if
// its caller still owns it at the epoch it holds, and a fenced one is
// refused with the reasons its own row gave, while the rest of the batch
// lands.

// Completion is a claimed job's result, to record.
type Completion struct {
	Claim  Claim
	Result []byte
}

// Failure is a claimed job's failure, to record.
type Failure struct {
	Claim  Claim
	Reason string
}

// BatchResult says what became of one job of a batch write.
type BatchResult struct {
	JobID int64
	// Err is nil when the write landed. Otherwise it is a *FencedError
	// (errors.Is ErrFenced) with what the row held when it was judged,
	// when another claim took the job; a *FinishedError (ErrFinished) when
	// the job's holder had finished it already; ErrJobNotFound for a job
	// that is not there at all.
	Err error
	// Status is the status a failure took (pending for a retry, or failed);
	// LeaseUntil the lease a renewal set. Zero otherwise.
	Status     Status
	LeaseUntil time.Time
	DBTime     time.Time
}

// ClaimBatch takes up to n claimable jobs (1 to MaxBatch) in one statement:
// pending ones, or running ones whose lease has run out on the database
// clock, each with its epoch bumped and a fresh lease, passing over rows
// another claimer holds. It returns the jobs it took, in id order, or
// ErrNoJob for none.
func (q *Queue) ClaimBatch(ctx context.Context, owner string, n int, lease time.Duration) ([]Claim, error) {
	if err := ValidateOwner(owner); err != nil {
		return nil, fmt.Errorf("claim a batch: %w", err)
	}
	if err := ValidateLease(lease); err != nil {
		return nil, fmt.Errorf("claim a batch: %w", err)
	}
	if n < 1 || n > MaxBatch {
		return nil, fmt.Errorf("claim a batch: %w", invalidf("a batch of %d jobs: want 1 to %d", n, MaxBatch))
	}
	st := jobClaimBatch(q.cfg.Schema, q.hooks().Broken, owner, n, lease, q.now())
	start := time.Now()
	rows, err := q.db.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		q.trace(st, 0, time.Time{}, err, start)
		return nil, translate("claim a batch", err)
	}
	var out []Claim
	var at time.Time
	for rows.Next() {
		var c Claim
		var payload []byte
		if err := rows.Scan(&c.JobID, &c.Owner, &c.Epoch, &c.LeaseUntil, &c.Attempt, &payload, &c.DBTime); err != nil {
			rows.Close()
			return nil, translate("claim a batch", err)
		}
		c.Payload = payload
		at = c.DBTime
		out = append(out, c)
	}
	rows.Close()
	q.trace(st, int64(len(out)), at, rows.Err(), start)
	if err := rows.Err(); err != nil {
		return nil, translate("claim a batch", err)
	}
	if len(out) == 0 {
		return nil, ErrNoJob
	}
	sortClaims(out)
	return out, nil
}

func sortClaims(cs []Claim) {
	slices.SortFunc(cs, func(a, b Claim) int { return cmp.Compare(a.JobID, b.JobID) })
}

// claimArrays are a batch's claims as the statement's arrays, checked: every
// claim well formed, and no job twice.
func claimArrays(op string, cs []Claim) (ids []int64, owners []string, epochs []int64, err error) {
	if len(cs) == 0 || len(cs) > MaxBatch {
		return nil, nil, nil, fmt.Errorf("%s: %w", op, invalidf("a batch of %d jobs: want 1 to %d", len(cs), MaxBatch))
	}
	seen := make(map[int64]bool, len(cs))
	for _, c := range cs {
		if err := validateJobID(c.JobID); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", op, err)
		}
		if err := ValidateOwner(c.Owner); err != nil {
			return nil, nil, nil, fmt.Errorf("%s job %d: %w", op, c.JobID, err)
		}
		if c.Epoch < 0 {
			return nil, nil, nil, fmt.Errorf("%s job %d: %w", op, c.JobID, invalidf("epoch %d is negative", c.Epoch))
		}
		if seen[c.JobID] {
			return nil, nil, nil, fmt.Errorf("%s: %w", op, invalidf("job %d is in the batch twice", c.JobID))
		}
		seen[c.JobID] = true
		ids, owners, epochs = append(ids, c.JobID), append(owners, c.Owner), append(epochs, c.Epoch)
	}
	return ids, owners, epochs, nil
}

// CompleteBatch records many jobs' results in one statement, each by
// compare-and-set on its own owner and epoch. It returns one result per
// completion, in order: a fenced job's Err is a *FencedError, and the rest
// of the batch lands all the same. The error is for the batch as a whole
// (bad input, the database).
func (q *Queue) CompleteBatch(ctx context.Context, cs []Completion) ([]BatchResult, error) {
	claims := make([]Claim, len(cs))
	results := make([]string, len(cs))
	for i, c := range cs {
		claims[i] = c.Claim
		if err := ValidatePayload("result", c.Result); err != nil {
			return nil, fmt.Errorf("complete job %d: %w", c.Claim.JobID, err)
		}
		results[i] = string(c.Result)
	}
	ids, owners, epochs, err := claimArrays("complete a batch", claims)
	if err != nil {
		return nil, err
	}
	return q.casBatch(ctx, "complete", claims, jobCompleteBatch(q.cfg.Schema, q.hooks().Broken, ids, owners, epochs, results), nil)
}

// FailBatch records many failures in one statement, each by compare-and-set
// on its own owner and epoch; a job goes back to pending while it has
// attempts left, to wait out the queue's RetryDelayFunc for its attempt,
// and is failed after (Status says which). Results are in order, as for
// CompleteBatch.
func (q *Queue) FailBatch(ctx context.Context, fs []Failure) ([]BatchResult, error) {
	claims := make([]Claim, len(fs))
	reasons := make([]string, len(fs))
	for i, f := range fs {
		claims[i] = f.Claim
		if strings.TrimSpace(f.Reason) == "" {
			return nil, fmt.Errorf("fail job %d: %w", f.Claim.JobID, invalidf("reason is empty"))
		}
		if len(f.Reason) > MaxReasonLen {
			return nil, fmt.Errorf("fail job %d: %w", f.Claim.JobID, invalidf("reason is longer than %d bytes", MaxReasonLen))
		}
		reasons[i] = f.Reason
	}
	ids, owners, epochs, err := claimArrays("fail a batch", claims)
	if err != nil {
		return nil, err
	}
	delays := make([]time.Duration, len(fs))
	for i, f := range fs {
		delays[i] = q.delay(f.Claim.Attempt)
	}
	return q.casBatch(ctx, "fail", claims, jobFailBatch(q.cfg.Schema, q.hooks().Broken, ids, owners, epochs, reasons, delays), func(r *BatchResult, v any) {
		r.Status = Status(v.(string))
	})
}

// RenewBatch extends many leases in one statement, each by compare-and-set
// on its own owner and epoch: a job taken over is fenced, exactly as its
// commit would be. LeaseUntil is each new lease end on the database clock.
func (q *Queue) RenewBatch(ctx context.Context, cs []Claim, lease time.Duration) ([]BatchResult, error) {
	if err := ValidateLease(lease); err != nil {
		return nil, fmt.Errorf("renew a batch: %w", err)
	}
	ids, owners, epochs, err := claimArrays("renew a batch", cs)
	if err != nil {
		return nil, err
	}
	return q.casBatch(ctx, "renew", cs, leaseRenewBatch(q.cfg.Schema, q.hooks().Broken, ids, owners, epochs, lease, q.now()), func(r *BatchResult, v any) {
		r.LeaseUntil = v.(time.Time)
	})
}

// lockBatch locks the rows of many jobs, in id order, and says for each
// whether its caller still holds it — the same guards as a compare-and-set
// would judge, with the same *FencedError or *FinishedError when not —
// without writing anything: the first step of a transaction that then
// writes for the jobs held, knowing no other claim can take them before it
// commits.
func (q *Queue) lockBatch(ctx context.Context, cs []Claim) ([]BatchResult, error) {
	ids, owners, epochs, err := claimArrays("lock a batch", cs)
	if err != nil {
		return nil, err
	}
	return q.casBatch(ctx, "complete", cs, jobLockBatch(q.cfg.Schema, q.hooks().Broken, ids, owners, epochs), nil)
}

// on returns a copy of q that runs its statements on db, such as a
// transaction.
func (q *Queue) on(db DB) *Queue {
	c := *q
	c.db = db
	return &c
}

// casBatch runs a statement built by casBatch and says, for each claim in
// order, whether its write landed, with what the row held when it did not.
// fill, if set, takes the UPDATE's returned value of a write that landed.
func (q *Queue) casBatch(ctx context.Context, op string, cs []Claim, st hook.Statement, fill func(*BatchResult, any)) ([]BatchResult, error) {
	start := time.Now()
	rows, err := q.db.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		q.trace(st, 0, time.Time{}, err, start)
		return nil, translate(op+" a batch", err)
	}
	out := make([]BatchResult, 0, len(cs))
	written := int64(0)
	var at time.Time
	for rows.Next() {
		var r BatchResult
		var rowStatus, rowOwner *string
		var rowEpoch *int64
		var returned any
		if err := rows.Scan(&r.JobID, &rowStatus, &rowOwner, &rowEpoch, &returned, &r.DBTime); err != nil {
			rows.Close()
			return nil, translate(op+" a batch", err)
		}
		at = r.DBTime
		i := len(out)
		switch {
		case i >= len(cs) || cs[i].JobID != r.JobID:
			rows.Close()
			return nil, fmt.Errorf("%s a batch: the answers came out of order", op)
		case rowStatus == nil:
			r.Err = fmt.Errorf("%s job %d: %w", op, r.JobID, ErrJobNotFound)
		case returned == nil:
			fe := &FencedError{Op: op, JobID: r.JobID, HeldOwner: cs[i].Owner, HeldEpoch: cs[i].Epoch,
				RowStatus: Status(*rowStatus), RowOwner: derefString(rowOwner), RowEpoch: *rowEpoch}
			fe.Reasons = fenceReasons(q.hooks().Broken, fe)
			r.Err = q.notWritten(fe)
		default:
			written++
			if fill != nil {
				fill(&r, returned)
			}
		}
		out = append(out, r)
	}
	rows.Close()
	q.trace(st, written, at, rows.Err(), start)
	if err := rows.Err(); err != nil {
		return nil, translate(op+" a batch", err)
	}
	if len(out) != len(cs) {
		return nil, fmt.Errorf("%s a batch: %d answers for %d jobs", op, len(out), len(cs))
	}
	return out, nil
}

func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
