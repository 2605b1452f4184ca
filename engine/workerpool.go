package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// WorkerPool works a queue's jobs with a handler function, many at once,
// on the production path: jobs are claimed a batch at a time, their leases
// renewed a batch at a time, and their results recorded a batch at a time,
// every one of them by compare-and-set on its own owner and epoch. A job
// whose lease the pool lost — a stall, a pause, a partition — has its
// context cancelled as soon as a renewal is fenced, and its result, if it
// comes anyway, is refused by the fence and handed to OnFenced.
type WorkerPool struct {
	cfg WorkerPoolConfig

	mu       sync.Mutex
	inFlight map[int64]*running
}

// Handler does one job and returns its result (a JSON document), or an
// error to record as the job's failure. It should give up when ctx ends:
// the pool lost the job's lease, or is stopping.
type Handler func(ctx context.Context, job Claim) (result []byte, err error)

// WorkerPoolConfig configures a WorkerPool. Queue, Owner and Handler are
// required; every other field has a default.
type WorkerPoolConfig struct {
	Queue *Queue
	// Owner names this pool in every claim: unique to the process, and
	// never reused by a later one (a hostname alone is not: a restarted
	// pod keeps it), such as "billing-7f9c-" + a random suffix.
	Owner   string
	Handler Handler
	// Concurrency is how many handlers run at once. Default 100.
	Concurrency int
	// BatchSize bounds the jobs of one claim, renewal or completion
	// statement. Default 500.
	BatchSize int
	// Completers is how many completion statements may be in flight at
	// once. Default 2.
	Completers int
	// Lease is each claim's lease. Default 30s. Heartbeat is how often the
	// leases of the jobs in flight are renewed; default a third of Lease.
	Lease     time.Duration
	Heartbeat time.Duration
	// PollInterval is how long the pool waits when it found no job.
	// Default 100ms.
	PollInterval time.Duration
	// StopTimeout is how long Run, once its context ends, lets the
	// handlers in flight finish before it cancels theirs. Default 10s.
	StopTimeout time.Duration
	// OnFenced, if set, is told of each write of the pool's that the fence
	// refused: the job was taken over after its lease was lost.
	OnFenced func(*FencedError)
	// OnError, if set, is told of each statement that failed (the pool
	// goes on, and tries again).
	OnError func(error)
	// OnRecorded, if set, is told after each completion or failure
	// statement how many of its jobs' writes landed and how many the fence
	// refused: a place for metrics.
	OnRecorded func(landed, fenced int)
}

type running struct {
	claim  Claim
	cancel context.CancelFunc
}

type finished struct {
	claim  Claim
	result []byte
	err    error
}

// NewWorkerPool checks cfg, fills its defaults and returns a pool.
func NewWorkerPool(cfg WorkerPoolConfig) (*WorkerPool, error) {
	switch {
	case cfg.Queue == nil:
		return nil, invalidf("a worker pool needs a Queue")
	case cfg.Handler == nil:
		return nil, invalidf("a worker pool needs a Handler")
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
	}
	if err := ValidateLease(cfg.Lease); err != nil {
		return nil, fmt.Errorf("worker pool: %w", err)
	}
	return &WorkerPool{cfg: cfg, inFlight: map[int64]*running{}}, nil
}

// Run works jobs until ctx ends, then stops: it claims no more, lets the
// handlers in flight finish (for StopTimeout at most, then cancels them),
// records their results and returns. It returns nil after a stop, and an
// error only for a pool that could not work at all.
func (p *WorkerPool) Run(ctx context.Context) error {
	cfg := p.cfg
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
	done := make(chan finished, cfg.Concurrency)
	var handlers sync.WaitGroup

	var completers sync.WaitGroup
	for range cfg.Completers {
		completers.Add(1)
		go func() {
			defer completers.Done()
			p.complete(db, done, slots)
		}()
	}
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		p.heartbeat(db, work)
	}()

	p.fetch(ctx, db, work, slots, done, &handlers)
	handlers.Wait()
	close(done)
	completers.Wait()
	stopWork()
	<-beat
	return nil
}

// fetch claims jobs while there are free slots, and starts a handler for
// each, until ctx ends.
func (p *WorkerPool) fetch(ctx, db, work context.Context, slots chan struct{}, done chan<- finished, handlers *sync.WaitGroup) {
	cfg := p.cfg
	for ctx.Err() == nil {
		// Wait for one free slot, then take as many as are free.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1
		for n < cfg.BatchSize {
			select {
			case slots <- struct{}{}:
				n++
				continue
			default:
			}
			break
		}
		claims, err := cfg.Queue.ClaimBatch(db, cfg.Owner, n, cfg.Lease)
		for range n - len(claims) {
			<-slots
		}
		if err != nil {
			if !errors.Is(err, ErrNoJob) && cfg.OnError != nil {
				cfg.OnError(err)
			}
			select {
			case <-time.After(cfg.PollInterval):
			case <-ctx.Done():
			}
			continue
		}
		for _, c := range claims {
			jctx, cancel := context.WithCancel(work)
			p.mu.Lock()
			p.inFlight[c.JobID] = &running{claim: c, cancel: cancel}
			p.mu.Unlock()
			handlers.Add(1)
			go func() {
				defer handlers.Done()
				result, err := p.call(jctx, c)
				done <- finished{claim: c, result: result, err: err}
			}()
		}
	}
}

