package nemesis

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"

	"github.com/fencelab/fencelab/engine"
)

// Round is one run of a queue's worker processes to the end of their
// jobs, under the nemesis or not.
type Round struct {
	// Workers are the worker processes to start (see Start): programs that
	// speak the protocol of Serve.
	Workers []*exec.Cmd
	// Nemesis is the schedule to run them under; nil runs none.
	Nemesis *Schedule
	// DB reads the database clock when the workers are told to go.
	DB engine.DB
	// UnfinishedFunc counts the jobs not yet finished; the round ends when
	// it says none. It is polled every 20 ms.
	UnfinishedFunc func(ctx context.Context) (int, error)
	// Timeout bounds the round from the go to the last job. Default 3 min.
	Timeout time.Duration
	// StopTimeout bounds the workers' stop once the jobs are done, before
	// they are killed. Default 30 s.
	StopTimeout time.Duration
}

// RoundResult is what a round did; its verdict is read from SQL after it.
type RoundResult struct {
	Start time.Time // the database clock when the workers were told to go
	Stats Stats     // the nemesis's freezes; zero without one
}

// Run starts the workers, waits until all are ready, tells them to go and
// runs the nemesis until no job is unfinished, then stops the nemesis
// (which thaws every worker it froze) and stops the workers. When Run
// returns, every worker has exited: by itself, or killed when it did not.
func (r Round) Run(ctx context.Context) (RoundResult, error) {
	if r.Timeout == 0 {
		r.Timeout = 3 * time.Minute
	}
	if r.StopTimeout == 0 {
		r.StopTimeout = 30 * time.Second
	}
	g, err := Start(r.Workers)
	if err != nil {
		return RoundResult{}, err
	}
	defer g.Kill()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = g.Ready(rctx)
	cancel()
	if err != nil {
		return RoundResult{}, err
	}
	var res RoundResult
	if res.Start, err = DBNow(ctx, r.DB); err != nil {
		return RoundResult{}, err
	}
	if err := g.Go(); err != nil {
		return RoundResult{}, err
	}
	nctx, stopNemesis := context.WithCancel(ctx)
	defer stopNemesis()
	type ran struct {
		st  Stats
		err error
	}
	nemesis := make(chan ran, 1)
	if r.Nemesis != nil {
		go func() {
			st, err := r.Nemesis.Run(nctx, g)
			nemesis <- ran{st, err}
		}()
	} else {
		nemesis <- ran{}
	}
	waitErr := r.wait(ctx, g)
	stopNemesis()
	n := <-nemesis
	res.Stats = n.st
	stopErr := g.Stop(r.StopTimeout)
	if err := errors.Join(waitErr, n.err, stopErr); err != nil {
		return res, err
	}
	return res, nil
}

// pollEvery is how often wait counts the unfinished jobs. The count reads
// the whole table (22 ms a time at 50,000 jobs, measured with
// pg_stat_statements), on the cores the queue under test needs, and the
// ceiling's pgbench runs with no such poll; the rate is taken from the
// jobs' own timestamps, so a later poll only ends the round a little
// later, and changes no figure.
const pollEvery = 100 * time.Millisecond

// wait polls until no job is unfinished; it fails if a worker exits first.
func (r Round) wait(ctx context.Context, g *Group) error {
	deadline := time.Now().Add(r.Timeout)
	left := -1
	for {
		n, err := r.UnfinishedFunc(ctx)
		if err != nil {
			return fmt.Errorf("count the unfinished jobs: %w", err)
		}
		if n == 0 {
			return nil
		}
		left = n
		for i := range g.Len() {
			if !g.Alive(i) {
				return fmt.Errorf("worker %d exited with %d jobs unfinished", i, left)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d jobs still unfinished after %v", left, r.Timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}
