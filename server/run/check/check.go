// Package check is the article's Step 3, "Check it", and the one owner
// of every check, from its turn to its report: Start takes a check whose
// turn has come in its line (a Turn: the server's line in memory, or a
// class's in Postgres; none for the CLI), holds its lease to one rule
// (Lease) and its statements to their trial (Validate), and the
// Checking's Play plays and judges its cases, then gives the turn back.
// Play is its one pipeline: it plays each case (experiments.CheckCases,
// defined once in the lab, each played from the runner's script of it)
// with a Player, and judges
// what each came to (judge.JudgeCheck) with what the statements' probes
// showed (Validate). Three Players play the cases: Statements, a reader's
// own four statements run by real worker processes and a receiver that
// runs their rule, all as a Postgres role made for the run
// (server/sandbox); the harness's, a reader's worker program
// (cmd/internal/harness); and the session's batch, whose cells the page draws.
// What each run came to is read from the database and the receiver's log
// (judge.Evaluate), never from what a worker says. It has no HTTP and no
// flags: `fencelab check`, `fencelab check --worker`, the playground's
// "check" command and a class student's all Start a check and Play it.
package check

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/notify"
	"github.com/fencelab/fencelab/server/run/receiver"
	"github.com/fencelab/fencelab/server/run/runner"
	"github.com/fencelab/fencelab/server/run/supervisor"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultLease is a check's lease: every case waits for it to run out
// once, so it is short; long enough that a stalled step is not mistaken
// for an expiry.
const DefaultLease = time.Second

// Lease is the one rule for a check's lease, whoever sends the check (the
// CLI, a page, a class, a worker program's check): none is DefaultLease,
// and one outside experiments.CheckLease is refused, with what the field
// is called where it came from (what).
func Lease(what string, d time.Duration) (time.Duration, error) {
	if d == 0 {
		return DefaultLease, nil
	}
	return d, experiments.CheckLease.Validate(what, d)
}

// Config is one check.
type Config struct {
	Env      *runner.Env
	Solution sandbox.Solution
	Lease    time.Duration           // default DefaultLease
	Cases    []experiments.CheckCase // default experiments.CheckCases()
	Prefix   string                  // names the schemas (Statements.Prefix; prefix_v_j, _r for Validate); default "fl_check_<random>"
	EmitFunc func(protocol.Event)    // every event of every case's run, if set
	OnRun    func(protocol.RunInfo)  // each case's run as it ended, if set (Statements.OnRun)
	Parallel int                     // cases at once; default 1
	OnCase   func(judge.CheckInput)  // after each case, if set
}

