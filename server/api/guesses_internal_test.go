package api

import (
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
			if err := g.wait("a"); err != nil {
				t.Fatalf("wrong code %d refused within the budget: %v", i+1, err)
			}
			g.wrong("a")
		}
		err := g.wait("a")
		if fault.CodeOf(err) != fault.TooMany {
			t.Fatalf("past the budget: %v, want too_many", err)
		}
		return fault.RetryAfter(err)
	}
	for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour} {
		if got := over(); got != want {
			t.Fatalf("overrun %d: wait %v, want %v", i+1, got, want)
		}
		now = now.Add(want)
		if err := g.wait("a"); err != nil {
			t.Fatalf("after the back-off: %v", err)
		}
	}
	now = now.Add(forgetStrikes + time.Minute)
	if got := over(); got != time.Minute {
		t.Fatalf("a day on, the back-off is %v, want a minute again", got)
	}
	if err := g.wait("b"); err != nil {
		t.Fatalf("another address: %v", err)
	}
	for i := range 3 * guessesKept {
		g.wrong(string(rune(0x10000 + i)))
		now = now.Add(time.Minute)
	}
	if n := len(g.by); n > guessesKept {
		t.Fatalf("%d addresses remembered, want at most %d", n, guessesKept)
	}
}
