package harness_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/fencelab/fencelab/cmd/internal/harness"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/check"
)

// A mutation is one clause taken out of the reference workers' statements
// (fencelab_worker.py, which correct.py runs as they are), or, where
// another clause covers it, the two together, and what the check of the
// program must then name first. They are the SQL check's mutations
// (server/run/check/mutation_test.go), in the worker's own SQL; the receiver's
// are not the program's, and are the SQL check's alone.
type mutation struct {
	name, old, new string
	want           experiments.Requirement // "": covered by another clause, the check passes
}

var mutations = []mutation{
	{"SKIP LOCKED", "FOR UPDATE SKIP LOCKED)", "FOR UPDATE)", experiments.ReqSkipLocked},
	{"the expired-lease branch", "\n           OR (status = 'running' AND lease_until < now())", "", experiments.ReqTakesExpired},
	{"the increment", "       epoch = epoch + 1,\n", "", experiments.ReqEpochRaised},
	{"now() for the worker's clock", "lease_until < now())", "lease_until < %(now)s::timestamptz)", experiments.ReqDBClock},
	{"the complete's epoch", "SET status = 'done', result = %(result)s, lease_until = NULL, updated_at = now()\n WHERE id = %(id)s\n   AND status = 'running'\n   AND owner = %(owner)s\n   AND epoch = %(epoch)s",
		"SET status = 'done', result = %(result)s, lease_until = NULL, updated_at = now()\n WHERE id = %(id)s\n   AND status = 'running'\n   AND owner = %(owner)s", experiments.ReqCompleteFence},
	{"the complete's owner (the epoch covers it)", "result = %(result)s, lease_until = NULL, updated_at = now()\n WHERE id = %(id)s\n   AND status = 'running'\n   AND owner = %(owner)s\n",
		"result = %(result)s, lease_until = NULL, updated_at = now()\n WHERE id = %(id)s\n   AND status = 'running'\n", ""},
	{"the complete's owner and epoch", "result = %(result)s, lease_until = NULL, updated_at = now()\n WHERE id = %(id)s\n   AND status = 'running'\n   AND owner = %(owner)s\n   AND epoch = %(epoch)s",
		"result = %(result)s, lease_until = NULL, updated_at = now()\n WHERE id = %(id)s\n   AND status = 'running'", experiments.ReqCompleteFence},
	{"the complete's id", "result = %(result)s, lease_until = NULL, updated_at = now()\n WHERE id = %(id)s\n", "result = %(result)s, lease_until = NULL, updated_at = now()\n WHERE %(id)s > 0\n", experiments.ReqOwnRow},
	{"the fail's epoch", "error = %(error)s, lease_until = NULL, updated_at = now()\n WHERE id = %(id)s\n   AND status = 'running'\n   AND owner = %(owner)s\n   AND epoch = %(epoch)s",
		"error = %(error)s, lease_until = NULL, updated_at = now()\n WHERE id = %(id)s\n   AND status = 'running'\n   AND owner = %(owner)s", experiments.ReqFailFence},
	{"the fail's owner (the epoch covers it)", "error = %(error)s, lease_until = NULL, updated_at = now()\n WHERE id = %(id)s\n   AND status = 'running'\n   AND owner = %(owner)s\n",
		"error = %(error)s, lease_until = NULL, updated_at = now()\n WHERE id = %(id)s\n   AND status = 'running'\n", ""},
	{"the fail's owner and epoch", "error = %(error)s, lease_until = NULL, updated_at = now()\n WHERE id = %(id)s\n   AND status = 'running'\n   AND owner = %(owner)s\n   AND epoch = %(epoch)s",
		"error = %(error)s, lease_until = NULL, updated_at = now()\n WHERE id = %(id)s\n   AND status = 'running'", experiments.ReqFailFence},
	{"the fail's id", "error = %(error)s, lease_until = NULL, updated_at = now()\n WHERE id = %(id)s\n", "error = %(error)s, lease_until = NULL, updated_at = now()\n WHERE %(id)s > 0\n", experiments.ReqOwnRow},
	{"the fail's retry", "CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END", "'failed'", experiments.ReqFailRetries},
	{"the fail's last attempt", "CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END", "'pending'", experiments.ReqFailRetries},
}

