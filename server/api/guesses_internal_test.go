package api

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/fault"
)

// The back-off, on a clock of the test's: a minute after the budget's
// first overrun, doubling on each later one within a day, never past an
// hour; forgotten a day on; and the remembered addresses stay bounded
// however many send a wrong code.
func TestGuesses_BackOffDoublesAndIsForgotten(t *testing.T) {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	g := newGuesses()
	g.now = func() time.Time { return now }
	over := func() time.Duration {
		t.Helper()
		for i := range wrongPerMinute {
			if err := g.try("a"); err != nil {
				t.Fatalf("wrong code %d refused within the budget: %v", i+1, err)
			}
		}
		err := g.try("a")
		if fault.CodeOf(err) != fault.TooMany {
			t.Fatalf("past the budget: %v, want too_many", err)
		}
		return fault.RetryAfter(err)
	}
	for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour} {
		if got := over(); got != want {
			t.Fatalf("overrun %d: wait %v, want %v", i+1, got, want)
		}
		if err := g.try("a"); fault.RetryAfter(err) != want {
			t.Fatalf("during the back-off: %v, want the same wait", err)
		}
		now = now.Add(want)
	}
	now = now.Add(forgetStrikes + time.Minute)
	if got := over(); got != time.Minute {
		t.Fatalf("a day on, the back-off is %v, want a minute again", got)
	}
	if err := g.try("b"); err != nil {
		t.Fatalf("another address: %v", err)
	}
	// A guess given back (the right code) leaves the budget as it was.
	for range 3 * wrongPerMinute {
		if err := g.try("c"); err != nil {
			t.Fatalf("right codes counted as guesses: %v", err)
		}
		g.unguess("c")
	}
	for i := range 3 * guessesKept {
		_ = g.try(string(rune(0x10000 + i)))
		now = now.Add(time.Minute)
	}
	if n := len(g.by); n > guessesKept {
		t.Fatalf("%d addresses remembered, want at most %d", n, guessesKept)
	}
}

// TestGuesses_AtOnceCountEachOther: 300 guesses sent at once from one
// address take the budget as they come: 100 pass, the rest are refused.
func TestGuesses_AtOnceCountEachOther(t *testing.T) {
	g := newGuesses()
	var passed atomic.Int32
	var wg sync.WaitGroup
	for range 300 {
		wg.Go(func() {
			if g.try("a") == nil {
				passed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := passed.Load(); n != wrongPerMinute {
		t.Fatalf("%d guesses at once passed, want %d", n, wrongPerMinute)
	}
}
