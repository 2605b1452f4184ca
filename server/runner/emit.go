package runner

import (
	"context"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/lab"
)

// Emit adds an event from outside the run — the receiver's decisions —
// to the run's events, in order with the rest.
func (r *Run) Emit(e lab.Event) { r.emit(context.Background(), e) }

// emit stamps an event with the run's id, the protocol's version and, when
// it has no database time, the database clock; fills in its narration; and
// hands it on, one at a time.
func (r *Run) emit(ctx context.Context, e lab.Event) {
	e.Run, e.V = r.spec.ID, lab.ProtocolVersion
	if e.At.IsZero() {
		e.At = r.dbNow(ctx)
	}
	lab.Narrate(&e)
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
	st := engine.ClockNow()
	var t time.Time
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := r.env.Pool.QueryRow(ctx, st.SQL).Scan(&t); err != nil {
		return time.Now() // the database is gone; the event still needs a time
	}
	return t
}