// checkProgram checks a worker program as `fencelab check --worker`
// does: every case and every probe, through the check's pipeline.
func checkProgram(ctx context.Context, cfg harness.Config) (protocol.CheckReport, error) {
	p, err := harness.NewPlayer(cfg)
	if err != nil {
		return protocol.CheckReport{}, err
	}
	probes, err := p.Probe(ctx)
	if err != nil {
		return protocol.CheckReport{}, fmt.Errorf("probe: %w", err)
	}
	return check.Play(ctx, check.Plan{Cases: p.Cases(), Player: p, Probes: probes})
}

// mutantsAtOnce is how many mutants are checked side by side: a check
// mostly waits on leases and processes, and go test's -parallel (the
// cores) would run them two by two.
const mutantsAtOnce = 7

// TestCheck_EveryClauseOfTheReferenceWorkerIsNamed is the check's own
// mutation test, of programs: each clause of the reference worker's
// statements taken out in turn, the check of the program fails and names
// first the requirement that clause keeps; a covered clause passes alone
// and is named with the clause that covers it; a clause beyond the
// article's five (the fail's retry) passes with a note naming it.
// correct.py itself passes
// (TestCheck_CorrectPythonPassesEveryCase, TestCheck_CorrectPythonPassesEveryProbe).
func TestCheck_EveryClauseOfTheReferenceWorkerIsNamed(t *testing.T) {
	t.Parallel()
	reps := make([]protocol.CheckReport, len(mutations))
	errs := make([]error, len(mutations))
	sem := make(chan struct{}, mutantsAtOnce)
	var wg sync.WaitGroup
	for i, m := range mutations {
		cfg := config(t, variant(t, m.old, m.new))
		cfg.Stderr = nil
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			reps[i], errs[i] = checkProgram(t.Context(), cfg)
		})
	}
	wg.Wait()
	for i, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			rep := reps[i]
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			var names []experiments.Requirement
			for _, b := range rep.Broken {
				names = append(names, b.Requirement)
			}
			t.Logf("%s; broken %v", rep.Words, names)
			switch {
			case m.want.Beyond(): // fencelab's, beyond the article: a note, and a pass
				if !rep.Pass || len(rep.Beyond) == 0 || rep.Beyond[0].Requirement != m.want {
					t.Fatalf("without %s: pass %v, broken %v, beyond %v; want a pass with %s beyond the article", m.name, rep.Pass, names, rep.Beyond, m.want)
				}
			case m.want == "" && !rep.Pass:
				t.Fatalf("without %s the check fails, naming %v: another clause was to cover it", m.name, names)
			case m.want != "" && rep.Pass:
				t.Fatalf("without %s the check passes", m.name)
			case m.want != "" && (len(names) == 0 || names[0] != m.want):
				t.Fatalf("without %s the check names %v, not %s first", m.name, names, m.want)
			}
		})
	}
}

// The reference workers that keep every clause pass the probes too;
// leases_alone.py's unfenced fail is named by the runs, and its probes
// find nothing else.
func TestCheck_CorrectPythonPassesEveryProbe(t *testing.T) {
	t.Parallel()
	for _, script := range []string{"correct.py", "raises_when_fenced.py"} {
		t.Run(script, func(t *testing.T) {
			t.Parallel()
			p, err := harness.NewPlayer(config(t, "exec "+shellQuote(pythonWithPsycopg(t))+" "+shellQuote(example(t, script))))
			if err != nil {
				t.Fatal(err)
			}
			found, err := p.Probe(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range found.Statements {
				t.Errorf("%s: %s", b.Requirement, b.Words)
			}
			if len(found.Played) != 4 {
				t.Errorf("played the probes %v, want the four of the statements", found.Played)
			}
		})
	}
}
