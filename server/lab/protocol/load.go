package protocol

import (
	"fmt"

	"github.com/fencelab/fencelab/server/lab/experiments"
)

// LoadEvent is a load lab's progress (actor: runner).
type LoadEvent struct {
	Phase  experiments.LoadPhase  `json:"phase"`
	Config experiments.LoadConfig `json:"config"`
	// Style is the style a tick, round_done or style_done is about.
	Style string `json:"style,omitempty"`
	// Round (from 1) is the round it is in, and Position (from 1) its
	// place in that round's order.
	Round    int                           `json:"round,omitempty"`
	Position int                           `json:"position,omitempty"`
	Tally    *experiments.LoadTally        `json:"tally,omitempty"`
	Result   *experiments.LoadStyleResult  `json:"result,omitempty"`
	Results  []experiments.LoadStyleResult `json:"results,omitempty"`
	// Throughput compares, on a finished lab, fencelab's jobs per second
	// with the other styles', round by round.
	Throughput *experiments.LoadComparison `json:"throughput,omitempty"`
	// Verdict says in words what the finished lab showed.
	Verdict string     `json:"verdict,omitempty"`
	Reason  StopReason `json:"reason,omitempty"`
	// Message says why a lab failed.
	Message string `json:"message,omitempty"`
}

// loadStartedWords narrates a lab's start.
func loadStartedWords(c experiments.LoadConfig) string {
	return fmt.Sprintf("The load lab: %d worker processes, %s jobs per queue style (%d), frozen at random with SIGSTOP for longer than their %v lease, in %d rounds that each run every style once, in an order turned one place from the round before.",
		c.Workers, experiments.Thousands(c.Jobs), len(c.Styles), ms(c.LeaseMS), c.Rounds)
}

// loadResultWords narrates a style's round, or its end: its counts so
// far, each live count beside the checker's that must equal it.
func loadResultWords(l *LoadEvent) string {
	r := l.Result
	s := UpperFirst(StyleShort(r.Style))
	if l.Phase == experiments.LoadRoundDone {
		s = fmt.Sprintf("Round %d of %d, %s", l.Round, l.Config.Rounds, StyleShort(r.Style))
	}
	return fmt.Sprintf("%s: %s jobs done in %v (%.0f jobs/s), %d stalls so far; zombie writes landed in the row: %d live, %d by the checker; at the receiver: %d live, %d by the checker. %s jobs ended with a zombie's result.",
		s, experiments.Thousands(int(r.Tally.Done)), ms(r.Tally.ElapsedMS), r.PerSecond, r.Tally.Stalls, r.Tally.LateRow, r.Check.StaleWrites, r.Tally.LateReceiver, r.Check.OlderAccepted,
		UpperFirst(experiments.Thousands(r.Check.ZombieResult)))
}
