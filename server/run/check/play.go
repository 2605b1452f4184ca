package check

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// A Player plays one case of a check and says what it came to: an
// Outcome read from the database and the receiver's log, or an Err that
// says why the case's run reached none. It returns an error only when the
// check cannot go on (the database, ctx), never for what the solution
// did. Three play the cases: Statements (a reader's SQL, through the
// runner, for `fencelab check`), the harness's Player (a reader's worker
// program, for `fencelab check --worker`) and the session's batch (the
// page's check, each case a cell the page draws). Play may be called from
// several goroutines at once, one case each, and may be asked to play a
// case again (a statement timeout ended its first play): each play is a
// run of its own.
type Player interface {
	Play(ctx context.Context, c experiments.CheckCase) (judge.CheckInput, error)
}

// PlayerFunc is a func as a Player.
type PlayerFunc func(ctx context.Context, c experiments.CheckCase) (judge.CheckInput, error)

// Play calls f.
func (f PlayerFunc) Play(ctx context.Context, c experiments.CheckCase) (judge.CheckInput, error) {
	return f(ctx, c)
}

// The notes a case played again carries.
const (
	NotePlayedAgain   = "Its first play ended when a statement ran past the statement timeout, on a machine busy with other work; this is its second play, with no other case of the check beside it."
	NoteTimedOutTwice = "A statement ran past the statement timeout in both of its plays, the second with no other case of the check beside it."
)

// Plan is one check for Play.
type Plan struct {
	// Cases are played in this order (Parallel at a time) and the report
	// lists them so; default experiments.CheckCases().
	Cases  []experiments.CheckCase
	Player Player
	// Probes are what Validate showed of the statements (or
	// ValidateReceiver of a receiver rule alone); a report names what
	// they found broken first.
	Probes experiments.Probes
	// Parallel is how many cases play at once; default 1.
	Parallel int
	// OnCase, if set, is told each case as it ends, in the order they end.
	OnCase func(judge.CheckInput)
}

// Play is the check's one pipeline: it plays each of the plan's cases
// with its Player and judges them with the probes (judge.JudgeCheck,
// CheckReport.WithProbes). Each case's result is its Player's, named by
// the case it was asked to play: a Player that answers with another
// case's name is an error, not a result. Play returns an error, and no
// report, when a Player does, or ctx ends; the cases playing then are
// ended first.
//
// A case whose run a statement timeout ended (Failure.TimedOut) is played
// once more when every other case has ended, alone: on a machine busy
// with other work a claim can run past the sandbox's time limit through
// no fault of its own, and a slow machine is not the reader's mistake.
// The second play's result is the case's, with a note that says so; a
// statement slow for real runs past the limit again.
func Play(ctx context.Context, p Plan) (protocol.CheckReport, error) {
	if p.Player == nil {
		return protocol.CheckReport{}, errors.New("check: the plan has no Player")
	}
	cases := p.Cases
	if len(cases) == 0 {
		cases = experiments.CheckCases()
	}
	parallel := max(1, p.Parallel)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	inputs := make([]judge.CheckInput, len(cases))
	sem := make(chan struct{}, parallel)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		onCase = p.OnCase
	)
	for i, c := range cases {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			in, err := p.Player.Play(ctx, c)
			if err == nil && in.Case != c {
				err = fmt.Errorf("check: asked to play %s, the player answered for %q", c, in.Case)
			}
			if err != nil {
				cancel(err)
				return
			}
			inputs[i] = in
			if onCase != nil {
				mu.Lock()
				onCase(in)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return protocol.CheckReport{}, err
	}
	for i, c := range cases {
		if inputs[i].Outcome != nil || !inputs[i].Err.TimedOut() {
			continue
		}
		in, err := p.Player.Play(ctx, c)
		if err == nil && in.Case != c {
			err = fmt.Errorf("check: asked to play %s again, the player answered for %q", c, in.Case)
		}
		if err != nil {
			return protocol.CheckReport{}, err
		}
		note := NotePlayedAgain
		if in.Outcome == nil && in.Err.TimedOut() {
			note = NoteTimedOutTwice
		}
		in.Notes = append(in.Notes, note)
		inputs[i] = in
		if onCase != nil {
			onCase(in)
		}
	}
	rep := judge.JudgeCheck(inputs)
	rep.WithProbes(p.Probes)
	return rep, nil
}
