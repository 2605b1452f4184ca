package experiments

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencelab/fencelab/server/fault"
)

// The load lab: many real worker processes over many jobs, frozen at
// random for longer than their lease, once per queue style. While they
// run, the lab counts from Postgres's records the zombie writes that
// landed (Tally); at the end of each style's round the invariant checker
// reads every job (judge.AuditLoad), and the two must agree, count by count.
//
// # Rounds
//
// One machine does not run at one speed for half a minute: a style that
// runs first can be faster only because it ran first. So the lab runs in
// rounds, each with a share of every style's jobs, and turns the styles'
// order by one place from one round to the next (RoundOrder): a Latin
// square, in which every style runs in every place equally often, so a
// machine that slows, or speeds up, as it goes touches every style alike.
// Each style's throughput is then a number per round, with its median
// and range (LoadSpread), and fencelab is compared with the others round
// by round, in the same minute of the machine's life (CompareLoad).

// The load lab's bounds: what one request may ask of a public server.
const (
	MaxLoadWorkers   = 16
	MaxLoadJobs      = 5000
	MaxLoadStyleTime = 60 * time.Second // a style's round still going after this is cut short
	MaxLoadRounds    = 20
)

// LoadConfig says what a load lab runs: how many worker processes, how
// many jobs per style, the lease, the queue styles in the order the first
// round runs them, and the rounds.
type LoadConfig struct {
	Workers int      `json:"workers"`
	Jobs    int      `json:"jobs"` // per style, over all its rounds
	LeaseMS int64    `json:"lease_ms"`
	Styles  []string `json:"styles"`
	// Rounds is how many rounds the jobs are shared among; each runs
	// every style once, in RoundOrder. A multiple of the number of styles,
	// so that every style runs in every place equally often; Fill makes it
	// the number of styles.
	Rounds int `json:"rounds,omitempty"`
}

// LoadStyles are the styles a load lab runs by default: fencelab first,
// then the well-known queues' ways, then leases alone.
func LoadStyles() []string {
	return []string{"fencelab", "state-only", "id-only", "token", "leases-alone"}
}

// DefaultLoad is a load lab that ends in about a minute on two cores: a
// round per style, each a fifth of the jobs.
func DefaultLoad() LoadConfig {
	return LoadConfig{Workers: 8, Jobs: 500, LeaseMS: 300, Styles: LoadStyles(), Rounds: len(LoadStyles())}
}

// Fill sets every zero field to its default.
func (c *LoadConfig) Fill() {
	d := DefaultLoad()
	if c.Workers == 0 {
		c.Workers = d.Workers
	}
	if c.Jobs == 0 {
		c.Jobs = d.Jobs
	}
	if c.LeaseMS == 0 {
		c.LeaseMS = d.LeaseMS
	}
	if len(c.Styles) == 0 {
		c.Styles = d.Styles
	}
	if c.Rounds == 0 {
		c.Rounds = len(c.Styles)
	}
}

// RoundOrder is the order in which round r (from 0) runs the styles: the
// configured order turned r places, so that over len(Styles) rounds each
// style runs once in each place: first once, second once, and so on.
func (c LoadConfig) RoundOrder(r int) []string {
	n := len(c.Styles)
	out := make([]string, n)
	for p := range n {
		out[p] = c.Styles[(p+r)%n]
	}
	return out
}

// RoundJobs is how many jobs each style works through in round r (from
// 0): the same for every style of a round, the rounds' shares as even as
// can be, summing to Jobs.
func (c LoadConfig) RoundJobs(r int) int {
	n := c.Jobs / c.Rounds
	if r < c.Jobs%c.Rounds {
		n++
	}
	return n
}

// Lease is the workers' lease.
func (c LoadConfig) Lease() time.Duration { return time.Duration(c.LeaseMS) * time.Millisecond }

// Validate checks a filled config against the lab's bounds.
func (c LoadConfig) Validate() error {
	switch {
	case c.Workers < 2 || c.Workers > MaxLoadWorkers:
		return fault.Invalidf("workers %d must be between 2 and %d", c.Workers, MaxLoadWorkers)
	case c.Jobs < 10 || c.Jobs > MaxLoadJobs:
		return fault.Invalidf("jobs %d must be between 10 and %d", c.Jobs, MaxLoadJobs)
	case !LoadLease.Holds(c.Lease()):
		return LoadLease.Validate("lease", c.Lease())
	case len(c.Styles) == 0 || len(c.Styles) > len(Styles()):
		return fault.Invalidf("styles: name 1 to %d of %s", len(Styles()), strings.Join(LoadStyles(), ", "))
	case c.Rounds < len(c.Styles) || c.Rounds > MaxLoadRounds || c.Rounds%len(c.Styles) != 0:
		return fault.Invalidf("rounds %d must be a multiple of the %d styles, at most %d, so that every style runs in every place equally often", c.Rounds, len(c.Styles), MaxLoadRounds)
	case c.Jobs < c.Rounds:
		return fault.Invalidf("jobs %d must be at least one per round (%d)", c.Jobs, c.Rounds)
	}
	seen := map[string]bool{}
	for _, s := range c.Styles {
		if _, err := StyleByName(s); err != nil {
			return err
		}
		if seen[s] {
			return fault.Invalidf("style %q is named twice", s)
		}
		seen[s] = true
	}
	return nil
}

