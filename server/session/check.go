package session

import (
	"context"
	"time"

	"github.com/fencelab/fencelab/engine/lab"
	"github.com/fencelab/fencelab/server/check"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/runner"
	"github.com/fencelab/fencelab/server/sandbox"
)

// startCheck checks a reader's own four statements: first as a role on
// throwaway schemas, so that a refused statement is a 400 that starts
// nothing; then each of the article's cases as a background run of the
// session's batch "check", whose finished event carries the report. The
// caller holds s.life.
func (s *Session) startCheck(ctx context.Context, sol sandbox.Solution, lease time.Duration) (Result, error) {
	if !s.m.cfg.CustomSQL {
		return Result{}, fault.Errorf(fault.Forbidden, "this server does not run readers' own SQL (it was started with --no-custom-sql)")
	}
	if lease == 0 {
		lease = check.DefaultLease
	}
	lim := s.m.cfg.Limits
	if lease < lim.MinLease || lease > lim.MaxLease {
		return Result{}, fault.Errorf(fault.Invalid, "lease %v must be between %v and %v on this server", lease, lim.MinLease, lim.MaxLease)
	}
	cases := lab.CheckCases()
	rcs := make([]lab.RunConfig, len(cases))
	for i, c := range cases {
		rcs[i] = c.Config(lease)
		if err := rcs[i].Validate(); err != nil {
			return Result{}, err
		}
	}
	_, schemas, err := s.next("v")
	if err != nil {
		return Result{}, err
	}
	vctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	probes, err := check.Validate(vctx, s.m.cfg.Pool, schemas.Jobs[:len(schemas.Jobs)-2], sol)
	if err != nil {
		return Result{}, err
	}
	return s.playBatch(lab.BatchCheck, rcs, lease, &sol, &probes)
}

// finishCheck adds a check's report to its batch's finished event: what
// each case's run came to, judged (lab.JudgeCheck).
func finishCheck(done *lab.BatchEvent, specs []runner.Spec, outcomes []*lab.Outcome, failures []*lab.Failure, probes lab.Probes) *lab.BatchEvent {
	cases := lab.CheckCases()
	in := make([]lab.CheckInput, 0, len(specs))
	for i, spec := range specs {
		if i >= len(cases) {
			break
		}
		in = append(in, lab.CheckInput{Case: cases[i], Run: spec.ID, Outcome: outcomes[i], Err: failures[i]})
	}
	rep := lab.JudgeCheck(in)
	rep.WithProbes(probes)
	done.Check = &rep
	done.Answer = rep.Words
	return done
}
