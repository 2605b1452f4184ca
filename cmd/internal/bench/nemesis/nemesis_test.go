package nemesis_test

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/fencelab/fencelab/cmd/internal/bench/nemesis"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
)

// The test binary doubles as the worker processes (Go's os/exec helper
// process pattern): re-executed with nemesis.WorkerEnv set, it is a
// fencelab worker and never reaches the tests.
func TestMain(m *testing.M) {
	nemesis.WorkerMain()
	pgtest.Main(m)
}

var (
	jobsFlag  = flag.Int("nemesis.jobs", 5000, "jobs of each run, as in the issue")
	seedFlag  = flag.Uint64("nemesis.seed", 0, "the nemesis's seed (0: a new one, logged)")
	breakFlag playground.Guards
)

func init() {
	flag.Var(&breakFlag, "nemesis.break", "guards to break in the workers, to see the test fail (status-check,owner-check,epoch-check)")
}

// The run: 4 worker processes, a 300 ms lease, a worker frozen
// every ~100 ms for the lease plus 50 to 500 ms, at most 2 at once.
const (
	workers     = 4
	lease       = 300 * time.Millisecond
	concurrency = 50 // handlers per worker process
	batch       = 50 // jobs per claim and completion statement
)

func seed(t testing.TB) uint64 {
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("nemesis seed %d (replay with -nemesis.seed %d)", s, s)
	return s
}

// poolRun is a round of worker processes (this test binary) on a fresh
// queue schema, which pgtest drops after the test (or keeps, and logs,
// when it failed).
func poolRun(tb testing.TB, jobs int, schedule *nemesis.Schedule, broken playground.Guards) nemesis.PoolRun {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	return nemesis.PoolRun{Exe: exe, Args: []string{"-test.run=^$"}, Workers: workers, Jobs: jobs,
		Worker: nemesis.WorkerConfig{DSN: pgtest.DSN(tb), Schema: pgtest.Schema(tb), Concurrency: concurrency,
			BatchSize: batch, Lease: lease, Broken: broken},
		Nemesis: schedule}
}

// TestNemesis_FencedPool_NoZombieCompletes runs engine.WorkerPool in 4
// worker processes under the nemesis and reads the verdict from SQL once
// they have all stopped: every job done exactly once, with the final
// epoch's result; no fenced effect from a superseded claim; no job stuck
// or lost; and the nemesis really bit (jobs were reclaimed). With the
// compare-and-set broken (-nemesis.break status-check,owner-check,epoch-check)
// it fails: zombies' completions land on jobs another claim finished. With
// the owner and epoch checks alone broken it may pass: the status check
// then still refuses a zombie that wakes after the new owner's commit, and
// the pool's own lease timer cancels a handler that wakes past its lease.
func TestNemesis_FencedPool_NoZombieCompletes(t *testing.T) {
	ctx := context.Background()
	db := pgtest.Pool(t)
	run := poolRun(t, *jobsFlag, &nemesis.Schedule{Lease: lease, Seed: seed(t)}, breakFlag)
	if breakFlag != 0 {
		t.Logf("the workers' queue runs with %v on purpose: this test must fail", breakFlag)
	}
	o, err := run.Run(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	v := o.Verdict
	t.Logf("%d jobs in %v: %.0f jobs/s; %d freezes (%d at most at once); %d jobs reclaimed (epoch up to %d); "+
		"%d zombie completions; %d stale external effects of %d",
		o.Done, o.Elapsed.Round(time.Millisecond), o.PerSecond(), len(o.Stats.Freezes), o.Stats.MaxFrozen,
		v.Reclaimed, v.MaxEpoch, v.ZombieCompletions, v.StaleEffects, v.ExternalEffects)

	if v.Jobs != run.Jobs {
		t.Errorf("lost: %d jobs in the table, %d inserted", v.Jobs, run.Jobs)
	}
	if v.Unfinished != 0 || v.Failed != 0 {
		t.Errorf("stuck: %d jobs unfinished and %d failed at the end, want 0", v.Unfinished, v.Failed)
	}
	if v.Done != run.Jobs {
		t.Errorf("%d jobs done, want all %d", v.Done, run.Jobs)
	}
	if v.ZombieCompletions != 0 {
		t.Errorf("%d zombie completions: fenced effects whose epoch or worker is not their job's final one, want 0", v.ZombieCompletions)
	}
	if v.NotOnce != 0 {
		t.Errorf("%d done jobs do not hold exactly one fenced effect", v.NotOnce)
	}
	if v.FencedEffects != v.Done {
		t.Errorf("%d fenced effects for %d done jobs", v.FencedEffects, v.Done)
	}
	if v.WrongResult != 0 {
		t.Errorf("%d jobs hold a result that is not their final epoch's", v.WrongResult)
	}
	// External effects are not fenced: a zombie's may land, and each one is
	// counted. Every done job has exactly one at its final epoch (one claim,
	// one handler), so the rest are all older; none is newer.
	if v.FutureEffects != 0 {
		t.Errorf("%d external effects are newer than their job's final epoch, or belong to no job", v.FutureEffects)
	}
	if v.StaleEffects != v.ExternalEffects-v.Done {
		t.Errorf("%d external effects, %d of them stale, for %d done jobs: the counts disagree", v.ExternalEffects, v.StaleEffects, v.Done)
	}
	// Without a stall that outlived a lease, the test proves nothing.
	if len(o.Stats.Freezes) == 0 || v.Reclaimed == 0 {
		t.Errorf("the nemesis did not bite: %d freezes, %d jobs reclaimed", len(o.Stats.Freezes), v.Reclaimed)
	}
	if o.Stats.MaxFrozen > 2 {
		t.Errorf("%d workers were frozen at once, want at most 2", o.Stats.MaxFrozen)
	}
}
