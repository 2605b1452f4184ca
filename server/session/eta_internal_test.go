package session

import (
	"testing"
	"time"
)

// A check in line is told about how long it waits: nothing before any
// check has played here; then a round of the mean check time for each
// round of at-once checks ahead of it and its own, the mean leaning to
// the newest.
func TestCheckTimes_EstimateTheWaitInLine(t *testing.T) {
	var c checkTimes
	if w := c.wait(3, 2); w != 0 {
		t.Fatalf("before any check played the estimate is %v, want none", w)
	}
	c.add(10 * time.Second)
	for _, tc := range []struct {
		place, atOnce int
		want          time.Duration
	}{{1, 4, 10 * time.Second}, {4, 4, 10 * time.Second}, {5, 4, 20 * time.Second}, {3, 1, 30 * time.Second}, {0, 4, 0}, {2, 0, 20 * time.Second}} {
		if got := c.wait(tc.place, tc.atOnce); got != tc.want {
			t.Errorf("place %d, %d at once: %v, want %v", tc.place, tc.atOnce, got, tc.want)
		}
	}
	c.add(30 * time.Second)
	if got := c.wait(1, 1); got != 15*time.Second {
		t.Errorf("after 10 s and 30 s the mean is %v, want 15s (the newest weighs a quarter)", got)
	}
}
