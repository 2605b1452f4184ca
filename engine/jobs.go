package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fencelab/fencelab/engine/internal/hook"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// MaxBatch bounds the jobs of one batch statement.
const MaxBatch = 10_000

// Limits on input. Anything outside them is refused with ErrInvalidInput
// before a statement is sent.
const (
	MinLease        = 10 * time.Millisecond
	MaxLease        = 24 * time.Hour
	MaxPayloadBytes = 64 << 10
	MaxOwnerLen     = 128
	MaxReasonLen    = 2048
	MaxAttemptsCap  = 100
	// DefaultMaxAttempts is a job's attempt limit when its insert gives none.
	DefaultMaxAttempts = 3
)

// Job is a row of the jobs table as the database holds it.
type Job struct {
	ID          int64           `json:"id"`
	Payload     json.RawMessage `json:"payload"`
	Status      Status          `json:"status"`
	Owner       string          `json:"owner"`
	Epoch       int64           `json:"epoch"`
	LeaseUntil  *time.Time      `json:"lease_until"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`
	RunAt       time.Time       `json:"run_at"` // a pending job is not claimed before it
	Result      json.RawMessage `json:"result"`
	Error       string          `json:"error,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	DBTime      time.Time       `json:"db_time"` // the database clock when the row was read
}

// Claim is what a successful claim hands its worker: the job, the owner and
// epoch it now holds, and the lease on the database clock.
type Claim struct {
	JobID      int64           `json:"job_id"`
	Owner      string          `json:"owner"`
	Epoch      int64           `json:"epoch"`
	LeaseUntil time.Time       `json:"lease_until"`
	Attempt    int             `json:"attempt"`
	Payload    json.RawMessage `json:"payload"`
	DBTime     time.Time       `json:"db_time"`
}

// QueueConfig configures a Queue. The zero value of every field but Schema
// is usable.
type QueueConfig struct {
	// Schema is the jobs schema; it must have been set up with SetupQueue
	// (or migrated to LatestVersion).
	Schema string
	// RetryDelayFunc says how long a failed job waits before it may be
	// claimed again, given the attempt that failed (1 for the first).
	// Default: exponential backoff with jitter, 1s × 2^(attempt-1), capped
	// at an hour, each delay drawn from ±25% of it so that jobs that failed
	// together do not all come back together. Return 0 to retry at once; a
	// negative delay counts as 0, and one over MaxRetryDelay as
	// MaxRetryDelay.
	RetryDelayFunc func(attempt int) time.Duration
}

// retryDelay is the default RetryDelayFunc.
func retryDelay(attempt int) time.Duration {
	d := time.Hour
	if attempt >= 1 && attempt <= 13 { // 2^12 s is over an hour
		d = min(time.Second<<(attempt-1), time.Hour)
	}
	return time.Duration(float64(d) * (0.75 + 0.5*rand.Float64()))
}

// delay is the wait before the retry of a job whose attempt failed, never
// negative and never over MaxRetryDelay.
func (q *Queue) delay(attempt int) time.Duration {
	return min(max(q.cfg.RetryDelayFunc(attempt), 0), MaxRetryDelay)
}

// MaxRetryDelay bounds a RetryDelayFunc's answer.
const MaxRetryDelay = 30 * 24 * time.Hour

// Queue runs the job statements of one schema. It holds no connection of
// its own: every method uses the DB it was made with, so a Queue is safe for
// concurrent use exactly when that DB is (a pool is; a single conn is not).
type Queue struct {
	db  DB
	cfg QueueConfig
	queueSlot
}

// NewQueue validates cfg and returns a Queue over db.
func NewQueue(db DB, cfg QueueConfig) (*Queue, error) {
	if db == nil {
		return nil, invalidf("a queue needs a DB")
	}
	if err := ValidateSchemaName(cfg.Schema); err != nil {
		return nil, err
	}
	if cfg.RetryDelayFunc == nil {
		cfg.RetryDelayFunc = retryDelay
	}
	q := &Queue{db: db, cfg: cfg}
	h := q.hooks()
	h.Claimable, h.Expired = q.claimable, q.expired
	return q, nil
}

// now is the worker's own clock, which a statement reads only while the
// db-clock guard is broken.
func (q *Queue) now() time.Time {
	if q.hooks().Now != nil {
		return q.hooks().Now()
	}
	return time.Now()
}

func (q *Queue) trace(st hook.Statement, rows int64, dbTime time.Time, err error, start time.Time) {
	if q.hooks().Trace != nil {
		q.hooks().Trace(hook.Trace{Statement: st, Rows: rows, DBTime: dbTime, Err: err, Elapsed: time.Since(start)})
	}
}

// ValidateLease checks that a lease length is within [MinLease, MaxLease].
func ValidateLease(d time.Duration) error {
	if d < MinLease || d > MaxLease {
		return invalidf("lease %v is out of range: it must be between %v and %v", d, MinLease, MaxLease)
	}
	return nil
}

// ValidateOwner checks a worker identity: non-empty, printable, bounded.
func ValidateOwner(owner string) error {
	if owner == "" {
		return invalidf("owner is empty")
	}
	if len(owner) > MaxOwnerLen {
		return invalidf("owner is longer than %d bytes", MaxOwnerLen)
	}
	if !utf8.ValidString(owner) || strings.IndexFunc(owner, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return invalidf("owner %q has characters that are not printable", owner)
	}
	return nil
}

// ValidatePayload checks a JSON document: non-empty, valid, bounded.
func ValidatePayload(what string, b []byte) error {
	switch {
	case len(strings.TrimSpace(string(b))) == 0:
		return invalidf("%s is empty", what)
	case len(b) > MaxPayloadBytes:
		return invalidf("%s is %d bytes; the limit is %d", what, len(b), MaxPayloadBytes)
	case !json.Valid(b):
		return invalidf("%s is not valid JSON", what)
	case string(b) == "null":
		return invalidf("%s is null", what)
	}
	return nil
}

func validateJobID(id int64) error {
	if id <= 0 {
		return invalidf("job id %d is not positive", id)
	}
	return nil
}

// Insert adds a pending job with the given JSON payload and attempt limit
// (0 means DefaultMaxAttempts), to run now. It is InsertMany of one job.
func (q *Queue) Insert(ctx context.Context, payload []byte, maxAttempts int) (int64, error) {
	if err := (NewJob{Payload: payload, MaxAttempts: maxAttempts}).validate(); err != nil {
		return 0, fmt.Errorf("insert job: %w", err)
	}
	if maxAttempts == 0 {
		maxAttempts = DefaultMaxAttempts
	}
	st := jobInsert(q.cfg.Schema, payload, maxAttempts, pgtype.Timestamptz{})
	start := time.Now()
	var id int64
	var at time.Time
	err := q.db.QueryRow(ctx, st.SQL, st.Args...).Scan(&id, &at)
	q.trace(st, rowsOf(err), at, err, start)
	if err != nil {
		return 0, translate("insert job", err)
	}
	return id, nil
}

// NewJob is a job to insert.
type NewJob struct {
	Payload []byte // a JSON document, at most MaxPayloadBytes
	// MaxAttempts is how many claims the job may have: once they are used
	// up it is failed, whether its last attempt failed or its lease ran
	// out. 0 means DefaultMaxAttempts; at most MaxAttemptsCap.
	MaxAttempts int
	// RunAt is when the job may first be claimed, on the database clock.
	// Zero: now.
	RunAt time.Time
}

func (j NewJob) validate() error {
	if err := ValidatePayload("payload", j.Payload); err != nil {
		return err
	}
	if j.MaxAttempts < 0 || j.MaxAttempts > MaxAttemptsCap {
		return invalidf("max attempts %d must be between 1 and %d (0: the default, %d)", j.MaxAttempts, MaxAttemptsCap, DefaultMaxAttempts)
	}
	return nil
}

// InsertMany adds up to MaxBatch jobs in one statement and returns their
// ids in order: all of them or, on an error, none.
func (q *Queue) InsertMany(ctx context.Context, jobs []NewJob) ([]int64, error) {
	return q.insertMany(ctx, q.db, jobs)
}

// InsertTx adds jobs as InsertMany does, in the caller's transaction: they
// exist if and only if tx commits, so a job can be enqueued atomically with
// the write that calls for it. tx may be any pgx.Tx, on any connection to
// the queue's database.
func (q *Queue) InsertTx(ctx context.Context, tx pgx.Tx, jobs []NewJob) ([]int64, error) {
	if tx == nil {
		return nil, fmt.Errorf("insert jobs: %w", invalidf("no transaction"))
	}
	return q.insertMany(ctx, tx, jobs)
}

func (q *Queue) insertMany(ctx context.Context, db DB, jobs []NewJob) ([]int64, error) {
	if len(jobs) == 0 || len(jobs) > MaxBatch {
		return nil, fmt.Errorf("insert jobs: %w", invalidf("%d jobs: want 1 to %d", len(jobs), MaxBatch))
	}
	payloads := make([]string, len(jobs))
	attempts := make([]int32, len(jobs))
	runAt := make([]pgtype.Timestamptz, len(jobs))
	for i, j := range jobs {
		if err := j.validate(); err != nil {
			return nil, fmt.Errorf("insert job %d of %d: %w", i+1, len(jobs), err)
		}
		payloads[i], attempts[i] = string(j.Payload), int32(j.MaxAttempts)
		if j.MaxAttempts == 0 {
			attempts[i] = DefaultMaxAttempts
		}
		if !j.RunAt.IsZero() {
			runAt[i] = pgtype.Timestamptz{Time: j.RunAt, Valid: true}
		}
	}
	st := jobInsertMany(q.cfg.Schema, payloads, attempts, runAt)
	start := time.Now()
	rows, err := db.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		q.trace(st, 0, time.Time{}, err, start)
		return nil, translate("insert jobs", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	q.trace(st, int64(len(ids)), time.Time{}, err, start)
	if err != nil {
		return nil, translate("insert jobs", err)
	}
	if len(ids) != len(jobs) {
		return nil, fmt.Errorf("insert jobs: %d ids for %d jobs", len(ids), len(jobs))
	}
	return ids, nil
}

// Claim takes one claimable job for owner under a lease of the given length,
// in one statement (rule 1). The lease is judged on the database clock
// (rule 2), and every claim bumps the epoch. When nothing is claimable it
// returns ErrNoJob. The same statement first ends, as failed, every job
// whose lease ran out on its last attempt (see the package doc's state
// model): until some claim runs, such a job stays running with its lease
// run out, and no claim takes it.
func (q *Queue) Claim(ctx context.Context, owner string, lease time.Duration) (Claim, error) {
	if err := ValidateOwner(owner); err != nil {
		return Claim{}, fmt.Errorf("claim: %w", err)
	}
	if err := ValidateLease(lease); err != nil {
		return Claim{}, fmt.Errorf("claim: %w", err)
	}
	st := jobClaim(q.cfg.Schema, q.hooks().Broken, owner, lease, q.now())
	start := time.Now()
	var c Claim
	var payload []byte
	err := q.db.QueryRow(ctx, st.SQL, st.Args...).Scan(&c.JobID, &c.Owner, &c.Epoch, &c.LeaseUntil, &c.Attempt, &payload, &c.DBTime)
	q.trace(st, rowsOf(err), c.DBTime, noRowsOK(err), start)
	if errors.Is(err, pgx.ErrNoRows) {
		return Claim{}, ErrNoJob
	}
	if err != nil {
		return Claim{}, translate("claim", err)
	}
	c.Payload = payload
	return c, nil
}

// claimable counts the jobs a claim would see as claimable now, locked or
// not. A claim that got ErrNoJob while this is above zero skipped a
// row that another session held locked for a moment (SKIP LOCKED): trying
// again shortly may take it.
func (q *Queue) claimable(ctx context.Context) (int, error) {
	st := jobCountClaimable(q.cfg.Schema, q.hooks().Broken, q.now())
	var n int
	if err := q.db.QueryRow(ctx, st.SQL, st.Args...).Scan(&n); err != nil {
		return 0, translate("count claimable jobs", err)
	}
	return n, nil
}

// Renew extends the lease of a job the caller holds, by compare-and-set on
// owner and epoch. It returns the new lease end on the database clock. A
// worker whose job was taken over gets a *FencedError, exactly as its
// commit would.
func (q *Queue) Renew(ctx context.Context, c Claim, lease time.Duration) (time.Time, error) {
	if err := q.validateHeld("renew", c); err != nil {
		return time.Time{}, err
	}
	if err := ValidateLease(lease); err != nil {
		return time.Time{}, fmt.Errorf("renew job %d: %w", c.JobID, err)
	}
	var until *time.Time
	if _, err := q.cas(ctx, "renew", c, leaseRenew(q.cfg.Schema, q.hooks().Broken, c.JobID, c.Owner, c.Epoch, lease, q.now()), &until); err != nil {
		return time.Time{}, err
	}
	return *until, nil
}

// Complete records the job's result by compare-and-set on owner and epoch
// (rule 3). When the caller no longer owns the job, the result is dropped
// and a *FencedError says what the row held at that moment. It returns the
// database time of the commit.
func (q *Queue) Complete(ctx context.Context, c Claim, result []byte) (time.Time, error) {
	if err := q.validateHeld("complete", c); err != nil {
		return time.Time{}, err
	}
	if err := ValidatePayload("result", result); err != nil {
		return time.Time{}, fmt.Errorf("complete job %d: %w", c.JobID, err)
	}
	var epoch *int64
	return q.cas(ctx, "complete", c, jobComplete(q.cfg.Schema, q.hooks().Broken, c.JobID, c.Owner, c.Epoch, result), &epoch)
}

// Fail records a failure by compare-and-set on owner and epoch. The job
// goes back to pending while it has attempts left, to be claimed again
// after the queue's RetryDelayFunc, and to failed after. It returns the
// status the job took.
func (q *Queue) Fail(ctx context.Context, c Claim, reason string) (Status, error) {
	if err := q.validateHeld("fail", c); err != nil {
		return "", err
	}
	if strings.TrimSpace(reason) == "" {
		return "", fmt.Errorf("fail job %d: %w", c.JobID, invalidf("reason is empty"))
	}
	if len(reason) > MaxReasonLen {
		return "", fmt.Errorf("fail job %d: %w", c.JobID, invalidf("reason is longer than %d bytes", MaxReasonLen))
	}
	var status *Status
	if _, err := q.cas(ctx, "fail", c, jobFail(q.cfg.Schema, q.hooks().Broken, c.JobID, c.Owner, c.Epoch, reason, q.delay(c.Attempt)), &status); err != nil {
		return "", err
	}
	return *status, nil
}

// cas runs a compare-and-set statement built by casStatement: it scans
// the row as the statement saw it, the UPDATE's one returned column into
// returned (NULL when nothing was written) and the database time. Nothing
// written becomes a *FencedError whose reasons come from the row that same
// statement locked and judged.
func (q *Queue) cas(ctx context.Context, op string, c Claim, st hook.Statement, returned any) (time.Time, error) {
	var rowStatus Status
	var rowOwner *string
	var rowEpoch int64
	var at time.Time
	start := time.Now()
	err := q.db.QueryRow(ctx, st.SQL, st.Args...).Scan(&rowStatus, &rowOwner, &rowEpoch, returned, &at)
	written := err == nil && !isNullPtr(returned)
	rows := int64(0)
	if written {
		rows = 1
	}
	q.trace(st, rows, at, noRowsOK(err), start)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, fmt.Errorf("%s job %d: %w", op, c.JobID, ErrJobNotFound)
	case err != nil:
		return time.Time{}, translate(fmt.Sprintf("%s job %d", op, c.JobID), err)
	case written:
		return at, nil
	}
	fe := &FencedError{Op: op, JobID: c.JobID, HeldOwner: c.Owner, HeldEpoch: c.Epoch, RowEpoch: rowEpoch, RowStatus: rowStatus}
	if rowOwner != nil {
		fe.RowOwner = *rowOwner
	}
	fe.Reasons = fenceReasons(q.hooks().Broken, fe)
	return at, q.notWritten(fe)
}

// notWritten is the error for a compare-and-set that wrote nothing: a
// *FencedError when another claim took the job, and a *FinishedError when
// none did but the job is no longer running — its holder finished it
// already. The two are told apart by the row as the statement saw it: every
// claim bumps the epoch, and only a holder of the row's epoch can write
// it, so a row still at the held owner and epoch was finished by this very
// claim. With the epoch-increment or the epoch-check guard broken, another
// claim's write can leave that same owner and epoch behind, nothing tells
// the two apart, and it is a fence.
func (q *Queue) notWritten(fe *FencedError) error {
	if q.hooks().Broken.On(hook.EpochIncrement) && q.hooks().Broken.On(hook.EpochCheck) && fe.RowStatus != StatusRunning && fe.RowOwner == fe.HeldOwner && fe.RowEpoch == fe.HeldEpoch {
		return &FinishedError{Op: fe.Op, JobID: fe.JobID, Epoch: fe.RowEpoch, Status: fe.RowStatus}
	}
	return fe
}

// fenceReasons lists each kept guard the row as seen failed, in guard
// order: why a write was fenced.
func fenceReasons(gs hook.Guards, fe *FencedError) []FenceReason {
	var rs []FenceReason
	if gs.On(hook.StatusCheck) && fe.RowStatus != StatusRunning {
		rs = append(rs, ReasonNotRunning)
	}
	if gs.On(hook.OwnerCheck) && fe.RowOwner != fe.HeldOwner {
		rs = append(rs, ReasonOwnerChanged)
	}
	if gs.On(hook.EpochCheck) && fe.RowEpoch != fe.HeldEpoch {
		rs = append(rs, ReasonEpochChanged)
	}
	return rs
}

// isNullPtr reports whether p points at a nil pointer: a NULL scanned from
// the UPDATE's side of the outer join, which means it wrote nothing.
func isNullPtr(p any) bool {
	switch v := p.(type) {
	case **time.Time:
		return *v == nil
	case **int64:
		return *v == nil
	case **Status:
		return *v == nil
	}
	return false
}

// Get reads one job. An unknown id gives ErrJobNotFound.
func (q *Queue) Get(ctx context.Context, id int64) (Job, error) {
	if err := validateJobID(id); err != nil {
		return Job{}, fmt.Errorf("get job: %w", err)
	}
	st := jobGet(q.cfg.Schema, id)
	start := time.Now()
	j, err := scanJob(q.db.QueryRow(ctx, st.SQL, st.Args...))
	q.trace(st, rowsOf(err), j.DBTime, noRowsOK(err), start)
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, fmt.Errorf("get job %d: %w", id, ErrJobNotFound)
	}
	if err != nil {
		return Job{}, translate(fmt.Sprintf("get job %d", id), err)
	}
	return j, nil
}

// Place is a job's place in line: 1 when it is the pending job the next
// claim takes first (once its run_at has come), n when n-1 pending jobs
// come before it in the claim's order (run_at, then id); 0 for a job that
// is not pending (running, done or failed: Get says which). A job whose
// lease ran out is claimed beside the pending ones and is not counted. A
// job that does not exist is ErrJobNotFound. For a line a person waits
// in: "3rd in line".
func (q *Queue) Place(ctx context.Context, id int64) (int, error) {
	if err := validateJobID(id); err != nil {
		return 0, fmt.Errorf("place of job: %w", err)
	}
	st := jobPlace(q.cfg.Schema, id)
	var status Status
	var place int
	err := q.db.QueryRow(ctx, st.SQL, st.Args...).Scan(&status, &place)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("place of job %d: %w", id, ErrJobNotFound)
	}
	if err != nil {
		return 0, translate(fmt.Sprintf("place of job %d", id), err)
	}
	return place, nil
}

// List reads up to limit jobs, oldest first.
func (q *Queue) List(ctx context.Context, limit int) ([]Job, error) {
	if limit <= 0 || limit > 10000 {
		return nil, fmt.Errorf("list jobs: %w", invalidf("limit %d must be between 1 and 10000", limit))
	}
	st := jobList(q.cfg.Schema, limit)
	rows, err := q.db.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		return nil, translate("list jobs", err)
	}
	defer rows.Close()
	var out []Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, translate("list jobs", err)
		}
		out = append(out, j)
	}
	return out, translate("list jobs", rows.Err())
}

func scanJob(row pgx.Row) (Job, error) {
	var j Job
	var owner, errText *string
	var payload, result []byte
	err := row.Scan(&j.ID, &payload, &j.Status, &owner, &j.Epoch, &j.LeaseUntil, &j.Attempts, &j.MaxAttempts,
		&j.RunAt, &result, &errText, &j.CreatedAt, &j.UpdatedAt, &j.DBTime)
	if owner != nil {
		j.Owner = *owner
	}
	if errText != nil {
		j.Error = *errText
	}
	j.Payload, j.Result = payload, result
	return j, err
}

func (q *Queue) validateHeld(op string, c Claim) error {
	if err := validateJobID(c.JobID); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := ValidateOwner(c.Owner); err != nil {
		return fmt.Errorf("%s job %d: %w", op, c.JobID, err)
	}
	if c.Epoch < 0 {
		return fmt.Errorf("%s job %d: %w", op, c.JobID, invalidf("epoch %d is negative", c.Epoch))
	}
	return nil
}

func rowsOf(err error) int64 {
	if err == nil {
		return 1
	}
	return 0
}

// noRowsOK hides pgx.ErrNoRows from a trace: zero rows is an answer, not a
// failure of the statement.
func noRowsOK(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	return err
}

// expired lists the running jobs whose lease has run out on the database
// clock, with the database time in each Job's DBTime.
func (q *Queue) expired(ctx context.Context) ([]Job, error) {
	st := jobListExpired(q.cfg.Schema)
	rows, err := q.db.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		return nil, translate("expired leases", err)
	}
	defer rows.Close()
	var out []Job
	for rows.Next() {
		var j Job
		var owner *string
		if err := rows.Scan(&j.ID, &owner, &j.Epoch, &j.LeaseUntil, &j.DBTime); err != nil {
			return nil, translate("expired leases", err)
		}
		if owner != nil {
			j.Owner = *owner
		}
		j.Status = StatusRunning
		out = append(out, j)
	}
	return out, translate("expired leases", rows.Err())
}
