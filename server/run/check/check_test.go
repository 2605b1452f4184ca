package check_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/check"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/sandbox/sandboxtest"
	"github.com/fencelab/fencelab/server/servertest"
)

// TestMain gives the tests one Postgres, and removes the fencelab binary
// servertest built for the worker processes once they are done (a defer
// would not run: pgtest.Main exits).
func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	servertest.Cleanup()
	os.Exit(code)
}

func world(t *testing.T) *check.World {
	t.Helper()
	w, err := check.OpenWorld(context.Background(), pgtest.Pool(t), pgtest.DSN(t), servertest.Binary(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func run(t *testing.T, w *check.World, sol sandbox.Solution) protocol.CheckReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := check.Run(ctx, check.Config{Env: &w.Env, Solution: sol, Prefix: pgtest.Schema(t), Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func brokenNames(rep protocol.CheckReport) []string {
	var out []string
	for _, b := range rep.Broken {
		out = append(out, string(b.Requirement))
	}
	return out
}

func caseOK(rep protocol.CheckReport) map[experiments.CheckCase]bool {
	m := map[experiments.CheckCase]bool{}
	for _, c := range rep.Cases {
		m[c.Case] = c.OK
	}
	return m
}

// Our own statements, in the reader's terms, pass every case; the
// leases-alone start the page begins with fails the article's orderings,
// and the requirement named first is the epoch it never raises.
func TestCheck_OursPassesAndTheStartFails(t *testing.T) {
	w := world(t)
	ours := run(t, w, sandbox.Ours())
	if !ours.Pass {
		t.Fatalf("ours does not pass: %s\n%+v", ours.Words, ours.Cases)
	}
	if len(ours.Cases) != len(experiments.CheckCases()) || len(ours.Broken) != 0 {
		t.Fatalf("ours: %d cases, broken %v", len(ours.Cases), brokenNames(ours))
	}
	start := run(t, w, sandbox.Start())
	ok := caseOK(start)
	if start.Pass || ok[experiments.CaseNewOwnerFirst] || ok[experiments.CaseZombieFirst] {
		t.Fatalf("the leases-alone start passes the article's orderings: %+v", ok)
	}
	// Leases alone: no epoch anywhere, so the first thing named is the
	// first the reader adds, requirement 2.
	if got := brokenNames(start); len(got) == 0 || got[0] != string(experiments.ReqEpochRaised) {
		t.Fatalf("the start's broken requirements %v do not name %s first", got, experiments.ReqEpochRaised)
	}
	t.Logf("start: %s broken: %v", start.Words, brokenNames(start))
}

// A claim that does not raise the epoch, with our complete, fail and
// receiver: both claims hold epoch 1, and the check says so.
func TestCheck_AClaimThatKeepsTheEpochIsNamed(t *testing.T) {
	w := world(t)
	sol := sandbox.Ours()
	sol.Claim = strings.Replace(sol.Claim, "       epoch = epoch + 1,\n", "", 1)
	if sol.Claim == sandbox.Ours().Claim {
		t.Fatal("the claim still raises the epoch")
	}
	rep := run(t, w, sol)
	if rep.Pass {
		t.Fatalf("a claim that keeps the epoch passes: %+v", rep.Cases)
	}
	var found *experiments.CheckBroken
	for i, b := range rep.Broken {
		if b.Requirement == experiments.ReqEpochRaised {
			found = &rep.Broken[i]
		}
	}
	if found == nil {
		t.Fatalf("broken %v does not name %s", brokenNames(rep), experiments.ReqEpochRaised)
	}
	if !strings.Contains(found.Words, "both claims held epoch") {
		t.Fatalf("its words %q do not say what happened", found.Words)
	}
	// Our complete compares the epoch: a late write that matched the one
	// token both owners shared is the claim's doing, and nothing else is
	// blamed.
	if got := brokenNames(rep); len(got) != 1 {
		t.Fatalf("broken %v: want %s alone", got, experiments.ReqEpochRaised)
	}
}

// A statement that does not prepare is refused before any run starts.
func TestCheck_ARefusedStatementRunsNothing(t *testing.T) {
	w := world(t)
	sol := sandbox.Ours()
	sol.Complete = "UPDATE jobs SET status = 'done' WHERE"
	ctx := context.Background()
	_, err := check.Run(ctx, check.Config{Env: &w.Env, Solution: sol, Prefix: pgtest.Schema(t)})
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Kind != sandbox.Complete || se.Code != sandbox.CodeSyntax {
		t.Fatalf("err = %v, want a syntax refusal of the complete", err)
	}
}

// A receiver that refuses the same epoch again ("<" for "<="): no run of
// the five sends one epoch twice, so every case ends as the table says;
// the receiver's probe alone shows it, and the check does not pass.
func TestCheck_AReceiverThatRefusesARetryIsNamed(t *testing.T) {
	w := world(t)
	sol := sandbox.Ours()
	sol.Receiver = strings.Replace(sol.Receiver, "held.epoch <= EXCLUDED.epoch", "held.epoch < EXCLUDED.epoch", 1)
	if sol.Receiver == sandbox.Ours().Receiver {
		t.Fatal("the receiver still accepts the same epoch")
	}
	rep := run(t, w, sol)
	for _, c := range rep.Cases {
		if !c.OK {
			t.Fatalf("case %s fails; only the probe should: %+v", c.Case, c.Broken)
		}
	}
	if rep.Pass || len(rep.Broken) != 1 || rep.Broken[0].Requirement != experiments.ReqReceiverSame || rep.Broken[0].Case != experiments.CaseReceiver {
		t.Fatalf("pass %v, broken %+v: want %s from the receiver alone", rep.Pass, rep.Broken, experiments.ReqReceiverSame)
	}
}

// Ours with the start's unfenced fail (… WHERE id = :id): every case that
// completes passes, and the zombie-fails case names the fail. So does a
// fail that touches every job and sends the epoch backwards, and the
// probes name, after it, that it changes another job's row, and in a note
// beyond the article that it never retries.
func TestCheck_AnUnfencedFailIsNamed(t *testing.T) {
	w := world(t)
	for _, tc := range []struct {
		fail         string
		want, beyond []experiments.Requirement
	}{
		{sandbox.Start().Fail, []experiments.Requirement{experiments.ReqFailFence}, nil},
		{"UPDATE jobs SET status = 'done', error = :error, epoch = 0 WHERE true AND :id > 0 AND :owner <> '' AND :epoch > 0",
			[]experiments.Requirement{experiments.ReqFailFence, experiments.ReqOwnRow}, []experiments.Requirement{experiments.ReqFailRetries}},
	} {
		sol := sandbox.Ours()
		sol.Fail = tc.fail
		rep := run(t, w, sol)
		ok := caseOK(rep)
		t.Logf("%s broken: %v", rep.Words, brokenNames(rep))
		if rep.Pass || ok[experiments.CaseZombieFails] {
			t.Fatalf("an unfenced fail passes: %+v", ok)
		}
		for c, pass := range ok {
			if c != experiments.CaseZombieFails && !pass {
				t.Errorf("%s fails with our complete: %+v", c, rep.Cases)
			}
		}
		if got, want := fmt.Sprint(brokenNames(rep)), fmt.Sprint(tc.want); got != want {
			t.Errorf("broken %v: want %v", got, want)
		}
		var beyond []experiments.Requirement
		for _, b := range rep.Beyond {
			beyond = append(beyond, b.Requirement)
		}
		if got, want := fmt.Sprint(beyond), fmt.Sprint(tc.beyond); got != want {
			t.Errorf("beyond the article %v: want %v", got, want)
		}
	}
}

// Two claimers at once: ours gives each its own job at once. A claim
// without SKIP LOCKED waits on the first claimer's lock, and one with no
// lock at all on the row the first one's UPDATE holds: each is named, with
// our complete, fail and receiver, which pass every case.
func TestCheck_AClaimWithoutSkipLockedIsNamed(t *testing.T) {
	w := world(t)
	for _, tc := range []struct{ name, old, new string }{
		{"FOR UPDATE without SKIP LOCKED", "FOR UPDATE SKIP LOCKED", "FOR UPDATE"},
		{"no lock", "FOR UPDATE SKIP LOCKED", ""},
	} {
		sol := sandbox.Ours()
		sol.Claim = strings.Replace(sol.Claim, tc.old, tc.new, 1)
		if sol.Claim == sandbox.Ours().Claim {
			t.Fatalf("%s: the claim did not change", tc.name)
		}
		rep := run(t, w, sol)
		t.Logf("%s: %s broken: %v", tc.name, rep.Words, brokenNames(rep))
		if rep.Pass {
			t.Errorf("%s passes", tc.name)
			continue
		}
		var found *experiments.CheckBroken
		for i, b := range rep.Broken {
			if b.Requirement == experiments.ReqSkipLocked {
				found = &rep.Broken[i]
			}
		}
		if found == nil || found.Case != experiments.CaseClaimers || !strings.Contains(found.Words, "SKIP LOCKED") {
			t.Errorf("%s: broken %+v does not name %s", tc.name, rep.Broken, experiments.ReqSkipLocked)
		}
	}
}

// A claim that runs past the statement timeout for worker B alone (so
// that its trial run, as another owner, passes): every case where B
// claims ends on the timeout, the fact travels from the worker's refused
// statement through the run's failure (its SQLSTATE, not its words), and
// each such case is played again as a run of its own, and says so.
func TestCheck_ACaseEndedByTheStatementTimeoutIsPlayedAgain(t *testing.T) {
	w := world(t)
	sol := sandboxtest.SlowClaimFor("worker-b")
	rep := run(t, w, sol)
	again := 0
	for _, c := range rep.Cases {
		if c.Error == nil {
			continue
		}
		if !c.Error.TimedOut() {
			t.Errorf("%s ended with %+v: want the statement timeout's SQLSTATE on its failure", c.Case, c.Error)
			continue
		}
		again++
		if !strings.HasSuffix(c.Run, "b") || !slices.Contains(c.Notes, check.NoteTimedOutTwice) {
			t.Errorf("%s: run %q, notes %q; want its second play (…b) and the note", c.Case, c.Run, c.Notes)
		}
	}
	if again == 0 || rep.Pass {
		t.Fatalf("no case ran past the timeout (pass %v): %+v", rep.Pass, rep.Cases)
	}
}
