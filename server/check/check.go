// Package check is the article's Step 3, "Check it", for a reader's own
// four statements: each case (lab.CheckCases) is a scripted run of real
// worker processes that run the reader's claim, complete and fail, and a
// receiver that runs their rule, all as a Postgres role made for that run
// (server/sandbox). What each run came to is read from the database and
// the receiver's log (lab.Evaluate), and lab.JudgeCheck names what the
// solution breaks. It has no HTTP and no flags: `fencelab check` and the
// playground's "check" command use it.
package check

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/lab"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/notify"
	"github.com/fencelab/fencelab/server/receiver"
	"github.com/fencelab/fencelab/server/runner"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/supervisor"
	"github.com/fencelab/fencelab/server/wire"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultLease is a check's lease: every case waits for it to run out
// once, so it is short; long enough that a stalled step is not mistaken
// for an expiry.
const DefaultLease = time.Second

// Config is one check.
type Config struct {
	Env      *runner.Env
	Solution sandbox.Solution
	Lease    time.Duration        // default DefaultLease
	Cases    []lab.CheckCase      // default lab.CheckCases()
	Prefix   string               // names the cases' schemas (prefix_<case>_j, …); default "fl_check_<random>"
	EmitFunc func(lab.Event)      // every event of every case's run, if set
	Parallel int                  // cases at once; default 1
	OnCase   func(lab.CheckInput) // after each case, if set
}

// Validate checks a solution's four statements on throwaway schemas and
// a throwaway role (sandbox's Check), then runs each once on a job of its
// own and rolls it back (Try), and leaves nothing behind: the first refusal is a
// *sandbox.Error (bad input), any other error is the database's. It is
// what lets a caller refuse a solution before it starts a single run.
//
// It also probes the receiver's rule alone (lab.ReceiverProbe: a first
// delivery, a newer epoch, the same epoch again, an older one) and the
// claim, complete and fail on tables set up for it (probeStatements: two
// claimers at once, an expired lease, the holder's own fail, another job
// in the table), and returns what they showed, for
// CheckReport.WithProbes.
func Validate(ctx context.Context, pool *pgxpool.Pool, prefix string, sol sandbox.Solution) (probes lab.Probes, err error) {
	s := lab.Schemas{Jobs: prefix + "_j", Receiver: prefix + "_r"}
	if err := s.Validate(); err != nil {
		return lab.Probes{}, err
	}
	if err := lab.Setup(ctx, pool, s); err != nil {
		return lab.Probes{}, fmt.Errorf("check the statements: set up: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = lab.Drop(dctx, pool, s)
	}()
	role, err := sandbox.NewRole(ctx, pool, s)
	if err != nil {
		return lab.Probes{}, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = role.Drop(dctx, pool)
	}()
	st, err := role.CheckSolution(ctx, sol)
	if err != nil {
		return lab.Probes{}, err
	}
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: s.Jobs})
	if err != nil {
		return lab.Probes{}, err
	}
	// The trial's job is a run's: the same payload and attempts, and, as
	// each run's, job 1 of a fresh table. Try runs each statement as a
	// run's worker A would, under the same lease. Yet a statement can
	// still tell the trial apart (by its schema's or role's name, say);
	// nothing rests on the trial but refusing a statement that errors
	// early: a statement that behaves in it alone fails the runs.
	if _, err := q.Insert(ctx, []byte(runner.JobPayload), 0); err != nil {
		return lab.Probes{}, fmt.Errorf("check the statements: %w", err)
	}
	if err := role.Try(ctx, st); err != nil {
		return lab.Probes{}, err
	}
	if probes.Receiver, err = probeReceiver(ctx, role, st.Receiver); err != nil {
		return lab.Probes{}, err
	}
	if _, err := q.Insert(ctx, []byte(`{"task":"a second job"}`), 1); err != nil {
		return lab.Probes{}, fmt.Errorf("check the statements: %w", err)
	}
	if probes.Statements, err = probeStatements(ctx, pool, s, role, st); err != nil {
		return lab.Probes{}, err
	}
	return probes, nil
}

// probeReceiver sends the receiver's rule the probe's deliveries, one by
// one, as the role, and says which it took.
func probeReceiver(ctx context.Context, role *sandbox.Role, st *sandbox.Checked) ([]bool, error) {
	rule, closeRule := role.ReceiverRule(st)
	defer closeRule()
	var taken []bool
	for _, d := range lab.ReceiverProbe() {
		body, _ := json.Marshal(lab.Result{Worker: d.From, Owner: d.Owner, JobID: d.JobID, Epoch: d.Epoch, Output: "the receiver's probe"})
		took, _, err := rule(ctx, engine.Delivery{JobID: d.JobID, Epoch: d.Epoch, Owner: d.Owner, Payload: body})
		if err != nil {
			return nil, err
		}
		taken = append(taken, took)
	}
	return taken, nil
}

