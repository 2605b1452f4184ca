package check_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/servertest"
)

// mutation is one clause taken out of our own solution (or, where another
// clause covers it, the two together), and what the check must then name.
type mutation struct {
	name string
	kind sandbox.Kind
	old  string // the clause, as it is in sandbox.Ours()
	new  string
	want experiments.Requirement // "" : covered by another clause, the check passes
}

// mutations lists the clauses of the article's five requirements, in our
// statements. REFERENCE.md's table "What the check catches" (Check it, in detail) is this list.
var mutations = []mutation{
	{"SKIP LOCKED", sandbox.Claim, "FOR UPDATE SKIP LOCKED", "FOR UPDATE", experiments.ReqSkipLocked},
	{"the expired-lease branch", sandbox.Claim, "\n           OR (status = 'running' AND lease_until < now())", "", experiments.ReqTakesExpired},
	{"the increment", sandbox.Claim, "       epoch = epoch + 1,\n", "", experiments.ReqEpochRaised},
	{"now() for the worker's clock", sandbox.Claim, "lease_until < now())", "lease_until < :now)", experiments.ReqDBClock},
	{"the complete's epoch", sandbox.Complete, "\n   AND epoch = :epoch", "", experiments.ReqCompleteFence},
	{"the complete's owner (the epoch covers it)", sandbox.Complete, "\n   AND owner = :owner", "", ""},
	{"the complete's owner and epoch", sandbox.Complete, "\n   AND owner = :owner\n   AND epoch = :epoch", "", experiments.ReqCompleteFence},
	{"the complete's status (the epoch covers it)", sandbox.Complete, "\n   AND status = 'running'", "", ""},
	{"the complete's status and epoch", sandbox.Complete, "\n   AND status = 'running'\n   AND owner = :owner\n   AND epoch = :epoch", "\n   AND owner = :owner", experiments.ReqCompleteFence},
	{"the complete's id", sandbox.Complete, "WHERE id = :id\n   AND ", "WHERE :id > 0 AND ", experiments.ReqOwnRow},
	{"the fail's epoch", sandbox.Fail, "\n   AND epoch = :epoch", "", experiments.ReqFailFence},
	{"the fail's owner (the epoch covers it)", sandbox.Fail, "\n   AND owner = :owner", "", ""},
	{"the fail's owner and epoch", sandbox.Fail, "\n   AND owner = :owner\n   AND epoch = :epoch", "", experiments.ReqFailFence},
	{"the fail's id", sandbox.Fail, "WHERE id = :id\n   AND ", "WHERE :id > 0 AND ", experiments.ReqOwnRow},
	{"the fail's retry", sandbox.Fail, "CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END", "'failed'", experiments.ReqFailRetries},
	{"the fail's last attempt", sandbox.Fail, "CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END", "'pending'", experiments.ReqFailRetries},
	{"the receiver's epoch condition", sandbox.Receiver, "\n WHERE held.epoch <= EXCLUDED.epoch", "", experiments.ReqReceiverOlder},
	{"<= for <, in the receiver", sandbox.Receiver, "held.epoch <= EXCLUDED.epoch", "held.epoch < EXCLUDED.epoch", experiments.ReqReceiverSame},
}

// TestCheck_EveryClauseIsNamed is the check's own mutation test: each
// clause of our solution removed in turn, the check fails and names first
// the requirement that clause keeps; a clause that another covers passes
// alone and is named with it; a clause beyond the article's five (the
// fail's retry) passes with a note naming it. Ours passes (TestCheck_OursPassesAndTheStartFails).
func TestCheck_EveryClauseIsNamed(t *testing.T) {
	w := world(t)
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			sol := sandbox.Ours()
			text := sol.Text(m.kind)
			if !strings.Contains(text, m.old) {
				t.Fatalf("our %s has no %q:\n%s", m.kind, m.old, text)
			}
			sol = sol.With(m.kind, strings.Replace(text, m.old, m.new, 1))
			rep := run(t, w, sol)
			t.Logf("%s; broken %v", rep.Words, brokenNames(rep))
			if m.want == "" {
				if !rep.Pass {
					t.Fatalf("without %s the check fails, naming %v: another clause was to cover it", m.name, brokenNames(rep))
				}
				return
			}
			if m.want.Beyond() { // fencelab's, beyond the article: a note, and a pass
				if !rep.Pass || len(rep.Beyond) == 0 || rep.Beyond[0].Requirement != m.want {
					t.Fatalf("without %s: pass %v, broken %v, beyond %v; want a pass with %s beyond the article", m.name, rep.Pass, brokenNames(rep), rep.Beyond, m.want)
				}
				return
			}
			if rep.Pass {
				t.Fatalf("without %s the check passes", m.name)
			}
			// First: what the check names first is what the page tells the
			// reader to fix next.
			if len(rep.Broken) == 0 || rep.Broken[0].Requirement != m.want {
				t.Fatalf("without %s the check names %v, not %s first", m.name, brokenNames(rep), m.want)
			}
		})
	}
}

