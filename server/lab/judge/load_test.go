package judge_test

import (
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
)

// TestLoadRoundOrder_NoStyleGainsFromItsPlace: over a lab's rounds every
// style runs in every place of a round equally often, and so at the same
// mean place in the whole sequence: a machine that slows (or speeds up)
// steadily as the lab goes touches every style alike. Every style works
// through the same jobs in each round, and all its jobs over the rounds.
func TestLoadRoundOrder_NoStyleGainsFromItsPlace(t *testing.T) {
	all := experiments.LoadStyles()
	for n := 1; n <= len(all); n++ {
		for _, k := range []int{1, 2} {
			c := experiments.LoadConfig{Workers: 4, Jobs: 503, LeaseMS: 300, Styles: all[:n], Rounds: k * n}
			if err := c.Validate(); err != nil {
				t.Fatalf("%d styles, %d rounds: %v", n, c.Rounds, err)
			}
			places := map[string][]int{} // style -> how often in each place
			slot := map[string]int{}     // style -> sum of its places in the whole sequence
			jobs := 0
			for r := range c.Rounds {
				order := c.RoundOrder(r)
				if len(order) != n {
					t.Fatalf("round %d runs %v", r, order)
				}
				for p, s := range order {
					if places[s] == nil {
						places[s] = make([]int, n)
					}
					places[s][p]++
					slot[s] += r*n + p
				}
				jobs += c.RoundJobs(r)
			}
			for _, s := range c.Styles {
				for p, times := range places[s] {
					if times != k {
						t.Errorf("%d styles, %d rounds: %s runs in place %d %d times, want %d (%v)", n, c.Rounds, s, p+1, times, k, places)
					}
				}
				if slot[s] != slot[c.Styles[0]] {
					t.Errorf("%d styles, %d rounds: %s's places sum to %d, %s's to %d", n, c.Rounds, s, slot[s], c.Styles[0], slot[c.Styles[0]])
				}
			}
			if jobs != c.Jobs {
				t.Errorf("%d styles, %d rounds: the rounds share %d jobs, want %d", n, c.Rounds, jobs, c.Jobs)
			}
		}
	}
	d := experiments.DefaultLoad()
	d.Fill()
	if d.Rounds != len(d.Styles) {
		t.Errorf("the default lab runs %d rounds of %d styles", d.Rounds, len(d.Styles))
	}
}

