package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// WorkerPool works a queue's jobs with a handler function, many at once,
// on the production path: jobs are claimed a batch at a time, their leases
// renewed a batch at a time, and their results recorded a batch at a time,
// every one of them by compare-and-set on its own owner and epoch.
//
// A job whose lease the pool lost — a stall, a pause, a partition — has its
// handler's context cancelled as soon as a renewal is fenced, or as soon as
// its lease has run out by the pool's own reckoning, whichever comes first
// (context.Cause says which: ErrLeaseLost, or the *FencedError). Its result,
// if it comes anyway, is refused by the fence and handed to OnFenced.
//
// # What a handler may see twice
//
// The pool runs each job at least once, not exactly once: a handler may
// run again for a job whose earlier run's lease was lost (the process
// stalled, or died, before its completion landed), under a newer epoch.
// Only the run whose completion lands counts; the others are fenced. So:
//
//   - The handler itself may run more than once per job, each time with a
//     newer Claim.Epoch. An effect it causes outside the database should
//     carry the epoch, for a receiver that refuses older ones (rule 4).
//   - A HandlerTx's TxFunc runs only after the job's row is locked and its
//     owner and epoch checked, and its writes commit together with the
//     compare-and-set or not at all: for every job, exactly one run's
//     writes are kept, the run whose completion landed. The TxFunc may
//     still be called more than once for one claim, each time in a
//     transaction that then rolled back (a lost connection, a lock timeout,
//     a failover, before the commit): it must not cause effects outside
//     the transaction it is given.
//   - A completion that fails for a transient reason is retried, with
//     backoff, while the job's lease holds (the pool goes on renewing it).
//     A retry that finds the job already done by this very claim knows the
//     earlier commit landed (its answer was lost) and runs nothing again.
//     Only a fenced completion is dropped.
type WorkerPool struct {
	cfg WorkerPoolConfig

	mu sync.Mutex
	// inFlight holds the claims being worked, by job and epoch: after its
	// lease ran out, the pool may claim a job again while its earlier
	// run has not yet returned, and the two runs must not be confused.
	inFlight map[claimKey]*flight
}

// claimKey names one claim of a job: its id and the epoch it holds.
type claimKey struct{ job, epoch int64 }

func heldOf(c Claim) claimKey { return claimKey{c.JobID, c.Epoch} }

// ErrLeaseLost is the cause (context.Cause) of a handler's context that
// the pool cancelled because the job's lease ran out before a renewal
// could extend it: another claim may take the job at any moment.
var ErrLeaseLost = errors.New("the job's lease ran out")

// Handler does one job and returns its result (a JSON document, or nil for
// {}), or an error to record as the job's failure, which is retried after
// the queue's RetryDelayFunc while the job has attempts left. It should
// give up when ctx ends: the pool lost the job's lease, or is stopping.
type Handler func(ctx context.Context, job Claim) (result []byte, err error)

// TxHandler is a Handler whose job also writes to the database, fenced:
// it does the job's work, then returns, beside the result, a TxFunc with
// the job's writes (nil for none). The pool runs it in the transaction
// that records the job's completion, after the job's row is locked and
// its owner and epoch checked, so the writes commit with the completion,
// and never happen for a job another claim took. An error from the TxFunc
// undoes its writes alone and becomes the job's failure; the rest of the
// batch commits (the batch is then run again with a savepoint per job).
type TxHandler func(ctx context.Context, job Claim) (result []byte, write TxFunc, err error)

// TxFunc writes a job's effects in the transaction tx, which the pool
// commits together with the job's completion. It may run more than once
// for one claim, each time in a transaction that then rolled back; see
// WorkerPool.
type TxFunc func(ctx context.Context, tx pgx.Tx) error

