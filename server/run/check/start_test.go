package check_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/check"
)

// countedTurn is a line's turn that counts how often it is given back.
type countedTurn struct {
	waited   time.Duration
	released int
}

func (t *countedTurn) Waited() time.Duration { return t.waited }
func (t *countedTurn) Release()              { t.released++ }

func noProbes(context.Context) (experiments.Probes, error) { return experiments.Probes{}, nil }

// A check owns its turn from Start to its end and gives it back exactly
// once, whatever it came to: a lease out of bounds or a refused trial
// before anything plays, the cases played, or a batch that never started.
func TestStart_TheTurnGoesBackOnce(t *testing.T) {
	refused := errors.New("the claim does not prepare")
	played := check.PlayerFunc(func(ctx context.Context, c experiments.CheckCase) (judge.CheckInput, error) {
		return judge.CheckInput{Case: c, Err: &protocol.Failure{Code: protocol.ErrEvaluate, Message: "not played here"}}, nil
	})
	for _, tc := range []struct {
		name     string
		req      check.Request
		wantErr  bool
		validate bool // Validate was called
		then     func(*check.Checking, *countedTurn) error
	}{
		{name: "a lease out of bounds", req: check.Request{Lease: time.Hour, Validate: noProbes}, wantErr: true},
		{name: "a refused trial", req: check.Request{Validate: func(context.Context) (experiments.Probes, error) { return experiments.Probes{}, refused }}, wantErr: true, validate: true},
		{name: "no trial", req: check.Request{}, wantErr: true},
		{name: "played", req: check.Request{Validate: noProbes}, validate: true, then: func(c *check.Checking, turn *countedTurn) error {
			if _, err := c.Play(context.Background(), played, 2, nil); err != nil {
				return err
			}
			if turn.released != 1 {
				return fmt.Errorf("the turn went back %d times as the check's Play ended, want once", turn.released)
			}
			c.Release() // after Play: counts for nothing
			return nil
		}},
		{name: "never played", req: check.Request{Validate: noProbes}, validate: true, then: func(c *check.Checking, _ *countedTurn) error {
			c.Release()
			c.Release()
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			turn := &countedTurn{waited: 1500 * time.Millisecond}
			req := tc.req
			req.Turn = turn
			validated := false
			if v := req.Validate; v != nil {
				req.Validate = func(ctx context.Context) (experiments.Probes, error) { validated = true; return v(ctx) }
			}
			c, err := check.Start(t.Context(), req)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Start: %v, want an error: %v", err, tc.wantErr)
			}
			if validated != tc.validate {
				t.Errorf("the trial ran: %v, want %v", validated, tc.validate)
			}
			if err == nil {
				if c.Waited() != turn.waited || c.Lease() != check.DefaultLease || len(c.Cases()) != len(experiments.CheckCases()) {
					t.Errorf("the check started waited %v, lease %v, %d cases: want its turn's %v, %v, every case", c.Waited(), c.Lease(), len(c.Cases()), turn.waited, check.DefaultLease)
				}
				if turn.released != 0 {
					t.Fatalf("the turn went back as the check started")
				}
				if err := tc.then(c, turn); err != nil {
					t.Fatal(err)
				}
			}
			if turn.released != 1 {
				t.Errorf("the turn went back %d times, want once", turn.released)
			}
		})
	}
}

// A check that waited in no line (the CLI's) starts and plays all the same.
func TestStart_NoLine(t *testing.T) {
	c, err := check.Start(t.Context(), check.Request{Lease: 2 * time.Second, Cases: []experiments.CheckCase{experiments.CaseNewOwnerFirst}, Validate: noProbes})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Play(t.Context(), check.PlayerFunc(func(ctx context.Context, cs experiments.CheckCase) (judge.CheckInput, error) {
		return judge.CheckInput{Case: cs, Err: &protocol.Failure{Code: protocol.ErrEvaluate, Message: "not played here"}}, nil
	}), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Waited() != 0 || c.Lease() != 2*time.Second || len(rep.Cases) != 1 {
		t.Errorf("waited %v, lease %v, %d cases in the report: want 0, 2s, 1", c.Waited(), c.Lease(), len(rep.Cases))
	}
}
