package runner

import (
	"context"
	"sync"
	"time"

	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Emit adds an event from outside the run — the receiver's decisions —
// to the run's events, in order with the rest.
func (r *Run) Emit(e protocol.Event) { r.emit(context.Background(), e) }

// emit stamps an event with the run's id, the protocol's version and, when
// it has no database time, the database clock; fills in its narration; and
// hands it on, one at a time.
func (r *Run) emit(ctx context.Context, e protocol.Event) {
	e.Run, e.V = r.spec.ID, protocol.ProtocolVersion
	if e.At.IsZero() {
		e.At = r.dbNow(ctx)
	}
	protocol.Narrate(&e)
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	// Events are told in the order they are reported; a statement's own
	// time can be a little earlier than that of an event told before it
	// (it began before that one finished). Its time is then the one told
	// before, so a run's timeline never goes back.
	if e.At.Before(r.lastAt) {
		e.At = r.lastAt
	}
	r.lastAt = e.At
	r.spec.EmitFunc(e)
}

func (r *Run) dbNow(ctx context.Context) time.Time {
	if r.env.Clock != nil {
		return r.env.Clock.Now(ctx)
	}
	return readClock(ctx, r.env.Pool)
}

// readClock reads the database clock, or, with the database gone, this
// machine's.
func readClock(ctx context.Context, pool *pgxpool.Pool) time.Time {
	st := clockNow()
	var t time.Time
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := pool.QueryRow(ctx, st.SQL).Scan(&t); err != nil {
		return time.Now() // the database is gone; the event still needs a time
	}
	return t
}

// DBClock tells the database clock's time without a round trip per event:
// it reads the database clock now and then (every Every) and keeps how far
// it is from this machine's. The events a run stamps itself — a process
// spawned, a step begun — are then on the database's clock, as the ones
// Postgres stamps are, within the round trip's half. Safe for concurrent
// use.
type DBClock struct {
	Pool  *pgxpool.Pool
	Every time.Duration // how often the offset is read again; default 10s

	mu     sync.Mutex
	offset time.Duration
	read   time.Time // when the offset was read (zero: never)
}

// Now returns the database clock's time, as best known.
func (c *DBClock) Now(ctx context.Context) time.Time {
	every := c.Every
	if every <= 0 {
		every = 10 * time.Second
	}
	c.mu.Lock()
	stale := c.read.IsZero() || time.Since(c.read) > every
	off := c.offset
	c.mu.Unlock()
	if stale {
		t0 := time.Now()
		db := readClock(ctx, c.Pool)
		t1 := time.Now()
		off = db.Sub(t0.Add(t1.Sub(t0) / 2))
		c.mu.Lock()
		c.offset, c.read = off, t1
		c.mu.Unlock()
	}
	return time.Now().Add(off).Round(0)
}