// WorkerPoolConfig configures a WorkerPool. Queue, Owner and one of
// Handler or HandlerTx are required; every other field has a default.
type WorkerPoolConfig struct {
	Queue *Queue
	// Owner names this pool in every claim: unique to the process, and
	// never reused by a later one (a hostname or a pid alone is not: a
	// restarted pod keeps its hostname, and pids come round again).
	// UniqueOwner makes one.
	Owner string
	// Handler, or HandlerTx for a job with fenced writes of its own; not
	// both. HandlerTx needs a Queue whose DB can begin transactions (a
	// pgxpool.Pool can).
	Handler   Handler
	HandlerTx TxHandler
	// Concurrency is how many handlers run at once. Default 100. A job
	// whose handler has returned gives its place to the next claim at
	// once, while its result waits to be recorded: so a claim overlaps
	// the completion before it, and up to Concurrency more jobs may be
	// held, their leases renewed, until their results are recorded.
	Concurrency int
	// BatchSize bounds the jobs of one claim, renewal or completion
	// statement. Default 500.
	BatchSize int
	// Completers is how many completion statements may be in flight at
	// once. Default 2.
	Completers int
	// Lease is each claim's lease. Default 30s. Heartbeat is how often the
	// leases of the jobs in flight are renewed: shorter than Lease, and by
	// default a third of it.
	// The renewals take connections from the Queue's DB like everything
	// else: with a short lease, size a pgxpool so that they never wait for
	// one for long (handlers that use the same pool count; MinConns saves
	// the first renewals from waiting on new connections), or leases are
	// lost with no stall at all.
	Lease     time.Duration
	Heartbeat time.Duration
	// PollInterval is how long the pool waits when it found no job.
	// Default 100ms.
	PollInterval time.Duration
	// Linger is how long a claim, with fewer than a batch of handlers
	// free, waits for more to free up, and a completion, with fewer than a
	// batch of results, for more to come: a few full statements cost the
	// database less than many small ones. Default 1ms; negative: none.
	Linger time.Duration
	// StopTimeout is how long Run, once its context ends, lets the
	// handlers in flight finish before it cancels theirs. Default 10s. Run
	// then still waits for every handler to return: one that ignores its
	// context holds Run up. A job whose handler a stop cancelled counts the
	// attempt it was on (its error is recorded as a failure and retried
	// after its delay, or its lease runs out).
	StopTimeout time.Duration
	// OnFenced, if set, is told of each write of the pool's — a renewal or
	// a completion — that the fence refused because another claim took the
	// job after its lease was lost. A write that finds the pool's own
	// finished job is no fence and is not told.
	OnFenced func(*FencedError)
	// OnError, if set, is told of each statement that failed. The pool
	// goes on: a claim or a renewal is tried again at its next turn, and a
	// completion is retried with backoff while its lease holds; the error
	// says which, and when a completion is given up.
	OnError func(error)
	// OnRecorded, if set, is told after each completion or failure
	// statement how many of its jobs' writes landed and how many the fence
	// refused: a place for metrics.
	OnRecorded func(landed, fenced int)
}

// UniqueOwner returns prefix, a dash and 16 random hex digits: an owner
// name for a WorkerPool that no other process, and no later run of this
// one, will hold.
func UniqueOwner(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return prefix + "-" + hex.EncodeToString(b[:])
}

// flight is a job in flight: claimed, and not yet recorded.
type flight struct {
	claim  Claim
	cancel context.CancelCauseFunc
	// expire cancels the handler with ErrLeaseLost when the lease runs out
	// by the pool's own clock; each renewal moves it.
	expire *time.Timer
	// deadline is when the lease runs out by the pool's own clock.
	deadline time.Time
	// recording is set while a completion statement for the job is in
	// flight: the heartbeat leaves the job alone meanwhile, rather than
	// wait on the row the completion holds locked.
	recording bool
}

// handled is a handler's outcome, to record.
type handled struct {
	claim  Claim
	result []byte
	write  TxFunc
	err    error
	// outcome, once recorded: true when the job's write landed (or had
	// landed already), or was fenced, or can never land.
	settled bool
}

