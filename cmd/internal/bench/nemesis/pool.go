package nemesis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/fencelab/fencelab/engine"
)

// PoolRun is one round of fencelab worker processes (PoolWorker) on a
// queue of its own: set up, filled, worked to the end, judged.
type PoolRun struct {
	// Exe and Args start a worker process: a program that calls
	// WorkerMain first thing (a test binary re-executed, say). Env is added
	// to the environment it inherits.
	Exe  string
	Args []string
	Env  []string
	// Workers is the number of worker processes, Jobs the jobs inserted,
	// each allowed MaxAttempts claims (default 25, so that no stall
	// exhausts one).
	Workers, Jobs, MaxAttempts int
	// Worker is every worker's config; each gets an Owner of its own.
	// Worker.Schema is dropped and set up again first; the caller drops it.
	Worker WorkerConfig
	// Nemesis is the schedule; nil runs the round without one.
	Nemesis *Schedule
}

// Outcome is a round's result and verdict.
type Outcome struct {
	RoundResult
	Verdict
	Elapsed time.Duration // from the go to the last job recorded, on the database clock
}

// PerSecond is the round's jobs per second.
func (o Outcome) PerSecond() float64 {
	if o.Elapsed <= 0 {
		return 0
	}
	return float64(o.Done+o.Failed) / o.Elapsed.Seconds()
}

// Run sets up the queue, inserts the jobs, runs the round and reads its
// verdict. An error means the round could not be judged (a worker failed,
// the jobs never finished); a verdict that shows zombies is not an error.
func (p PoolRun) Run(ctx context.Context, db engine.TxDB) (Outcome, error) {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 25
	}
	schema := p.Worker.Schema
	if err := engine.DropQueue(ctx, db, schema); err != nil {
		return Outcome{}, err
	}
	if err := engine.SetupQueue(ctx, db, schema); err != nil {
		return Outcome{}, err
	}
	if err := SetupEffects(ctx, db, schema); err != nil {
		return Outcome{}, err
	}
	if err := Insert(ctx, db, schema, p.Jobs, p.MaxAttempts); err != nil {
		return Outcome{}, err
	}
	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
	var cmds []*exec.Cmd
	for i := range p.Workers {
		cfg := p.Worker
		cfg.Owner = fmt.Sprintf("w%d-%s-%s", i, run, suffix())
		env, err := cfg.Env()
		if err != nil {
			return Outcome{}, err
		}
		c := exec.Command(p.Exe, p.Args...)
		c.Env = append(append(os.Environ(), p.Env...), env)
		cmds = append(cmds, c)
	}
	res, err := Round{Workers: cmds, Nemesis: p.Nemesis, DB: db,
		UnfinishedFunc: func(ctx context.Context) (int, error) { return Unfinished(ctx, db, schema) }}.Run(ctx)
	if err != nil {
		return Outcome{RoundResult: res}, err
	}
	v, err := Judge(ctx, db, schema)
	if err != nil {
		return Outcome{RoundResult: res}, err
	}
	return Outcome{RoundResult: res, Verdict: v, Elapsed: v.Last.Sub(res.Start)}, nil
}

// suffix returns a few random hex digits, so that no owner is reused.
func suffix() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
