package runner

import (
	"context"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// The auto mode: the runner plays the steps itself, one every pace, until
// the script is done, a pause comes or the run ends. A step command pauses
// it; Play goes on.

// Pause stops an auto run between steps.
func (r *Run) Pause(ctx context.Context) error { return r.toggle(ctx, true) }

// Play resumes a paused auto run.
func (r *Run) Play(ctx context.Context) error { return r.toggle(ctx, false) }

func (r *Run) toggle(ctx context.Context, paused bool) error {
	if err := r.awaitStart(ctx); err != nil {
		return err
	}
	if r.spec.Mode != protocol.ModeAuto {
		return fault.Errorf(fault.Conflict, "only an auto run plays on its own; this run is %s", r.spec.Mode)
	}
	if err := r.endedErr(); err != nil {
		return err
	}
	r.setPaused(paused)
	r.emitState(ctx)
	return nil
}

// SetPace sets the delay between the steps of an auto run.
func (r *Run) SetPace(ctx context.Context, d time.Duration) error {
	if err := r.awaitStart(ctx); err != nil {
		return err
	}
	if r.spec.Mode != protocol.ModeAuto {
		return fault.Errorf(fault.Conflict, "only an auto run has a pace; this run is %s", r.spec.Mode)
	}
	if err := r.endedErr(); err != nil {
		return err
	}
	r.mu.Lock()
	r.pace = d
	r.mu.Unlock()
	r.poke()
	r.emitState(ctx)
	return nil
}

func (r *Run) setPaused(p bool) {
	r.mu.Lock()
	if r.spec.Mode == protocol.ModeAuto && !r.phase.Ended() && r.phase != protocol.PhaseStarting {
		r.paused = p
		r.phase = protocol.PhasePlaying
		if p {
			r.phase = protocol.PhasePaused
		}
	}
	r.mu.Unlock()
	r.poke()
}

func (r *Run) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// autoLoop plays an auto run's steps at its pace until it is done, paused
// or ended.
func (r *Run) autoLoop(ctx context.Context) {
	defer r.loops.Done()
	for {
		r.mu.Lock()
		paused, pace, first := r.paused, r.pace, r.next == 0
		r.mu.Unlock()
		select {
		case <-r.done:
			return
		default:
		}
		if paused {
			select {
			case <-r.wake:
			case <-r.done:
				return
			}
			continue
		}
		if !first && pace > 0 {
			t := time.NewTimer(pace)
			select {
			case <-t.C:
			case <-r.wake:
				t.Stop()
				continue // the pace changed, or a pause came: look again
			case <-r.done:
				t.Stop()
				return
			}
		}
		r.mu.Lock()
		paused = r.paused
		r.mu.Unlock()
		if paused {
			continue
		}
		_, last, err := r.step(ctx)
		if err != nil {
			return // the run has ended, failed or was stopped
		}
		if last {
			_, _ = r.finish(ctx, Result{}) // a failure is told as an event, and ends the run
			return
		}
	}
}