// NewWorkerPool checks cfg, fills its defaults and returns a pool.
func NewWorkerPool(cfg WorkerPoolConfig) (*WorkerPool, error) {
	switch {
	case cfg.Queue == nil:
		return nil, invalidf("a worker pool needs a Queue")
	case cfg.Handler == nil && cfg.HandlerTx == nil:
		return nil, invalidf("a worker pool needs a Handler or a HandlerTx")
	case cfg.Handler != nil && cfg.HandlerTx != nil:
		return nil, invalidf("a worker pool takes a Handler or a HandlerTx, not both")
	}
	if _, ok := cfg.Queue.db.(*pgx.Conn); ok {
		return nil, invalidf("a worker pool runs its statements at once from many goroutines, which one *pgx.Conn cannot take: give its Queue a pgxpool.Pool")
	}
	if _, ok := cfg.Queue.db.(TxDB); cfg.HandlerTx != nil && !ok {
		return nil, invalidf("a worker pool with a HandlerTx needs a Queue over a DB that can begin transactions, such as a pgxpool.Pool")
	}
	if err := ValidateOwner(cfg.Owner); err != nil {
		return nil, fmt.Errorf("worker pool: %w", err)
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	dur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	def(&cfg.Concurrency, 100)
	def(&cfg.BatchSize, 500)
	def(&cfg.Completers, 2)
	dur(&cfg.Lease, 30*time.Second)
	dur(&cfg.Heartbeat, cfg.Lease/3)
	dur(&cfg.PollInterval, 100*time.Millisecond)
	dur(&cfg.StopTimeout, 10*time.Second)
	dur(&cfg.Linger, time.Millisecond)
	switch {
	case cfg.Concurrency < 1 || cfg.Concurrency > 100_000:
		return nil, invalidf("worker pool: concurrency %d must be 1 to 100000", cfg.Concurrency)
	case cfg.BatchSize < 1 || cfg.BatchSize > MaxBatch:
		return nil, invalidf("worker pool: batch size %d must be 1 to %d", cfg.BatchSize, MaxBatch)
	case cfg.Completers < 1 || cfg.Completers > 64:
		return nil, invalidf("worker pool: completers %d must be 1 to 64", cfg.Completers)
	case cfg.Heartbeat <= 0 || cfg.Heartbeat >= cfg.Lease:
		return nil, invalidf("worker pool: the heartbeat %v must be shorter than the lease %v", cfg.Heartbeat, cfg.Lease)
	case cfg.PollInterval < 0 || cfg.StopTimeout < 0:
		return nil, invalidf("worker pool: the poll interval and the stop timeout cannot be negative")
	case cfg.Linger > time.Second:
		return nil, invalidf("worker pool: linger %v must be at most 1s", cfg.Linger)
	}
	if err := ValidateLease(cfg.Lease); err != nil {
		return nil, fmt.Errorf("worker pool: %w", err)
	}
	return &WorkerPool{cfg: cfg, inFlight: map[claimKey]*flight{}}, nil
}

// Run works jobs until ctx ends, then stops: it claims no more, lets the
// handlers in flight finish (for StopTimeout at most, then cancels them),
// records their results and returns. It returns nil after a stop, and an
// error only for a pool that could not work at all: a queue whose schema
// is not at LatestVersion.
func (p *WorkerPool) Run(ctx context.Context) error {
	cfg := p.cfg
	// A queue whose schema is not at this engine's version cannot work: its
	// statements would fail on every turn. (A database that does not answer
	// yet is no reason to stop: the pool tries again, as it always does.)
	if v, err := QueueVersion(ctx, cfg.Queue.db, cfg.Queue.cfg.Schema); err == nil && v != LatestVersion {
		return fmt.Errorf("worker pool: %w", invalidf("the queue's schema %s is at version %d, and this engine needs %d: run SetupQueue or fencelab migrate", cfg.Queue.cfg.Schema, v, LatestVersion))
	}
	// The handlers' contexts outlive ctx by StopTimeout.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	go func() {
		<-ctx.Done()
		t := time.NewTimer(cfg.StopTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			stopWork()
		case <-work.Done():
		}
	}()
	// The statements go on until the last result is recorded.
	db, stopDB := context.WithCancel(context.WithoutCancel(ctx))
	defer stopDB()

	slots := make(chan struct{}, cfg.Concurrency)
	done := make(chan *handled, cfg.Concurrency)
	var handlers sync.WaitGroup

	var completers sync.WaitGroup
	for range cfg.Completers {
		completers.Add(1)
		go func() {
			defer completers.Done()
			p.complete(db, done)
		}()
	}
	// The heartbeat goes on while completions are retried: a completion
	// that waits out a database hiccup keeps its lease.
	beatCtx, stopBeat := context.WithCancel(db)
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		p.heartbeat(beatCtx)
	}()

	p.fetch(ctx, db, work, slots, done, &handlers)
	handlers.Wait()
	close(done)
	completers.Wait()
	stopWork()
	stopBeat()
	<-beat
	return nil
}