// Validate checks a solution's four statements on throwaway schemas and
// a throwaway role (sandbox's Role.VetSolution), then runs each once on a job of its
// own and rolls it back (Try), and leaves nothing behind: the first refusal is a
// *sandbox.Error (bad input), any other error is the database's. It is
// what lets a caller refuse a solution before it starts a single run.
//
// It also probes the receiver's rule alone (experiments.ReceiverProbe: a first
// delivery, a newer epoch, the same epoch again, an older one) and the
// claim, complete and fail on tables set up for it (probeStatements: two
// claimers at once, an expired lease, the holder's own fail, another job
// in the table), and returns what they showed, for
// CheckReport.WithProbes.
func Validate(ctx context.Context, pool *pgxpool.Pool, s judge.Schemas, sol sandbox.Solution) (probes experiments.Probes, err error) {
	if err := s.Validate(); err != nil {
		return experiments.Probes{}, err
	}
	if err := judge.Setup(ctx, pool, s); err != nil {
		return experiments.Probes{}, fmt.Errorf("check the statements: set up: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = judge.Drop(dctx, pool, s)
	}()
	role, err := sandbox.NewRole(ctx, pool, s)
	if err != nil {
		return experiments.Probes{}, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = role.Drop(dctx, pool)
	}()
	st, err := role.VetSolution(ctx, sol)
	if err != nil {
		return experiments.Probes{}, err
	}
	q, err := engine.NewQueue(pool, engine.QueueConfig{Schema: s.Jobs})
	if err != nil {
		return experiments.Probes{}, err
	}
	// The trial's job is a run's: the same payload and attempts, and, as
	// each run's, job 1 of a fresh table. Try runs each statement as a
	// run's worker A would, under the same lease. Yet a statement can
	// still tell the trial apart (by its schema's or role's name, say);
	// nothing rests on the trial but refusing a statement that errors
	// early: a statement that behaves in it alone fails the runs.
	if _, err := q.Insert(ctx, []byte(runner.JobPayload), 0); err != nil {
		return experiments.Probes{}, fmt.Errorf("check the statements: %w", err)
	}
	if err := role.Try(ctx, st); err != nil {
		return experiments.Probes{}, err
	}
	if probes.Receiver, err = probeReceiver(ctx, role, st.Receiver); err != nil {
		return experiments.Probes{}, err
	}
	if _, err := q.Insert(ctx, []byte(`{"task":"a second job"}`), 1); err != nil {
		return experiments.Probes{}, fmt.Errorf("check the statements: %w", err)
	}
	if probes.Statements, err = probeStatements(ctx, pool, s, role, st); err != nil {
		return experiments.Probes{}, err
	}
	probes.Played = experiments.ProbeCases()
	return probes, nil
}

// ValidateReceiver checks a receiver rule alone, for a check of a worker
// program whose statements are its own: it is Validate of our statements
// with the rule, on schemas of a random name, and it returns the
// receiver's probe alone.
func ValidateReceiver(ctx context.Context, pool *pgxpool.Pool, text string) (experiments.Probes, error) {
	probes, err := Validate(ctx, pool, SchemasOf("fl_check_"+randomHex(4)+"_v"), sandbox.Ours().With(sandbox.Receiver, text))
	return experiments.Probes{Receiver: probes.Receiver, Played: []experiments.CheckCase{experiments.CaseReceiver}}, err
}

// probeReceiver sends the receiver's rule the probe's deliveries, one by
// one, as the role, and says which it took.
func probeReceiver(ctx context.Context, role *sandbox.Role, st *sandbox.Vetted) ([]bool, error) {
	rule, closeRule := role.ReceiverRule(st)
	defer closeRule()
	var taken []bool
	for _, d := range experiments.ReceiverProbe() {
		body, _ := json.Marshal(protocol.Result{Worker: d.From, Owner: d.Owner, JobID: d.JobID, Epoch: d.Epoch, Output: "the receiver's probe"})
		took, _, err := rule(ctx, engine.Delivery{JobID: d.JobID, Epoch: d.Epoch, Owner: d.Owner, Payload: body})
		if err != nil {
			return nil, err
		}
		taken = append(taken, took)
	}
	return taken, nil
}

// Run is `fencelab check`: a check of a solution that waits in no line
// (Start, its trial Validate), its cases played with Statements. A
// refused statement is a *sandbox.Error, and no case runs. The report
// lists every case, in order, also those that could not run.
func Run(ctx context.Context, cfg Config) (protocol.CheckReport, error) {
	if cfg.Env == nil || cfg.Env.Pool == nil {
		return protocol.CheckReport{}, errors.New("check: Config needs an Env with a Pool")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "fl_check_" + randomHex(4)
	}
	c, err := Start(ctx, Request{Lease: cfg.Lease, Cases: cfg.Cases, Validate: func(ctx context.Context) (experiments.Probes, error) {
		return Validate(ctx, cfg.Env.Pool, SchemasOf(cfg.Prefix+"_v"), cfg.Solution)
	}})
	if err != nil {
		return protocol.CheckReport{}, err
	}
	return c.Play(ctx, &Statements{Env: cfg.Env, Solution: cfg.Solution, Lease: c.Lease(), Prefix: cfg.Prefix, EmitFunc: cfg.EmitFunc, OnRun: cfg.OnRun}, cfg.Parallel, cfg.OnCase)
}

// SchemasOf are the two schemas of a check's run or validation whose
// names start with prefix: prefix_j and prefix_r.
func SchemasOf(prefix string) judge.Schemas {
	return judge.Schemas{Jobs: prefix + "_j", Receiver: prefix + "_r"}
}

// Statements plays a check's cases with a reader's four statements: each
// case is a run of the runner's workers (real processes, the runner's
// script of the case) that run the reader's claim, complete and fail,
// and a receiver that runs their rule, all as a role made for the run.
type Statements struct {
	Env      *runner.Env
	Solution sandbox.Solution
	Lease    time.Duration        // default DefaultLease
	Prefix   string               // each case's run is c<n>, its schemas prefix_<n>_j and _r, n its place in experiments.CheckCases()
	EmitFunc func(protocol.Event) // every event of every case's run, if set
	// OnRun, if set, is told each case's run as it ended (its summary, as
	// an offline replay starts from), from the goroutine that played it.
	OnRun func(protocol.RunInfo)

	mu     sync.Mutex
	played map[experiments.CheckCase]int // how many plays of each case began
}

// Play plays one case's run to its verdict.
func (p *Statements) Play(ctx context.Context, c experiments.CheckCase) (judge.CheckInput, error) {
	if _, err := experiments.ParseCheckCase(string(c)); err != nil {
		return judge.CheckInput{Case: c}, err
	}
	// A case played again (Play's second play of a timed-out case) is a
	// run and schemas of its own: c3, then c3b.
	p.mu.Lock()
	if p.played == nil {
		p.played = map[experiments.CheckCase]int{}
	}
	p.played[c]++
	again := strings.Repeat("b", p.played[c]-1)
	p.mu.Unlock()
	n := slices.Index(experiments.CheckCases(), c) + 1
	in := judge.CheckInput{Case: c, Run: fmt.Sprintf("c%d%s", n, again)}
	lease, err := Lease("lease", p.Lease)
	if err != nil {
		in.Err = protocol.FailureOf(err)
		return in, nil
	}
	rc := c.Config(lease)
	if err := rc.Validate(); err != nil {
		in.Err = protocol.FailureOf(err)
		return in, nil
	}
	sol := p.Solution
	emit := p.EmitFunc
	if emit == nil {
		emit = func(protocol.Event) {}
	}
	spec := runner.Spec{ID: in.Run, Config: rc, Mode: protocol.ModeAuto, Solution: &sol,
		Schemas: SchemasOf(fmt.Sprintf("%s_%d%s", p.Prefix, n, again)), EmitFunc: emit}
	// A run's Done is closed before it has given back its schemas and
	// role; its OnEndFunc, once it has.
	cleaned := make(chan struct{})
	spec.OnEndFunc = func(*runner.Run) { close(cleaned) }
	r, err := runner.New(p.Env, spec)
	if err != nil {
		in.Err = protocol.FailureOf(err)
		return in, nil
	}
	if err := r.Start(ctx); err != nil {
		<-cleaned
		in.Err = protocol.FailureOf(err)
		return in, ctx.Err()
	}
	select {
	case <-r.Done():
	case <-ctx.Done():
		r.Stop(protocol.StopShutdown)
	}
	<-cleaned
	if err := ctx.Err(); err != nil {
		return in, err
	}
	if p.OnRun != nil {
		p.OnRun(r.Info())
	}
	in.Outcome = r.Outcome()
	if in.Outcome == nil {
		in.Err = failureOf(r)
	}
	return in, nil
}

// failureOf says why a run ended without an outcome.
func failureOf(r *runner.Run) *protocol.Failure {
	if f := r.Info().Error; f != nil {
		return f
	}
	return &protocol.Failure{Code: protocol.ErrNoOutcome, Message: "the run ended without a verdict"}
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
	receivers, stop, err := receiver.Serve(log)
	if err != nil {
		return nil, err
	}
	w.closers = append(w.closers, stop)
	sup, err := supervisor.New(supervisor.Config{Exe: exe, Log: log})
	if err != nil {
		w.Close()
		return nil, err
	}
	w.closers = append(w.closers, func() { _ = sup.Close() })
	nt := notify.New(notify.Connector(dsn, "fencelab check listener"), log)
	w.closers = append(w.closers, nt.Close)
	w.closers = append(w.closers, sandbox.WatchOverruns(pool, log))
	w.Env = runner.Env{Pool: pool, DatabaseURL: dsn, Supervisor: sup, Notify: nt, Receivers: receivers, Log: log, Clock: &runner.DBClock{Pool: pool}}
	return w, nil
}

// ReceiverOf returns a maker of receivers that run a reader's receiver
// statement as a role made on each case's schemas (checked there first),
// for a check of a reader's worker program (harness.Config's
// NewReceiverFunc). The func each returns closes its connection and
// drops its role.
func ReceiverOf(pool *pgxpool.Pool, text string) func(ctx context.Context, s judge.Schemas) (*engine.Receiver, func(), error) {
	return func(ctx context.Context, s judge.Schemas) (*engine.Receiver, func(), error) {
		role, err := sandbox.NewRole(ctx, pool, s)
		if err != nil {
			return nil, nil, err
		}
		drop := func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = role.Drop(dctx, pool)
		}
		st, err := role.Vet(ctx, sandbox.Receiver, text)
		if err != nil {
			drop()
			return nil, nil, err
		}
		rule, closeRule := role.ReceiverRule(st)
		rcv, err := playground.NewReceiver(pool, engine.ReceiverConfig{Schema: s.Receiver}, playground.ReceiverHooks{Rule: rule})
		if err != nil {
			closeRule()
			drop()
			return nil, nil, err
		}
		return rcv, func() { closeRule(); drop() }, nil
	}
}
