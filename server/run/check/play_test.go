package check_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/check"
)

// The pipeline's bookkeeping, with a Player that plays no run: each
// case's result is the one its Player gave for it, wherever it finished,
// and a Player that answers for another case stops the check.
func TestPlay_EachResultNamesItsCase(t *testing.T) {
	cases := experiments.CheckCases()
	// The cases end last first: a pipeline that took results in the
	// order they came, or by position, would give each the wrong run.
	player := check.PlayerFunc(func(ctx context.Context, c experiments.CheckCase) (judge.CheckInput, error) {
		n := 0
		for i, k := range cases {
			if k == c {
				n = len(cases) - i
			}
		}
		time.Sleep(time.Duration(n) * 30 * time.Millisecond)
		return judge.CheckInput{Case: c, Run: "run-of-" + string(c), Err: &protocol.Failure{Code: protocol.ErrEvaluate, Message: "played " + string(c)}}, nil
	})
	var ended []experiments.CheckCase
	rep, err := check.Play(t.Context(), check.Plan{Cases: cases, Player: player, Parallel: len(cases),
		OnCase: func(in judge.CheckInput) { ended = append(ended, in.Case) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Cases) != len(cases) {
		t.Fatalf("the report has %d cases, want %d", len(rep.Cases), len(cases))
	}
	for i, cr := range rep.Cases {
		if cr.Case != cases[i] || cr.Run != "run-of-"+string(cases[i]) || cr.Error == nil || cr.Error.Message != "played "+string(cases[i]) {
			t.Errorf("report case %d is %s, run %q, error %+v: want %s and its own run", i, cr.Case, cr.Run, cr.Error, cases[i])
		}
	}
	if len(ended) != len(cases) || ended[0] != cases[len(cases)-1] {
		t.Errorf("OnCase saw %v: want every case, the last first", ended)
	}
	if rep.Pass {
		t.Error("a check whose cases all failed passes")
	}
}

func TestPlay_APlayerThatAnswersForAnotherCaseIsAnError(t *testing.T) {
	var played atomic.Int32
	player := check.PlayerFunc(func(ctx context.Context, c experiments.CheckCase) (judge.CheckInput, error) {
		played.Add(1)
		if c == experiments.CaseZombieFirst {
			return judge.CheckInput{Case: experiments.CaseNewOwnerFirst}, nil
		}
		return judge.CheckInput{Case: c, Err: &protocol.Failure{Code: protocol.ErrEvaluate, Message: "x"}}, nil
	})
	_, err := check.Play(t.Context(), check.Plan{Player: player})
	if err == nil || !strings.Contains(err.Error(), "asked to play zombie-first") {
		t.Fatalf("got %v: want the mismatch named", err)
	}
	if n := played.Load(); n != 2 {
		t.Errorf("%d cases were played: a check that cannot go on starts no more (want 2)", n)
	}
}

func TestPlay_APlayersErrorStopsTheCheck(t *testing.T) {
	boom := errors.New("the database went away")
	player := check.PlayerFunc(func(ctx context.Context, c experiments.CheckCase) (judge.CheckInput, error) {
		if c == experiments.CaseCrash {
			return judge.CheckInput{Case: c}, boom
		}
		return judge.CheckInput{Case: c, Err: &protocol.Failure{Code: protocol.ErrEvaluate, Message: "x"}}, nil
	})
	if _, err := check.Play(t.Context(), check.Plan{Player: player}); !errors.Is(err, boom) {
		t.Fatalf("got %v: want the player's error", err)
	}
	if _, err := check.Play(t.Context(), check.Plan{}); err == nil {
		t.Fatal("a plan with no player played")
	}
}

// A case whose run a statement timeout ended is played once more, after
// every other case has ended; its second play's result is the case's,
// with a note saying so. A case that times out twice is not played a
// third time, and its note says both plays ran out of time.
func TestPlay_ACaseATimeoutEndedIsPlayedAgainAlone(t *testing.T) {
	cases := experiments.CheckCases()
	var mu sync.Mutex
	plays := map[experiments.CheckCase]int{}
	var order []experiments.CheckCase
	timedOut := &protocol.Failure{Code: protocol.ErrStepFailed, SQLState: protocol.SQLStateTimeout, Message: "step 4 (claim B): …"}
	player := check.PlayerFunc(func(ctx context.Context, c experiments.CheckCase) (judge.CheckInput, error) {
		mu.Lock()
		plays[c]++
		n := plays[c]
		order = append(order, c)
		mu.Unlock()
		switch {
		case c == experiments.CaseZombieFirst && n == 1, c == experiments.CaseCrash:
			return judge.CheckInput{Case: c, Run: "first", Err: timedOut}, nil
		}
		return judge.CheckInput{Case: c, Run: fmt.Sprintf("play-%d", n), Err: &protocol.Failure{Code: protocol.ErrEvaluate, Message: "played"}}, nil
	})
	rep, err := check.Play(t.Context(), check.Plan{Cases: cases, Player: player, Parallel: 3})
	if err != nil {
		t.Fatal(err)
	}
	if plays[experiments.CaseZombieFirst] != 2 || plays[experiments.CaseCrash] != 2 || plays[experiments.CaseNewOwnerFirst] != 1 {
		t.Fatalf("plays: %v; want the two timed-out cases twice, every other once", plays)
	}
	if last := order[len(cases):]; len(last) != 2 {
		t.Fatalf("the plays in order: %v; want the two replays after every case's first play", order)
	}
	for _, cr := range rep.Cases {
		switch cr.Case {
		case experiments.CaseZombieFirst:
			if cr.Run != "play-2" || cr.Error.TimedOut() || !slices.Contains(cr.Notes, check.NotePlayedAgain) {
				t.Errorf("zombie-first: run %q, error %+v, notes %q; want its second play and the note", cr.Run, cr.Error, cr.Notes)
			}
		case experiments.CaseCrash:
			if !cr.Error.TimedOut() || !slices.Contains(cr.Notes, check.NoteTimedOutTwice) {
				t.Errorf("crash: error %+v, notes %q; want the timeout and the note of two", cr.Error, cr.Notes)
			}
		default:
			if len(cr.Notes) != 0 {
				t.Errorf("%s: notes %q on a case played once", cr.Case, cr.Notes)
			}
		}
	}
}
