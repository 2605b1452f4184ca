package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/child"
)

// Lease watching: the runner reports each lease that runs out, on the
// database clock, once; and each lease taken while it was still live,
// which only a claimer judging by its own clock can do.

// lease is a lease as Postgres last reported it.
type lease struct {
	epoch int64
	owner string
	until time.Time
}

// noteLease keeps track of each running job's lease from the row changes
// Postgres reports; before a claim takes a job over, or ends it (an expire:
// its lease ran out on its last attempt), it reports the lease that ran
// out, if the watcher has not seen it yet.
func (r *Run) noteLease(c protocol.RowEvent, at time.Time) {
	if c.Op == protocol.RowClaim || c.Op == protocol.RowExpire {
		r.takeover(c.JobID, c.New.Epoch, c.Writer, at)
	}
	switch c.Op {
	case protocol.RowClaim, protocol.RowRenew:
		if c.New.LeaseUntil != nil {
			r.mu.Lock()
			r.leases[c.JobID] = lease{epoch: c.New.Epoch, owner: c.New.Owner, until: *c.New.LeaseUntil}
			r.mu.Unlock()
		}
	default:
		r.mu.Lock()
		delete(r.leases, c.JobID)
		r.mu.Unlock()
	}
}

// takeover reports the lease a new claim of a job replaced: as run out, if
// it had on the database clock by the time of the claim (a claim can beat
// the watcher to an expired lease, and the log must still say it ran out);
// as taken live if it had not.
func (r *Run) takeover(jobID, epoch int64, claimer string, at time.Time) {
	r.mu.Lock()
	old, ok := r.leases[jobID]
	var skew time.Duration
	if w := r.workers[claimer]; w != nil {
		skew = w.skew
	}
	r.mu.Unlock()
	if !ok || at.IsZero() || (old.epoch == epoch && epoch != 0) {
		return
	}
	j := engine.Job{ID: jobID, Epoch: old.epoch, Owner: old.owner, LeaseUntil: &old.until, DBTime: at}
	if old.until.After(at) {
		r.leaseTakenLive(j, claimer, skew)
		return
	}
	r.leaseExpired(context.Background(), j)
}

func leaseKey(change protocol.LeaseChange, jobID, epoch int64, until time.Time) string {
	return fmt.Sprintf("%s/%d/%d/%d", change, jobID, epoch, until.UnixMicro())
}

// leaseDue reports whether a lease the run knows of has run out on the
// database clock and has not been told yet: only then is it worth asking
// the database which leases have run out.
func (r *Run) leaseDue(ctx context.Context) bool {
	r.mu.Lock()
	var first time.Time
	for id, l := range r.leases {
		if r.expired[leaseKey(protocol.LeaseExpired, id, l.epoch, l.until)] {
			continue
		}
		if first.IsZero() || l.until.Before(first) {
			first = l.until
		}
	}
	r.mu.Unlock()
	return !first.IsZero() && !r.dbNow(ctx).Before(first)
}

// seenLease reports whether a lease event was told already, and marks it.
func (r *Run) seenLease(change protocol.LeaseChange, j engine.Job) (seen bool, holder string) {
	key := leaseKey(change, j.ID, j.Epoch, *j.LeaseUntil)
	r.mu.Lock()
	defer r.mu.Unlock()
	seen = r.expired[key]
	r.expired[key] = true
	for _, l := range r.order {
		if w := r.workers[l]; w.jobID == j.ID && w.epoch == j.Epoch {
			holder = l
		}
	}
	return seen, holder
}

// leaseExpired reports a lease that ran out on the database clock, once.
func (r *Run) leaseExpired(ctx context.Context, j engine.Job) {
	seen, holder := r.seenLease(protocol.LeaseExpired, j)
	if seen {
		return
	}
	r.emit(ctx, protocol.Event{Kind: protocol.KindLease, Actor: protocol.ActorPostgres, At: j.DBTime, Lease: &protocol.LeaseEvent{
		Change: protocol.LeaseExpired, JobID: j.ID, Epoch: j.Epoch, Owner: j.Owner, Holder: holder,
		LeaseUntil: *j.LeaseUntil, DBNow: j.DBTime, Clock: protocol.ClockDatabase}})
}

// leaseTakenLive reports a claim that took a lease still live on the
// database clock, once.
func (r *Run) leaseTakenLive(j engine.Job, claimer string, skew time.Duration) {
	seen, holder := r.seenLease(protocol.LeaseTakenLive, j)
	if seen {
		return
	}
	r.emit(context.Background(), protocol.Event{Kind: protocol.KindLease, Actor: protocol.ActorPostgres, At: j.DBTime, Lease: &protocol.LeaseEvent{
		Change: protocol.LeaseTakenLive, JobID: j.ID, Epoch: j.Epoch, Owner: j.Owner, Holder: holder,
		LeaseUntil: *j.LeaseUntil, DBNow: j.DBTime, Clock: protocol.ClockWorker, ClockOf: claimer, SkewMS: skew.Milliseconds(),
		LiveMS: j.LeaseUntil.Sub(j.DBTime).Milliseconds()}})
}

// watch reports lease expiries as the database clock passes them, and
// kills a worker frozen longer than MaxStall.
func (r *Run) watch(ctx context.Context) {
	defer r.bg.Done()
	t := time.NewTicker(r.lim.Poll)
	defer t.Stop()
	var lastStall time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if r.leaseDue(ctx) {
			jobs, err := playground.Expired(ctx, r.queue)
			if err == nil {
				for _, j := range jobs {
					r.leaseExpired(ctx, j)
				}
			}
		}
		if r.lim.MaxStall > 0 && time.Since(lastStall) >= stallEvery {
			lastStall = time.Now()
			r.killStalled(ctx)
		}
	}
}

// stallEvery is how often the workers' process states are read for stalls.
const stallEvery = 500 * time.Millisecond

// killStalled kills a worker frozen longer than MaxStall: by the run, or
// by a SIGSTOP from outside it, which only the process's state shows.
func (r *Run) killStalled(ctx context.Context) {
	r.mu.Lock()
	var look []*workerState
	for _, l := range r.order {
		if w := r.workers[l]; !w.frozen && !w.exited && w.proc != nil {
			look = append(look, w)
		}
	}
	r.mu.Unlock()
	for _, w := range look {
		stopped := child.State(w.proc.Pid) == 'T'
		r.mu.Lock()
		switch {
		case !stopped:
			w.stoppedAt = time.Time{}
		case w.stoppedAt.IsZero():
			w.stoppedAt = time.Now()
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	var stalled []string
	for _, l := range r.order {
		w := r.workers[l]
		if w.exited {
			continue
		}
		if (w.frozen && time.Since(w.frozenAt) > r.lim.MaxStall) || (!w.frozen && !w.stoppedAt.IsZero() && time.Since(w.stoppedAt) > r.lim.MaxStall) {
			stalled = append(stalled, l)
		}
	}
	r.mu.Unlock()
	for _, l := range stalled {
		r.note(ctx, l, protocol.NoteEvent{Code: protocol.NoteStallLimit, Worker: l, LimitMS: r.lim.MaxStall.Milliseconds()})
		kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = r.kill(kctx, l, protocol.CauseStallLimit) // an exited worker needs no killing
		cancel()
	}
}