// TestCheck_TheChallengeInTheArticlesOrder plays the article's challenge
// as a reader would, from the leases-alone start: each requirement added
// in turn, checking after each, every check names first the next one
// missing, and the last passes. Then SKIP LOCKED dropped is named, and so
// is the start's unfenced fail put back.
func TestCheck_TheChallengeInTheArticlesOrder(t *testing.T) {
	w := world(t)
	start, ours := sandbox.Start(), sandbox.Ours()
	type step struct {
		name string
		sol  sandbox.Solution
		want experiments.Requirement // named first; "" : passes
	}
	// Each step's solution is the one before it with one more of ours:
	// known beforehand, so the checks run side by side.
	var steps []step
	sol := start
	for _, s := range []struct {
		add  sandbox.Kind
		want experiments.Requirement // named first before the step is taken
	}{
		{sandbox.Claim, experiments.ReqEpochRaised},
		{sandbox.Complete, experiments.ReqCompleteFence},
		{sandbox.Fail, experiments.ReqFailFence},
		{sandbox.Receiver, experiments.ReqReceiverOlder},
	} {
		steps = append(steps, step{"before ours's " + s.add.String(), sol, s.want})
		sol = sol.With(s.add, ours.Text(s.add))
	}
	steps = append(steps,
		step{"every requirement added", sol, ""},
		step{"then SKIP LOCKED dropped", sol.With(sandbox.Claim, strings.Replace(ours.Claim, "FOR UPDATE SKIP LOCKED", "FOR UPDATE", 1)), experiments.ReqSkipLocked},
		step{"then the fail unfenced", sol.With(sandbox.Fail, start.Fail), experiments.ReqFailFence})
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			rep := run(t, w, s.sol)
			t.Logf("%s broken: %v", rep.Words, brokenNames(rep))
			switch {
			case s.want == "" && !rep.Pass:
				t.Fatalf("the check fails: %v", brokenNames(rep))
			case s.want != "" && (rep.Pass || len(rep.Broken) == 0 || rep.Broken[0].Requirement != s.want):
				t.Fatalf("pass %v, broken %v; want %s first", rep.Pass, brokenNames(rep), s.want)
			}
		})
	}
}

// TestRequirements_AsREFERENCEQuotesTheArticle: REFERENCE's table of the
// article's five requirements puts each of the check's requirements under
// the rule it is a clause of, and what fencelab asks beyond them under
// "beyond", as experiments.Requirement.Rule says.
func TestRequirements_AsREFERENCEQuotesTheArticle(t *testing.T) {
	section := servertest.ReferenceSection(t, "## Check it, in detail")
	rows := map[string][]string{} // requirement → the rule column of each row naming it
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 5 {
			continue
		}
		rule := strings.TrimSpace(cells[1])
		if _, err := strconv.Atoi(rule); err != nil && rule != "beyond" {
			continue
		}
		for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(cells[3], -1) {
			rows[m[1]] = append(rows[m[1]], rule)
		}
	}
	for _, q := range experiments.RequirementOrder {
		want := strconv.Itoa(q.Rule())
		if q.Beyond() {
			want = "beyond"
		}
		if got := rows[string(q)]; len(got) != 1 || got[0] != want {
			t.Errorf("%s is under rules %q in REFERENCE's table, want %q alone", q, got, want)
		}
	}
	if len(rows) != len(experiments.RequirementOrder) {
		t.Errorf("REFERENCE's table names %d requirements, the check has %d: %v", len(rows), len(experiments.RequirementOrder), rows)
	}
}
