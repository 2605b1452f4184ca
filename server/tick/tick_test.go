package tick

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestEvery_TicksUntilToldToStop: f runs on each tick until it says stop,
// and Every returns then.
func TestEvery_TicksUntilToldToStop(t *testing.T) {
	var n atomic.Int32
	start := time.Now()
	Every(context.Background(), 10*time.Millisecond, func() bool { return n.Add(1) < 3 })
	if n.Load() != 3 {
		t.Fatalf("f ran %d times, want 3: it said stop on its third", n.Load())
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("three ticks of 10 ms took %v: f ran before its tick", took)
	}
}

// TestEvery_EndsWithItsContext: an ended context stops the loop, and f
// does not run after.
func TestEvery_EndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, 5*time.Millisecond, func() bool {
			if n.Add(1) == 2 {
				cancel()
			}
			return true
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return when its context ended")
	}
	if n.Load() != 2 {
		t.Fatalf("f ran %d times, want 2: none after the context ended", n.Load())
	}
}