// Run checks a solution: it validates it, then plays each case and
// judges them. A refused statement is a *sandbox.Error, and no case runs.
// The report lists every case, in order, also those that could not run.
func Run(ctx context.Context, cfg Config) (lab.CheckReport, error) {
	if cfg.Env == nil || cfg.Env.Pool == nil {
		return lab.CheckReport{}, errors.New("check: Config needs an Env with a Pool")
	}
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	if len(cfg.Cases) == 0 {
		cfg.Cases = lab.CheckCases()
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "fl_check_" + randomHex(4)
	}
	if cfg.Parallel < 1 {
		cfg.Parallel = 1
	}
	probes, err := Validate(ctx, cfg.Env.Pool, cfg.Prefix+"_v", cfg.Solution)
	if err != nil {
		return lab.CheckReport{}, err
	}
	inputs := make([]lab.CheckInput, len(cfg.Cases))
	sem := make(chan struct{}, cfg.Parallel)
	done := make(chan int, len(cfg.Cases))
	for i, c := range cfg.Cases {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; done <- i }()
			inputs[i] = playCase(ctx, cfg, i, c)
			if cfg.OnCase != nil {
				cfg.OnCase(inputs[i])
			}
		}()
	}
	for range cfg.Cases {
		<-done
	}
	if err := ctx.Err(); err != nil {
		return lab.CheckReport{}, err
	}
	rep := lab.JudgeCheck(inputs)
	rep.WithProbes(probes)
	return rep, nil
}

// playCase plays one case's run to its verdict.
func playCase(ctx context.Context, cfg Config, i int, c lab.CheckCase) lab.CheckInput {
	in := lab.CheckInput{Case: c, Run: fmt.Sprintf("c%d", i+1)}
	rc := c.Config(cfg.Lease)
	if err := rc.Validate(); err != nil {
		in.Err = &lab.Failure{Code: string(fault.CodeOf(err)), Message: err.Error()}
		return in
	}
	sol := cfg.Solution
	emit := cfg.EmitFunc
	if emit == nil {
		emit = func(lab.Event) {}
	}
	spec := runner.Spec{ID: in.Run, Config: rc, Mode: lab.ModeAuto, Solution: &sol,
		Schemas:  lab.Schemas{Jobs: fmt.Sprintf("%s_%d_j", cfg.Prefix, i+1), Receiver: fmt.Sprintf("%s_%d_r", cfg.Prefix, i+1)},
		EmitFunc: emit}
	// A run's Done is closed before it has given back its schemas and
	// role; its OnEndFunc, once it has.
	cleaned := make(chan struct{})
	spec.OnEndFunc = func(*runner.Run) { close(cleaned) }
	r, err := runner.New(cfg.Env, spec)
	if err != nil {
		in.Err = &lab.Failure{Code: string(fault.CodeOf(err)), Message: fault.MessageOf(err)}
		return in
	}
	if err := r.Start(ctx); err != nil {
		<-cleaned
		in.Err = &lab.Failure{Code: string(fault.CodeOf(err)), Message: fault.MessageOf(err)}
		return in
	}
	select {
	case <-r.Done():
	case <-ctx.Done():
		r.Stop(lab.StopShutdown)
	}
	<-cleaned
	in.Outcome = r.Outcome()
	if in.Outcome == nil {
		in.Err = failureOf(r)
	}
	return in
}

// failureOf says why a run ended without an outcome.
func failureOf(r *runner.Run) *lab.Failure {
	if f := r.Info().Error; f != nil {
		return f
	}
	return &lab.Failure{Code: "no-outcome", Message: "the run ended without a verdict"}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// World is what a check's runs run in when no server holds them: the
// database, a loopback HTTP server for the runs' receivers, a worker
// supervisor and the row listener. Close tears it down.
type World struct {
	Env     runner.Env
	closers []func()
}

// Close stops everything OpenWorld started, last first.
func (w *World) Close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
	w.closers = nil
}

// OpenWorld readies a world on pool, whose database the workers reach at
// dsn; exe is the fencelab binary the workers run ("" for this process's
// own). It hardens the database (sandbox.Harden): only call it on a
// database that is fencelab's own.
func OpenWorld(ctx context.Context, pool *pgxpool.Pool, dsn, exe string, log *slog.Logger) (*World, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := sandbox.Harden(ctx, pool); err != nil {
		return nil, err
	}
	w := &World{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	receivers := receiver.NewRegistry("http://" + ln.Addr().String() + "/receiver")
	e := wire.NewEcho(log)
	receivers.Register(e.Group("/receiver"))
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	w.closers = append(w.closers, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	sup, err := supervisor.New(supervisor.Config{Exe: exe, Log: log})
	if err != nil {
		w.Close()
		return nil, err
	}
	w.closers = append(w.closers, func() { _ = sup.Close() })
	nt := notify.New(notify.Connector(dsn, "fencelab check listener"), log)
	w.closers = append(w.closers, nt.Close)
	w.Env = runner.Env{Pool: pool, DatabaseURL: dsn, Supervisor: sup, Notify: nt, Receivers: receivers, Log: log, Clock: &runner.DBClock{Pool: pool}}
	return w, nil
}

// ReceiverOf returns a maker of receivers that run a reader's receiver
// statement as a role made on each case's schemas (checked there first),
// for a check of a reader's worker program (harness.Config's
// NewReceiverFunc). The func each returns closes its connection and
// drops its role.
func ReceiverOf(pool *pgxpool.Pool, text string) func(ctx context.Context, s lab.Schemas) (*engine.Receiver, func(), error) {
	return func(ctx context.Context, s lab.Schemas) (*engine.Receiver, func(), error) {
		role, err := sandbox.NewRole(ctx, pool, s)
		if err != nil {
			return nil, nil, err
		}
		drop := func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = role.Drop(dctx, pool)
		}
		st, err := role.Check(ctx, sandbox.Receiver, text)
		if err != nil {
			drop()
			return nil, nil, err
		}
		rule, closeRule := role.ReceiverRule(st)
		rcv, err := engine.NewReceiver(pool, engine.ReceiverConfig{Schema: s.Receiver, Rule: rule})
		if err != nil {
			closeRule()
			drop()
			return nil, nil, err
		}
		return rcv, func() { closeRule(); drop() }, nil
	}
}
