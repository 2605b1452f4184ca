package line

import (
	"testing"
	"time"
)

// A check in line is told about how long it waits: nothing before any
// check has played here; then, for each round of at-once checks ahead of
// it and its own, the mean check time or YoungFor, the shorter (a check
// leaves its slot when it has played YoungFor), the mean leaning to the
// newest.
func TestCheckTimes_EstimateTheWaitInLine(t *testing.T) {
	var c Times
	if w := c.Wait(3, 2); w != 0 {
		t.Fatalf("before any check played the estimate is %v, want none", w)
	}
	c.Add(time.Second)
	for _, tc := range []struct {
		place, atOnce int
		want          time.Duration
	}{{1, 4, time.Second}, {4, 4, time.Second}, {5, 4, 2 * time.Second}, {3, 1, 3 * time.Second}, {0, 4, 0}, {2, 0, 2 * time.Second}} {
		if got := c.Wait(tc.place, tc.atOnce); got != tc.want {
			t.Errorf("place %d, %d at once: %v, want %v", tc.place, tc.atOnce, got, tc.want)
		}
	}
	c.Add(5 * time.Second) // the mean is 2 s: (3×1 + 5) / 4
	if got := c.Wait(3, 1); got != 6*time.Second {
		t.Errorf("after 1 s and 5 s the mean is %v a round, want 2s (the newest weighs a quarter)", got/3)
	}
	c.Add(30 * time.Second) // a check that took half a minute held its slot for YoungFor
	if got := c.Wait(5, 4); got != 2*YoungFor {
		t.Errorf("with a mean over YoungFor, two rounds wait %v, want %v", got, 2*YoungFor)
	}
}