// fetch claims jobs while there are free slots, and starts a handler for
// each, until ctx ends.
func (p *WorkerPool) fetch(ctx, db, work context.Context, slots chan struct{}, done chan<- *handled, handlers *sync.WaitGroup) {
	cfg := p.cfg
	for ctx.Err() == nil {
		// Wait for one free slot, then take as many as are free.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1 + takeFree(slots, min(cfg.BatchSize, cfg.Concurrency)-1, cfg.Linger, ctx.Done())
		if ctx.Err() != nil { // stopped while it lingered: no more claims
			for range n {
				<-slots
			}
			return
		}
		claims, err := cfg.Queue.ClaimBatch(db, cfg.Owner, n, cfg.Lease)
		for range n - len(claims) {
			<-slots
		}
		if err != nil {
			if !errors.Is(err, ErrNoJob) {
				p.onError(fmt.Errorf("%w (the pool claims again in %v)", err, cfg.PollInterval))
			}
			select {
			case <-time.After(cfg.PollInterval):
			case <-ctx.Done():
			}
			continue
		}
		now := time.Now()
		for _, c := range claims {
			jctx, cancel := context.WithCancelCause(work)
			run := &flight{claim: c, cancel: cancel, deadline: now.Add(c.LeaseUntil.Sub(c.DBTime))}
			run.expire = time.AfterFunc(run.deadline.Sub(now), func() { cancel(ErrLeaseLost) })
			p.mu.Lock()
			p.inFlight[heldOf(c)] = run
			p.mu.Unlock()
			handlers.Add(1)
			go func() {
				defer handlers.Done()
				done <- p.call(jctx, c)
				// The handler is done, and its result is in line to be
				// recorded: its slot takes the next job, so the next claim
				// overlaps this completion.
				<-slots
			}()
		}
	}
}

// takeFree takes up to n more slots: those free now, then, for up to
// linger, those that free up meanwhile. It returns how many it took.
func takeFree(slots chan struct{}, n int, linger time.Duration, stop <-chan struct{}) int {
	took := 0
	for took < n {
		select {
		case slots <- struct{}{}:
			took++
			continue
		default:
		}
		break
	}
	if took == n || linger <= 0 {
		return took
	}
	t := time.NewTimer(linger)
	defer t.Stop()
	for took < n {
		select {
		case slots <- struct{}{}:
			took++
		case <-t.C:
			return took
		case <-stop:
			return took
		}
	}
	return took
}

// call runs the handler, turning a panic into the job's failure.
func (p *WorkerPool) call(ctx context.Context, c Claim) (f *handled) {
	f = &handled{claim: c}
	defer func() {
		if r := recover(); r != nil {
			f.result, f.write, f.err = nil, nil, fmt.Errorf("the handler panicked: %v", r)
		}
	}()
	if p.cfg.HandlerTx != nil {
		f.result, f.write, f.err = p.cfg.HandlerTx(ctx, c)
	} else {
		f.result, f.err = p.cfg.Handler(ctx, c)
	}
	switch {
	case f.err != nil:
		f.write = nil
	case len(f.result) == 0:
		f.result = []byte("{}") // a job with nothing to say
	default:
		if err := ValidatePayload("the handler's result", f.result); err != nil {
			f.err, f.write = err, nil
		}
	}
	return f
}

// complete records finished jobs a batch at a time: all that are waiting,
// up to BatchSize.
func (p *WorkerPool) complete(db context.Context, done <-chan *handled) {
	cfg := p.cfg
	for f := range done {
		batch := []*handled{f}
		var linger <-chan time.Time
	more:
		for len(batch) < cfg.BatchSize {
			select {
			case g, ok := <-done:
				if !ok {
					break more
				}
				batch = append(batch, g)
				continue
			default:
			}
			// None waiting: more may come within the linger, while jobs
			// are in flight.
			if cfg.Linger <= 0 || p.InFlight() <= len(batch) {
				break
			}
			if linger == nil {
				linger = time.After(cfg.Linger)
			}
			select {
			case g, ok := <-done:
				if !ok {
					break more
				}
				batch = append(batch, g)
			case <-linger:
				break more
			}
		}
		p.recordWithRetries(db, batch)
		p.mu.Lock()
		for _, f := range batch {
			if r := p.inFlight[heldOf(f.claim)]; r != nil {
				r.expire.Stop()
				r.cancel(context.Canceled)
				delete(p.inFlight, heldOf(f.claim))
			}
		}
		p.mu.Unlock()
	}
}