// call runs the handler, turning a panic into the job's failure.
func (p *WorkerPool) call(ctx context.Context, c Claim) (result []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the handler panicked: %v", r)
		}
	}()
	result, err = p.cfg.Handler(ctx, c)
	switch {
	case err != nil:
	case len(result) == 0:
		result = []byte("{}") // a job with nothing to say
	case ValidatePayload("result", result) != nil:
		err = fmt.Errorf("the handler's result is not a JSON document")
	}
	return result, err
}

// complete records finished jobs a batch at a time: all that are waiting,
// up to BatchSize, in one statement each for results and for failures.
func (p *WorkerPool) complete(db context.Context, done <-chan finished, slots <-chan struct{}) {
	cfg := p.cfg
	for f := range done {
		batch := []finished{f}
	more:
		for len(batch) < cfg.BatchSize {
			select {
			case g, ok := <-done:
				if !ok {
					break more
				}
				batch = append(batch, g)
			default:
				break more
			}
		}
		var cs []Completion
		var fs []Failure
		for _, f := range batch {
			if f.err != nil {
				reason := f.err.Error()
				if len(reason) > MaxReasonLen {
					reason = reason[:MaxReasonLen]
				}
				fs = append(fs, Failure{Claim: f.claim, Reason: reason})
			} else {
				cs = append(cs, Completion{Claim: f.claim, Result: f.result})
			}
		}
		if len(cs) > 0 {
			p.record(cfg.Queue.CompleteBatch(db, cs))
		}
		if len(fs) > 0 {
			p.record(cfg.Queue.FailBatch(db, fs))
		}
		p.mu.Lock()
		for _, f := range batch {
			if r := p.inFlight[f.claim.JobID]; r != nil {
				r.cancel()
				delete(p.inFlight, f.claim.JobID)
			}
		}
		p.mu.Unlock()
		for range batch {
			<-slots
		}
	}
}

// record reports what a batch write came to: each fenced job, or the
// statement's own failure. A job whose write failed for another reason is
// left to its lease: it runs out, and another claim takes the job.
func (p *WorkerPool) record(rs []BatchResult, err error) {
	if err != nil {
		if p.cfg.OnError != nil {
			p.cfg.OnError(err)
		}
		return
	}
	fenced := Fenced(rs)
	if p.cfg.OnRecorded != nil {
		landed := 0
		for _, r := range rs {
			if r.Err == nil {
				landed++
			}
		}
		p.cfg.OnRecorded(landed, len(fenced))
	}
	if p.cfg.OnFenced != nil {
		for _, fe := range fenced {
			p.cfg.OnFenced(fe)
		}
	}
}

// heartbeat renews the leases of the jobs in flight, a batch at a time,
// every Heartbeat, until work ends; a job whose renewal is fenced has lost
// its lease, and its handler's context is cancelled.
func (p *WorkerPool) heartbeat(db, work context.Context) {
	cfg := p.cfg
	t := time.NewTicker(cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-work.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		claims := make([]Claim, 0, len(p.inFlight))
		for _, r := range p.inFlight {
			claims = append(claims, r.claim)
		}
		p.mu.Unlock()
		for len(claims) > 0 {
			n := min(len(claims), cfg.BatchSize)
			rs, err := cfg.Queue.RenewBatch(db, claims[:n], cfg.Lease)
			claims = claims[n:]
			if err != nil {
				if cfg.OnError != nil {
					cfg.OnError(err)
				}
				continue
			}
			var lost []*FencedError
			p.mu.Lock()
			for _, r := range rs {
				run := p.inFlight[r.JobID]
				if run == nil {
					continue // recorded meanwhile: its renewal no longer matters
				}
				if r.Err == nil {
					run.claim.LeaseUntil = r.LeaseUntil
					continue
				}
				run.cancel() // the lease is lost: the handler should give up
				var fe *FencedError
				if errors.As(r.Err, &fe) {
					lost = append(lost, fe)
				}
			}
			p.mu.Unlock()
			if cfg.OnFenced != nil {
				for _, fe := range lost {
					cfg.OnFenced(fe)
				}
			}
		}
	}
}

// InFlight returns how many jobs the pool is working now.
func (p *WorkerPool) InFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inFlight)
}