// LoadPhase is where a load lab is.
type LoadPhase string

// The phases, in order; a lab stopped early ends stopped.
const (
	LoadStarted   LoadPhase = "started"    // the lab began: Config says what it runs
	LoadTick      LoadPhase = "tick"       // a style's live counts (Tally), a few times a second
	LoadRoundDone LoadPhase = "round_done" // a style's round ended: its counts so far and the checker's (Result)
	LoadStyleDone LoadPhase = "style_done" // a style's last round ended: its counts and the checker's (Result)
	LoadFinished  LoadPhase = "finished"   // every style ended: Results and Verdict
	LoadStopped   LoadPhase = "stopped"    // reset, replaced, abandoned or failed: Reason says which
)

// LoadTally is a style's live counts, read from Postgres while its workers
// run: over its rounds so far, this one's included.
type LoadTally struct {
	Style string `json:"style"`
	// ElapsedMS is the style's own time: since its queue was filled (its
	// workers up and polling), summed over its rounds.
	ElapsedMS int64 `json:"elapsed_ms"`
	Jobs      int64 `json:"jobs"`
	Done      int64 `json:"done"`
	Failed    int64 `json:"failed"`
	// PerSecond is jobs done per second since the tick before, in this
	// round.
	PerSecond float64 `json:"per_second"`
	// Stalls is how many times a worker was frozen with SIGSTOP so far.
	Stalls int `json:"stalls"`
	// LateRow counts completions and failure reports that landed on a job
	// after another worker had claimed it (the job's history).
	LateRow int64 `json:"late_row"`
	// LateReceiver counts deliveries the receiver took although it held a
	// newer epoch for the job (its decisions).
	LateReceiver int64 `json:"late_receiver"`
}

// Add returns t's counts and u's together, as one style's over two spans
// of its time; the per second is u's, the later.
func (t LoadTally) Add(u LoadTally) LoadTally {
	t.ElapsedMS += u.ElapsedMS
	t.Jobs += u.Jobs
	t.Done += u.Done
	t.Failed += u.Failed
	t.PerSecond = u.PerSecond
	t.Stalls += u.Stalls
	t.LateRow += u.LateRow
	t.LateReceiver += u.LateReceiver
	if t.Style == "" {
		t.Style = u.Style
	}
	return t
}

// LoadCheck is what the invariant checker found, job by job, at the end
// of a style.
type LoadCheck struct {
	Jobs int `json:"jobs"` // checked
	// Broken counts jobs that broke at least one invariant.
	Broken int `json:"broken"`
	// ZombieResult counts jobs that ended with a zombie's result: in the
	// row, at the receiver, or both.
	ZombieResult int `json:"zombie_result"`
	// StaleWrites counts the checker's late completions and failure
	// reports (stale-write, not renewals): LateRow's count, job by job.
	StaleWrites int `json:"stale_writes"`
	// OlderAccepted counts the checker's receiver-monotonic violations:
	// LateReceiver's count, job by job.
	OlderAccepted int `json:"older_accepted"`
	// Unfinished counts jobs that ended neither done nor failed.
	Unfinished int `json:"unfinished"`
	// Example is the sentence of one violation, the plainest found, or "".
	Example string `json:"example"`
}

// Agrees says whether the checker's counts are the live ones, pair by
// pair: its late completions and failure reports are LateRow, and its
// older epochs the receiver took are LateReceiver.
func (c LoadCheck) Agrees(t LoadTally) bool {
	return int64(c.StaleWrites) == t.LateRow && int64(c.OlderAccepted) == t.LateReceiver
}

// Add returns c's counts and d's together; the example is c's, or d's if
// c has none.
func (c LoadCheck) Add(d LoadCheck) LoadCheck {
	c.Jobs += d.Jobs
	c.Broken += d.Broken
	c.ZombieResult += d.ZombieResult
	c.StaleWrites += d.StaleWrites
	c.OlderAccepted += d.OlderAccepted
	c.Unfinished += d.Unfinished
	if c.Example == "" {
		c.Example = d.Example
	}
	return c
}

// LoadRound is one style's round: where in the round's order it ran, its
// share of the jobs and its throughput.
type LoadRound struct {
	Round    int `json:"round"`    // from 1
	Position int `json:"position"` // its place in the round's order, from 1
	Jobs     int `json:"jobs"`
	// SpanMS is from the round's first claim until each of its jobs had
	// ended once, on the database clock.
	SpanMS    int64   `json:"span_ms"`
	PerSecond float64 `json:"per_second"` // jobs done per second over SpanMS
	// Agrees says this round's live counts and the checker's are the same.
	Agrees   bool `json:"agrees"`
	CutShort bool `json:"cut_short"`
}

// LoadSpread is a number measured once per round: its median and its
// range over the rounds.
type LoadSpread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"` // how many rounds
}