// Completion retries: from retryFirst, doubling to retryMost, each wait
// drawn from half to all of it.
const (
	retryFirst = 10 * time.Millisecond
	retryMost  = time.Second
)

// recordWithRetries records a batch, and again, with backoff, while an
// error that may pass (the database unavailable) leaves some of its jobs
// unsettled and the lease of one of them still holds.
func (p *WorkerPool) recordWithRetries(db context.Context, batch []*handled) {
	wait := retryFirst
	savepoints := false
	for try := 1; ; try++ {
		p.setRecording(batch, true)
		err := p.record(db, batch, savepoints)
		p.setRecording(batch, false)
		if err == nil {
			return
		}
		if errors.Is(err, errWriteFailed) && !savepoints {
			savepoints = true // the batch again at once, each write in a savepoint
			continue
		}
		left := unsettled(batch)
		if errors.Is(err, ErrInvalidInput) && len(left) > 1 {
			// One job's result the database refused must not sink the
			// others: each goes alone, and the bad one is failed.
			for _, f := range left {
				p.recordWithRetries(db, []*handled{f})
			}
			return
		}
		if errors.Is(err, ErrInvalidInput) && len(left) == 1 && left[0].err == nil {
			f := left[0]
			f.err, f.result, f.write = fmt.Errorf("its result could not be recorded: %w", err), nil, nil
			continue
		}
		holds := p.leaseHolds(left)
		if !errors.Is(err, ErrUnavailable) || !holds || db.Err() != nil {
			p.onError(fmt.Errorf("%w: the pool gives up recording %s after %d tries; their leases run out and other claims take them", err, jobCount(len(left)), try))
			return
		}
		p.onError(fmt.Errorf("%w (the pool records %s again in %v, try %d)", err, jobCount(len(left)), wait, try+1))
		select {
		case <-time.After(wait/2 + mrand.N(wait/2+1)):
		case <-db.Done():
		}
		wait = min(2*wait, retryMost)
	}
}

// jobCount says "1 job" or "n jobs".
func jobCount(n int) string {
	if n == 1 {
		return "1 job"
	}
	return fmt.Sprintf("%d jobs", n)
}

func unsettled(batch []*handled) []*handled {
	var left []*handled
	for _, f := range batch {
		if !f.settled {
			left = append(left, f)
		}
	}
	return left
}

// leaseHolds reports whether the lease of any of the jobs still holds by
// the pool's own clock.
func (p *WorkerPool) leaseHolds(fs []*handled) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for _, f := range fs {
		if r := p.inFlight[heldOf(f.claim)]; r != nil && now.Before(r.deadline) {
			return true
		}
	}
	return false
}

func (p *WorkerPool) setRecording(batch []*handled, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range batch {
		if r := p.inFlight[heldOf(f.claim)]; r != nil {
			r.recording = on
		}
	}
}

// record makes one try at recording the batch's unsettled jobs, and marks
// each it settles.
func (p *WorkerPool) record(db context.Context, batch []*handled, savepoints bool) error {
	left := unsettled(batch)
	if len(left) == 0 {
		return nil
	}
	if p.cfg.HandlerTx != nil {
		return p.recordTx(db, left, savepoints)
	}
	var cs, fs []*handled
	for _, f := range left {
		if f.err != nil {
			fs = append(fs, f)
		} else {
			cs = append(cs, f)
		}
	}
	for _, part := range [][]*handled{cs, fs} {
		if len(part) == 0 {
			continue
		}
		rs, err := p.write(db, p.cfg.Queue, part)
		if err != nil {
			return err
		}
		p.settle(part, rs)
	}
	return nil
}