func TestLoadConfig_RoundsBounds(t *testing.T) {
	for _, c := range []experiments.LoadConfig{
		{Rounds: 3},  // 5 styles: some would run first more often
		{Rounds: 25}, // too many
		{Styles: []string{"fencelab", "token"}, Rounds: 3},            // not a multiple
		{Styles: []string{"fencelab", "token"}, Jobs: 10, Rounds: 20}, // no job in some rounds
	} {
		c.Fill()
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// rounds makes a style's result from its jobs per second in each round.
func rounds(style string, zombies int, rates ...float64) experiments.LoadStyleResult {
	r := experiments.LoadStyleResult{Style: style}
	for i, v := range rates {
		rd := experiments.LoadRound{Round: i + 1, Position: i%len(rates) + 1, Jobs: 100, SpanMS: int64(100 / v * 1000), PerSecond: v}
		z := 0
		if i == 0 {
			z = zombies
		}
		r.AddRound(rd, experiments.LoadTally{Style: style, Jobs: 100, Done: 100}, experiments.LoadCheck{Jobs: 100, ZombieResult: z, Broken: z})
	}
	return r
}

// TestLoadVerdict_SameThroughputOnlyWithinTheSpread: the verdict says
// fencelab runs at the same throughput as the other styles only when the
// difference is within the spread of the rounds (its ratio to theirs, round
// by round, lies on both sides of 1); otherwise it says the ratio, with its
// range, and a single round, which has no spread, is never "the same".
func TestLoadVerdict_SameThroughputOnlyWithinTheSpread(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rs       []experiments.LoadStyleResult
		same     bool
		says     string
		median   float64
		min, max float64
	}{
		{
			name: "equal within the noise",
			rs:   []experiments.LoadStyleResult{rounds("fencelab", 0, 80, 70, 75), rounds("state-only", 9, 78, 72, 75), rounds("token", 7, 82, 74, 75)},
			same: true, says: "fencelab: 0, at the same throughput: 1.00× theirs, from 0.96× to 1.00× over 3 rounds",
			median: 1, min: 70.0 / 73, max: 1,
		},
		{
			// The report's lab: the first style fastest only because it ran
			// first. Round by round, fencelab is as fast.
			name: "the machine slowed, every style alike",
			rs:   []experiments.LoadStyleResult{rounds("fencelab", 0, 87, 80, 70, 60, 54), rounds("id-only", 5, 88, 79, 71, 59, 55)},
			same: true, says: "at the same throughput",
			median: 87.0 / 88, min: 54.0 / 55, max: 60.0 / 59,
		},
		{
			name:   "slower in every round",
			rs:     []experiments.LoadStyleResult{rounds("fencelab", 0, 60, 64, 68), rounds("state-only", 3, 80, 80, 80)},
			says:   "fencelab: 0, at 0.80× their throughput, from 0.75× to 0.85× over 3 rounds",
			median: 64.0 / 80, min: 60.0 / 80, max: 68.0 / 80,
		},
		{
			name:   "faster in every round, by little",
			rs:     []experiments.LoadStyleResult{rounds("fencelab", 0, 81, 84), rounds("token", 3, 80, 80)},
			says:   "at 1.03× their throughput, from 1.01× to 1.05× over 2 rounds",
			median: 82.5 / 80, min: 81.0 / 80, max: 84.0 / 80,
		},
		{
			name:   "one round: no spread, never the same",
			rs:     []experiments.LoadStyleResult{rounds("fencelab", 0, 80), rounds("token", 3, 80)},
			says:   "at 1.00× their throughput, in one round: no spread to judge by",
			median: 1, min: 1, max: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := experiments.CompareLoad(tc.rs)
			if !ok {
				t.Fatal("no comparison")
			}
			near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
			if c.Same != tc.same || !near(c.Ratio.Median, tc.median) || !near(c.Ratio.Min, tc.min) || !near(c.Ratio.Max, tc.max) {
				t.Errorf("comparison %+v, want same %v, median %.4f, range %.4f–%.4f", c, tc.same, tc.median, tc.min, tc.max)
			}
			v := judge.LoadVerdict(tc.rs)
			if !strings.Contains(v, tc.says) {
				t.Errorf("verdict %q does not say %q", v, tc.says)
			}
			if !tc.same && strings.Contains(v, "same") {
				t.Errorf("verdict %q says the same throughput outside the spread", v)
			}
		})
	}
	// No other style: nothing to compare with.
	if _, ok := experiments.CompareLoad([]experiments.LoadStyleResult{rounds("fencelab", 0, 80, 70)}); ok {
		t.Errorf("fencelab alone compared")
	}
}

// TestLoadStyleResult_AddRoundSumsThePairs: a style's result is its rounds
// summed, its throughput the median and range of theirs, and it agrees
// only if every round's live counts were the checker's.
func TestLoadStyleResult_AddRoundSumsThePairs(t *testing.T) {
	var r experiments.LoadStyleResult
	r.AddRound(experiments.LoadRound{Round: 1, SpanMS: 1000, PerSecond: 100}, experiments.LoadTally{Style: "id-only", Jobs: 100, Done: 100, LateRow: 3, LateReceiver: 2, Stalls: 4, ElapsedMS: 1500},
		experiments.LoadCheck{Jobs: 100, StaleWrites: 3, OlderAccepted: 2, ZombieResult: 2})
	r.AddRound(experiments.LoadRound{Round: 2, SpanMS: 2000, PerSecond: 50}, experiments.LoadTally{Style: "id-only", Jobs: 100, Done: 100, LateRow: 1, Stalls: 5, ElapsedMS: 2500},
		experiments.LoadCheck{Jobs: 100, StaleWrites: 1, ZombieResult: 1})
	if r.Style != "id-only" || r.Tally.Done != 200 || r.Tally.LateRow != 4 || r.Tally.LateReceiver != 2 || r.Tally.Stalls != 9 || r.Tally.ElapsedMS != 4000 ||
		r.Check.StaleWrites != 4 || r.Check.OlderAccepted != 2 || r.Check.ZombieResult != 3 || !r.Agrees || len(r.Rounds) != 2 {
		t.Errorf("%+v", r)
	}
	if r.PerSecond < 66.6 || r.PerSecond > 66.7 || r.Throughput.Median != 75 || r.Throughput.Min != 50 || r.Throughput.Max != 100 {
		t.Errorf("%.2f jobs/s, spread %+v", r.PerSecond, r.Throughput)
	}
	r.AddRound(experiments.LoadRound{Round: 3, SpanMS: 1000, PerSecond: 100}, experiments.LoadTally{Style: "id-only", Jobs: 100, Done: 100, LateRow: 2},
		experiments.LoadCheck{Jobs: 100, StaleWrites: 1})
	if r.Agrees || r.Rounds[2].Agrees || !r.Rounds[0].Agrees {
		t.Errorf("a round whose counts differ: %+v", r)
	}
}