// SpreadOf is the median and range of xs; the zero LoadSpread if none.
func SpreadOf(xs []float64) LoadSpread {
	if len(xs) == 0 {
		return LoadSpread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return LoadSpread{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// Contains says whether v lies within the spread's range.
func (s LoadSpread) Contains(v float64) bool { return s.N > 0 && s.Min <= v && v <= s.Max }

// LoadStyleResult is one style's end, or its rounds so far: every count
// is summed over them.
type LoadStyleResult struct {
	Style string `json:"style"`
	// Tally is the last live count of each round, taken after its workers
	// stopped.
	Tally LoadTally `json:"tally"`
	Check LoadCheck `json:"check"`
	// PerSecond is jobs done per second over the style's rounds together.
	PerSecond float64 `json:"per_second"`
	// CutShort says a round reached MaxLoadStyleTime with jobs left.
	CutShort bool `json:"cut_short"`
	// Agrees says the live counts and the checker's are the same, in every
	// round.
	Agrees bool `json:"agrees"`
	// Rounds are the style's rounds so far, in the order they ran.
	Rounds []LoadRound `json:"rounds,omitempty"`
	// Throughput is the jobs per second of its rounds: median and range.
	Throughput *LoadSpread `json:"throughput,omitempty"`
}

// AddRound adds one round of the style to its result: the round's last
// live count, the checker's and where and how fast it ran.
func (r *LoadStyleResult) AddRound(rd LoadRound, t LoadTally, c LoadCheck) {
	if r.Style == "" {
		r.Style = t.Style
	}
	rd.Agrees = c.Agrees(t)
	first := len(r.Rounds) == 0
	r.Tally = r.Tally.Add(t)
	r.Check = r.Check.Add(c)
	r.CutShort = r.CutShort || rd.CutShort
	r.Agrees = (first || r.Agrees) && rd.Agrees
	r.Rounds = append(r.Rounds, rd)
	var span int64
	rates := make([]float64, len(r.Rounds))
	for i, x := range r.Rounds {
		span += x.SpanMS
		rates[i] = x.PerSecond
	}
	r.PerSecond = float64(r.Tally.Done) / (float64(max(span, 1)) / 1000)
	sp := SpreadOf(rates)
	r.Throughput = &sp
}

// LoadComparison is fencelab's throughput beside the other styles',
// round by round: in each round, fencelab's jobs per second over the mean
// of the others' in that same round, so that what the machine did in that
// minute touches both sides alike.
type LoadComparison struct {
	// Ratio is that quotient, round by round: its median and its range.
	Ratio LoadSpread `json:"ratio"`
	// Same says the difference is within the spread: the ratio was at or
	// above 1 in some round and at or below it in another. One round has
	// no spread, so it is never the same.
	Same bool `json:"same"`
}

// CompareLoad compares fencelab's throughput with the other styles',
// round by round (LoadComparison); false when the results hold no
// fencelab or no other style. A result without rounds counts as one
// round of its PerSecond.
func CompareLoad(rs []LoadStyleResult) (LoadComparison, bool) {
	rounds := func(r LoadStyleResult) []LoadRound {
		if len(r.Rounds) == 0 {
			return []LoadRound{{Round: 1, PerSecond: r.PerSecond}}
		}
		return r.Rounds
	}
	var fenced []LoadRound
	others := map[int][]float64{} // round -> the other styles' jobs per second
	found := false
	for _, r := range rs {
		if r.Style == "fencelab" {
			fenced, found = rounds(r), true
			continue
		}
		for _, rd := range rounds(r) {
			others[rd.Round] = append(others[rd.Round], rd.PerSecond)
		}
	}
	var ratios []float64
	for _, f := range fenced {
		o := others[f.Round]
		var sum float64
		for _, v := range o {
			sum += v
		}
		if len(o) == 0 || sum <= 0 {
			continue
		}
		ratios = append(ratios, f.PerSecond/(sum/float64(len(o))))
	}
	if !found || len(ratios) == 0 {
		return LoadComparison{}, false
	}
	c := LoadComparison{Ratio: SpreadOf(ratios)}
	c.Same = c.Ratio.N >= 2 && c.Ratio.Contains(1)
	return c, true
}

// Words says the comparison as the verdict does, after fencelab's count:
// "at the same throughput: 0.98× theirs, from 0.91× to 1.05× over 5
// rounds", or "at 0.85× their throughput, from 0.80× to 0.90× over 5
// rounds".
func (c LoadComparison) Words() string {
	r := c.Ratio
	switch {
	case c.Same:
		return fmt.Sprintf("at the same throughput: %s theirs, from %s to %s over %d rounds", times(r.Median), times(r.Min), times(r.Max), r.N)
	case r.N < 2:
		return fmt.Sprintf("at %s their throughput, in one round: no spread to judge by", times(r.Median))
	}
	return fmt.Sprintf("at %s their throughput, from %s to %s over %d rounds", times(r.Median), times(r.Min), times(r.Max), r.N)
}

// times writes a ratio as "0.85×".
func times(v float64) string { return fmt.Sprintf("%.2f×", v) }

// count writes n with thousands separated by commas.
func Thousands(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