// write sends the completions or the failures of part, all of one kind,
// in one statement on q.
func (p *WorkerPool) write(ctx context.Context, q *Queue, part []*handled) ([]BatchResult, error) {
	if part[0].err != nil {
		fs := make([]Failure, len(part))
		for i, f := range part {
			fs[i] = Failure{Claim: f.claim, Reason: reasonOf(f.err)}
		}
		return q.FailBatch(ctx, fs)
	}
	cs := make([]Completion, len(part))
	for i, f := range part {
		cs[i] = Completion{Claim: f.claim, Result: f.result}
	}
	return q.CompleteBatch(ctx, cs)
}

// reasonOf is a handler's error as a failure's reason, within MaxReasonLen.
func reasonOf(err error) string {
	// Postgres stores no NUL and no bytes that are not UTF-8 in text: the
	// reason must not be what keeps the failure from being recorded.
	reason := strings.ToValidUTF8(strings.ReplaceAll(err.Error(), "\x00", "\uFFFD"), "\uFFFD")
	if len(reason) > MaxReasonLen {
		reason = strings.ToValidUTF8(reason[:MaxReasonLen], "")
	}
	if reason == "" {
		reason = "the handler failed"
	}
	return reason
}

// settle marks each job of part by its write's result, and tells OnFenced
// and OnRecorded. A job found already finished by this claim had its write
// land on an earlier try whose answer was lost.
func (p *WorkerPool) settle(part []*handled, rs []BatchResult) {
	landed, fenced := 0, 0
	for i, r := range rs {
		var fe *FencedError
		switch {
		case r.Err == nil, errors.Is(r.Err, ErrFinished):
			landed++
		case errors.As(r.Err, &fe):
			fenced++
			if p.cfg.OnFenced != nil {
				p.cfg.OnFenced(fe)
			}
		default:
			p.onError(r.Err)
		}
		part[i].settled = true
	}
	if p.cfg.OnRecorded != nil {
		p.cfg.OnRecorded(landed, fenced)
	}
}

// errWriteFailed is recordTx's answer when a TxFunc failed in a batch
// whose writes ran without savepoints: the transaction is lost, and the
// batch must go again with a savepoint per write.
var errWriteFailed = errors.New("a write failed outside a savepoint")

// recordTx records a batch of a HandlerTx in one transaction: it locks
// the jobs' rows and checks each job is still the pool's (the same guards
// as the compare-and-set), runs the TxFunc of each that is, then records
// the completions and the failures by compare-and-set, and commits. A job
// another claim took runs no write. A batch is first tried with its writes
// straight in the transaction, which costs two round trips a job less;
// only when one of them fails does it go again with a savepoint per write,
// so that the failed write alone is undone and becomes its job's failure.
func (p *WorkerPool) recordTx(ctx context.Context, left []*handled, savepoints bool) error {
	q := p.cfg.Queue
	tx, err := q.db.(TxDB).Begin(ctx)
	if err != nil {
		return translate("record a batch: begin", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	tq := q.on(tx)
	claims := make([]Claim, len(left))
	for i, f := range left {
		claims[i] = f.claim
	}
	held, err := tq.lockBatch(ctx, claims)
	if err != nil {
		return err
	}
	var settledNow []*handled
	var settledRs []BatchResult
	var cs, fs []*handled
	for i, f := range left {
		if held[i].Err != nil {
			settledNow, settledRs = append(settledNow, f), append(settledRs, held[i])
			continue
		}
		if f.err == nil && f.write != nil {
			if !savepoints {
				if werr := runWriteBare(ctx, tx, f.write); werr != nil {
					if errors.Is(werr, ErrUnavailable) {
						return werr
					}
					return errWriteFailed
				}
			} else if werr := runWrite(ctx, tx, f.write); werr != nil {
				if errors.Is(werr, ErrUnavailable) {
					return werr // the transaction is gone: the whole batch again
				}
				f.err = fmt.Errorf("its write failed: %w", werr)
			}
		}
		if f.err != nil {
			fs = append(fs, f)
		} else {
			cs = append(cs, f)
		}
	}
	var results [][]BatchResult
	for _, part := range [][]*handled{cs, fs} {
		if len(part) == 0 {
			results = append(results, nil)
			continue
		}
		rs, err := p.write(ctx, tq, part)
		if err != nil {
			return err
		}
		results = append(results, rs)
	}
	if err := tx.Commit(ctx); err != nil {
		return translate("record a batch: commit", err)
	}
	if len(settledNow) > 0 {
		p.settle(settledNow, settledRs)
	}
	for i, part := range [][]*handled{cs, fs} {
		if len(part) > 0 {
			p.settle(part, results[i])
		}
	}
	return nil
}

// runWriteBare runs a job's TxFunc straight in tx, a panic too becoming
// its error.
func runWriteBare(ctx context.Context, tx pgx.Tx, write TxFunc) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the write panicked: %v", r)
		}
	}()
	if err = write(ctx, tx); err != nil {
		if terr := translate("write", err); errors.Is(terr, ErrUnavailable) {
			return terr
		}
	}
	return err
}

