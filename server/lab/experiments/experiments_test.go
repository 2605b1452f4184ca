package experiments_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/experiments"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestExpectedOutcome_IsTheArticlesTable(t *testing.T) {
	for o, want := range map[experiments.Ordering][3]string{
		experiments.NewOwnerFirst: {"rejected", "rejected", "epoch 2, the new owner's result in the row and at the receiver"},
		experiments.ZombieFirst:   {"accepted, then superseded", "rejected", "epoch 2, the new owner's result in the row and at the receiver"},
	} {
		x, ok := experiments.ExpectedOutcome(o)
		if !ok || x.Epoch != 2 || x.ResultFrom != experiments.NewOwner || x.ReceiverFrom != experiments.NewOwner {
			t.Errorf("%s: %+v", o, x)
		}
		if got := [3]string{x.Words.Call, x.Words.Commit, x.Words.Final}; got != want {
			t.Errorf("%s: the correct build's row says %q, the article %q", o, got, want)
		}
	}
	if _, ok := experiments.ExpectedOutcome(experiments.FreePlay); ok {
		t.Error("free play has no expected outcome")
	}
}

func TestRunConfig_ValidatesAndFillsDefaults(t *testing.T) {
	for _, tc := range []struct {
		cfg experiments.RunConfig
		ok  bool
	}{
		{experiments.RunConfig{Ordering: experiments.ZombieFirst}, true},
		{experiments.RunConfig{Ordering: experiments.ClockSkew}, true},
		{experiments.RunConfig{}, false},
		{experiments.RunConfig{Ordering: "sideways"}, false},
		{experiments.RunConfig{Ordering: experiments.ZombieFirst, Lease: time.Millisecond}, false},
		{experiments.RunConfig{Ordering: experiments.ZombieFirst, Skew: time.Second}, false},
		{experiments.RunConfig{Ordering: experiments.ClockSkew, Skew: -time.Second}, false},
		{experiments.RunConfig{Ordering: experiments.ZombieFirst, Broken: 1 << 12}, false},
	} {
		c := tc.cfg
		err := c.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%+v: Validate = %v, want ok=%v", tc.cfg, err, tc.ok)
		}
		if err != nil && !strings.Contains(fmt.Sprint(err), " ") {
			t.Errorf("%+v: %q is no sentence", tc.cfg, err)
		}
		if tc.ok && (c.Lease != experiments.DefaultRunLease || (c.Ordering == experiments.ClockSkew && c.Skew != 2*c.Lease)) {
			t.Errorf("%+v: defaults not filled: %+v", tc.cfg, c)
		}
	}
}

func TestBatchRuns_TheMatrixsClockSkewCellsHoldALeaseThatLasts(t *testing.T) {
	for _, lease := range []time.Duration{300 * time.Millisecond, 5 * time.Second} {
		rcs, err := experiments.BatchRuns(experiments.BatchMatrix, lease)
		if err != nil {
			t.Fatal(err)
		}
		skew := 0
		for _, rc := range rcs {
			want := lease
			if rc.Ordering == experiments.ClockSkew {
				skew++
				want = max(lease, experiments.MinSkewLease)
				if rc.Skew != 2*want {
					t.Errorf("lease %v: a clock-skew cell's skew is %v, want %v", lease, rc.Skew, 2*want)
				}
			}
			if rc.Lease != want {
				t.Errorf("lease %v: the %s cell (broken %v, same %v) holds %v, want %v", lease, rc.Ordering, rc.Broken.Names(), rc.SameIdentity, rc.Lease, want)
			}
		}
		if skew != 16 {
			t.Errorf("lease %v: %d clock-skew cells, want 16", lease, skew)
		}
	}
}

// TestBounds_OneSentenceForEveryLease holds each lease's bounds to the one
// sentence every setting of a lease is refused with, at both ends and just
// inside them.
func TestBounds_OneSentenceForEveryLease(t *testing.T) {
	for name, b := range map[string]experiments.Bounds{"run": experiments.RunLease, "check": experiments.CheckLease, "load": experiments.LoadLease} {
		for _, d := range []time.Duration{b.Min, b.Max} {
			if err := b.Validate("lease", d); err != nil {
				t.Errorf("%s: %v is within its bounds, refused: %v", name, d, err)
			}
		}
		for _, d := range []time.Duration{b.Min - 1, b.Max + 1, -1} {
			err := b.Validate("lease", d)
			if want := "lease " + d.String() + " must be between " + b.Min.String() + " and " + b.Max.String(); err == nil || err.Error() != want || !errors.Is(err, engine.ErrInvalidInput) {
				t.Errorf("%s: %v: %v, want %q as invalid input", name, d, err, want)
			}
		}
		if !experiments.RunLease.Within(b) {
			t.Errorf("%s: %v is not within a run's lease %v", name, b, experiments.RunLease)
		}
	}
	if (experiments.Bounds{Min: time.Second, Max: time.Millisecond * 500}).Within(experiments.Bounds{Min: time.Second, Max: time.Millisecond * 500}) {
		t.Error("bounds whose min is over their max are within themselves")
	}
}

// TestParse_NamesAndTheirOlderSpellings: a case is named as the ordering
// or the run's field it plays (clock-skew, same-identity), and a batch
// as its case; the older names still parse, to today's; anything else is
// refused as bad input.
func TestParse_NamesAndTheirOlderSpellings(t *testing.T) {
	for in, want := range map[string]experiments.CheckCase{"clock-skew": experiments.CaseClockSkew, "clock-ahead": experiments.CaseClockSkew,
		"same-identity": experiments.CaseSameIdentity, "same-name": experiments.CaseSameIdentity, "zombie-fails": experiments.CaseZombieFails} {
		if got, err := experiments.ParseCheckCase(in); got != want || err != nil {
			t.Errorf("experiments.ParseCheckCase(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if experiments.CaseClockSkew.Config(time.Second).Ordering != experiments.ClockSkew || !experiments.CaseSameIdentity.Config(time.Second).SameIdentity {
		t.Errorf("the cases' names are not the runs they play")
	}
	for in, want := range map[string]experiments.BatchName{"epoch-check-same-identity": experiments.BatchEpochCheckSameIdentity, "epoch-check-same-name": experiments.BatchEpochCheckSameIdentity, "matrix": experiments.BatchMatrix} {
		if got, err := experiments.ParseBatch(in); got != want || err != nil {
			t.Errorf("experiments.ParseBatch(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "Clock-Skew", "clock_skew", "same-name ", "check", "epoch-check-same"} {
		_, err1 := experiments.ParseCheckCase(in)
		_, err2 := experiments.ParseBatch(in)
		if !errors.Is(err1, engine.ErrInvalidInput) || !errors.Is(err2, engine.ErrInvalidInput) {
			t.Errorf("%q: experiments.ParseCheckCase %v, experiments.ParseBatch %v; want both refused", in, err1, err2)
		}
	}
}
