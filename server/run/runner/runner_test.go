package runner_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/check"
	"github.com/fencelab/fencelab/server/run/runner"
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

// A run that ends while one of its workers is starting — it has taken
// its place, its process is not up yet — leaves no worker behind: the
// run's end did not see that process, and it lived on, holding a
// connection, until the server went (the 215 s).
func TestRun_AWorkerStartingAsItsRunEndsIsKilled(t *testing.T) {
	w, err := check.OpenWorld(context.Background(), pgtest.Pool(t), pgtest.DSN(t), servertest.Binary(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var once sync.Once
	defer runner.SetSpawnHook(func(r *runner.Run) {
		once.Do(func() { go r.Stop(protocol.StopReset); time.Sleep(300 * time.Millisecond) })
	})()
	spec := runner.Spec{ID: "r1", Config: experiments.RunConfig{Ordering: experiments.ZombieFirst, Lease: 300 * time.Millisecond}, Mode: protocol.ModeStep,
		Schemas: judge.Schemas{Jobs: pgtest.Schema(t), Receiver: pgtest.Schema(t)}}
	r, err := runner.Open(context.Background(), &w.Env, spec)
	if err == nil {
		r.Close()
	}
	<-r2done(r)
	deadline := time.Now().Add(10 * time.Second)
	for len(w.Env.Supervisor.Procs()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers outlived their run", len(w.Env.Supervisor.Procs()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func r2done(r *runner.Run) <-chan struct{} {
	if r == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return r.Done()
}