// runWrite runs a job's TxFunc in a savepoint of tx: its writes are kept
// when it returns nil, and undone, alone, when it fails or panics.
func runWrite(ctx context.Context, tx pgx.Tx, write TxFunc) (err error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return translate("savepoint", err)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the write panicked: %v", r)
		}
		if err != nil {
			if rerr := sp.Rollback(ctx); rerr != nil {
				err = translate("roll back to the savepoint", rerr)
			}
		}
	}()
	if err = write(ctx, sp); err != nil {
		if terr := translate("write", err); errors.Is(terr, ErrUnavailable) {
			return terr
		}
		return err
	}
	return translate("release the savepoint", sp.Commit(ctx))
}

// heartbeat renews the leases of the jobs in flight, a batch at a time,
// every Heartbeat, until ctx ends. A job whose renewal is fenced has lost
// its lease to another claim, and its handler's context is cancelled; a
// job the pool has itself finished meanwhile is left alone.
func (p *WorkerPool) heartbeat(ctx context.Context) {
	cfg := p.cfg
	t := time.NewTicker(cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Each job's newest claim: an older one of the same job has lost
		// its lease already, and a batch names a job once.
		p.mu.Lock()
		newest := make(map[int64]Claim, len(p.inFlight))
		for _, r := range p.inFlight {
			if c, ok := newest[r.claim.JobID]; !r.recording && (!ok || r.claim.Epoch > c.Epoch) {
				newest[r.claim.JobID] = r.claim
			}
		}
		p.mu.Unlock()
		claims := make([]Claim, 0, len(newest))
		for _, c := range newest {
			claims = append(claims, c)
		}
		for len(claims) > 0 {
			n := min(len(claims), cfg.BatchSize)
			sent := time.Now()
			sentClaims := claims[:n]
			rs, err := cfg.Queue.RenewBatch(ctx, sentClaims, cfg.Lease)
			claims = claims[n:]
			if err != nil {
				p.onError(fmt.Errorf("%w (the pool renews again in %v)", err, cfg.Heartbeat))
				continue
			}
			var lost []*FencedError
			var errs []error
			p.mu.Lock()
			for i, r := range rs {
				run := p.inFlight[heldOf(sentClaims[i])]
				var fe *FencedError
				switch {
				case run == nil:
					// recorded meanwhile: its renewal no longer matters
				case r.Err == nil:
					run.claim.LeaseUntil = r.LeaseUntil
					// By the pool's clock, the lease now runs from when the
					// renewal was sent: the earliest moment Postgres could
					// have judged it.
					run.deadline = sent.Add(r.LeaseUntil.Sub(r.DBTime))
					run.expire.Reset(time.Until(run.deadline))
				case errors.Is(r.Err, ErrFinished):
					// the pool's own completion landed first: no fence
				case errors.As(r.Err, &fe):
					run.cancel(fe) // the lease is lost: the handler should give up
					lost = append(lost, fe)
				default:
					run.cancel(r.Err)
					errs = append(errs, r.Err)
				}
			}
			p.mu.Unlock()
			for _, err := range errs {
				p.onError(err)
			}
			if cfg.OnFenced != nil {
				for _, fe := range lost {
					cfg.OnFenced(fe)
				}
			}
		}
	}
}

func (p *WorkerPool) onError(err error) {
	if p.cfg.OnError != nil {
		p.cfg.OnError(err)
	}
}

// InFlight returns how many jobs the pool is working now.
func (p *WorkerPool) InFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inFlight)
}
