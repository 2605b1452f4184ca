package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/check"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/tick"
)

// Defaults and bounds of a Config.
const (
	// DefaultTimeout is how long the check waits for a worker to do each
	// thing the contract asks (claim and call the receiver, exit after its
	// answer) before it calls the case failed.
	DefaultTimeout = 15 * time.Second
	// DefaultSchemaPrefix starts the names of each case's two schemas.
	DefaultSchemaPrefix = "fencelab_check"
	// MinClockSkewLease is the shortest lease the clock-skew case runs
	// with: B must be able to start and poll several times inside A's
	// live lease, or a B that does not claim proves nothing.
	MinClockSkewLease = 6 * time.Second
	// MaxClockSkewLease is the longest lease the clock-skew case is played
	// again with when worker B was too slow to start to look for a job
	// inside A's lease (see lookWindow).
	MaxClockSkewLease = 40 * time.Second
	// lookWindow is how long B, once its first connection to the database
	// is seen, is given to claim in the clock-skew case: many polls at the
	// contract's 100 ms. A correct B never claims, so the case waits this
	// long. It runs from B's connection, a state the harness sees, not
	// from B's start: a Python B under CI's full load once took over 4 s
	// to start, looked for a job only after A's lease had run out, and a
	// worker judging leases by its own clock passed the check.
	lookWindow = 2 * time.Second
	// skewPlays is how many times the clock-skew case is played at most:
	// each time B connected too late to look inside A's lease, the next
	// play's lease is longer by what the last one measured.
	skewPlays = 3
	// leaseMargin ends the clock-skew window this long before A's lease
	// runs out on the database clock.
	leaseMargin  = 500 * time.Millisecond
	maxPrefixLen = 30
)

// Config is one check of a reader's worker program. Validate fills the
// defaults.
type Config struct {
	// Command is the reader's worker command line, run with /bin/sh -c,
	// once as worker A and once as worker B in each case.
	Command string
	// Dir is the command's working directory; "" is the current one.
	Dir string
	// Pool is fencelab's own connection to the database: it sets each case
	// up, watches the job row and evaluates the case.
	Pool *pgxpool.Pool
	// DatabaseURL is the database the workers reach, Pool's. They get it
	// as DATABASE_URL with the user replaced by a role made for each case
	// (sandbox.NewWorkerRole: rights on the case's jobs table alone, no
	// superuser) and no password; the role's password comes as PGPASSWORD.
	// Neither appears on a command line, in an error or in the workers'
	// relayed output. The database must be hardened (sandbox.Harden).
	DatabaseURL string
	// Lease is the lease the workers claim with (FENCELAB_LEASE_MS);
	// check.Lease decides it (default check.DefaultLease). The clock-skew case uses at least
	// MinClockSkewLease.
	Lease time.Duration
	// Cases are the cases to play, in order; default every one of
	// experiments.CheckCases() that ForWorkerPrograms.
	Cases []experiments.CheckCase
	// NewReceiverFunc, if set, makes each case's receiver (the reader's own
	// receiver rule, through an *engine.Receiver) on the case's schemas;
	// the func it returns is called when the case ends. Default:
	// engine.NewReceiver(Pool, {Schema: s.Receiver}), the engine's rule.
	NewReceiverFunc func(ctx context.Context, s judge.Schemas) (*engine.Receiver, func(), error)
	// Timeout bounds each wait on a worker; default DefaultTimeout.
	Timeout time.Duration
	// SchemaPrefix starts each case's schema names; default
	// DefaultSchemaPrefix. The schemas are dropped when the case ends.
	SchemaPrefix string
	Log          *slog.Logger
	// Stderr receives the workers' stdout and stderr, a line at a time,
	// each prefixed "worker A: " or "worker B: "; nil discards them.
	Stderr io.Writer
}

// Validate checks the config and fills its defaults.
func (c *Config) Validate() error {
	switch {
	case strings.TrimSpace(c.Command) == "":
		return fault.Invalidf("the worker command is empty")
	case c.Pool == nil:
		return fault.Invalidf("the check needs a database pool")
	case c.DatabaseURL == "":
		return fault.Invalidf("the check needs the database URL to give the workers")
	}
	var err error
	if c.Lease, err = check.Lease("lease", c.Lease); err != nil {
		return err
	}
	if len(c.Cases) == 0 {
		for _, cs := range experiments.CheckCases() {
			if ok, _ := cs.ForWorkerPrograms(); ok {
				c.Cases = append(c.Cases, cs)
			}
		}
	}
	for _, cs := range c.Cases {
		if err := playable(cs); err != nil {
			return err
		}
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Timeout < 100*time.Millisecond {
		return fault.Invalidf("timeout %v is too short: give a worker at least 100ms", c.Timeout)
	}
	if c.SchemaPrefix == "" {
		c.SchemaPrefix = DefaultSchemaPrefix
	}
	if err := engine.ValidateSchemaName(c.SchemaPrefix); err != nil || len(c.SchemaPrefix) > maxPrefixLen {
		return fault.Invalidf("schema prefix %q must be a plain lowercase identifier of at most %d characters", c.SchemaPrefix, maxPrefixLen)
	}
	if c.NewReceiverFunc == nil {
		pool := c.Pool
		c.NewReceiverFunc = func(_ context.Context, s judge.Schemas) (*engine.Receiver, func(), error) {
			r, err := engine.NewReceiver(pool, engine.ReceiverConfig{Schema: s.Receiver})
			return r, func() {}, err
		}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// caseError is a case that could not be played, for a reason the worker
// gave: it becomes the case's *protocol.Failure.
type caseError struct {
	code protocol.ErrorCode
	msg  string
	// idle says the worker did nothing the contract asks in the time
	// given, on a job it was started on as every case starts it: it never
	// claimed, or never called the receiver. Every other case would wait
	// as long to show the same, so none is played after it (Player.Play).
	idle bool
}

func (e *caseError) Error() string { return e.msg }

// playable says why a worker program cannot play a case, if it cannot.
func playable(cs experiments.CheckCase) error {
	if _, err := experiments.ParseCheckCase(string(cs)); err != nil {
		return err
	}
	if ok, why := cs.ForWorkerPrograms(); !ok {
		return fault.Invalidf("the %s case cannot be played with a worker program: %s", cs, why)
	}
	return nil
}

// A Player plays the cases of a check with a reader's worker program, for
// the check's one pipeline (server/run/check's Play, which judges them). Its
// methods may be called from several goroutines at once: each case has
// schemas, a role, a receiver and workers of its own, named at random.
type Player struct {
	cfg Config
	// idle is the first case (or probe) that showed the worker doing
	// nothing (caseError.idle): the cases after it are not played.
	idle atomic.Pointer[idleSeen]
}

// idleSeen is where a worker was first seen doing nothing, and what.
type idleSeen struct {
	where experiments.CheckCase
	code  protocol.ErrorCode
	msg   string
}

// sawIdle keeps the first case that showed the worker doing nothing.
func (p *Player) sawIdle(cs experiments.CheckCase, ce *caseError) {
	if ce != nil && ce.idle {
		p.idle.CompareAndSwap(nil, &idleSeen{where: cs, code: ce.code, msg: ce.msg})
	}
}

// notPlayed is a case not played because an earlier one showed the worker
// doing nothing: its error says where, and what.
func (s *idleSeen) notPlayed(cs experiments.CheckCase) judge.CheckInput {
	return judge.CheckInput{Case: cs, Err: &protocol.Failure{Code: s.code, Message: fmt.Sprintf(
		"not played: %s showed it already, and every case starts the worker on a job the same way (a worker that does nothing is named at once, not after every case has waited for it): %s",
		s.where.Title(), s.msg)}}
}

// NewPlayer checks cfg (Config.Validate) and returns a Player of it.
func NewPlayer(cfg Config) (*Player, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Player{cfg: cfg}, nil
}

// Cases are the cases the config names, in order.
func (p *Player) Cases() []experiments.CheckCase {
	return append([]experiments.CheckCase(nil), p.cfg.Cases...)
}

// Play plays one case with the reader's worker as A and B and says what it
// came to: an Outcome read from the database and the receiver, or an Err
// that says what the worker did not do. It returns an error only when the
// check itself cannot go on: a case no program can play, the database, or
// ctx.
//
// The case's schemas are dropped when it ends, and its workers killed and
// reaped, on an error or a cancelled ctx too.
func (p *Player) Play(ctx context.Context, cs experiments.CheckCase) (judge.CheckInput, error) {
	if err := playable(cs); err != nil {
		return judge.CheckInput{Case: cs}, err
	}
	if err := ctx.Err(); err != nil {
		return judge.CheckInput{Case: cs}, err
	}
	if seen := p.idle.Load(); seen != nil {
		return seen.notPlayed(cs), nil
	}
	in, idle, err := runCase(ctx, &p.cfg, cs)
	if err != nil {
		return in, fmt.Errorf("check case %s: %w", cs, err)
	}
	p.sawIdle(cs, idle)
	return in, nil
}

// caseRun is one case being played.
type caseRun struct {
	cfg     *Config
	cs      experiments.CheckCase
	rc      experiments.RunConfig
	s       judge.Schemas
	q       *engine.Queue
	jobID   int64
	gate    *gate
	addr    net.Addr
	sink    *lineSink
	workers map[string]*proc
	notes   []string // how each worker ended, in order: reported, not judged
	role    *sandbox.Role
	roleURL string // DatabaseURL as the role, with no password
	recv    *engine.Receiver
	log     *slog.Logger

	// tmp is the workers' temp folder (TMPDIR, TMP, TEMP): the case's own,
	// watched against MaxTempBytes while it plays, removed when it ends.
	tmp     string
	tmpMu   sync.Mutex
	groups  []int // the workers' process groups, for the watch to end
	tmpFull atomic.Bool
}

// MaxTempBytes is what a case's workers may write in their temp folder
// together. Past it their process groups are killed, the case fails, and
// its notes say why.
const MaxTempBytes = 64 << 20

// tempEvery is how often the temp folder is measured.
const tempEvery = 100 * time.Millisecond

// watchTemp measures the case's temp folder until ctx ends, and kills the
// workers when it holds more than MaxTempBytes.
func (c *caseRun) watchTemp(ctx context.Context) {
	tick.Every(ctx, tempEvery, func() bool {
		n := dirBytes(c.tmp)
		if n <= MaxTempBytes {
			return true
		}
		c.tmpFull.Store(true)
		c.log.Warn("the workers' temp folder is over its cap: their processes are killed", "bytes", n)
		c.tmpMu.Lock()
		for _, g := range c.groups {
			_ = syscall.Kill(-g, syscall.SIGKILL)
		}
		c.tmpMu.Unlock()
		return false
	})
}

// dirBytes is what the files under dir hold, as far as they can be read.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// openCase makes what a case is played in: two fresh schemas of a random
// name (the jobs table empty), a role for its workers, its receiver,
// served by the gate on a loopback port, and the killing of its workers.
// The func it returns undoes all of it, last first, with time of its own
// on a cancelled ctx; it is nil when openCase returns an error, having
// undone what it made.
func openCase(ctx context.Context, cfg *Config, cs experiments.CheckCase, rc experiments.RunConfig) (c *caseRun, closeCase func(), err error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, nil, err
	}
	base := cfg.SchemaPrefix + "_" + hex.EncodeToString(b[:])
	c = &caseRun{cfg: cfg, cs: cs, rc: rc, s: judge.Schemas{Jobs: base + "_jobs", Receiver: base + "_recv"},
		sink: &lineSink{w: cfg.Stderr}, workers: map[string]*proc{}}
	c.log = cfg.Log.With("case", cs, "schemas", base)

	var undo []func(context.Context)
	closeAll := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i](cctx)
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	undo = append(undo, func(cctx context.Context) {
		if err := judge.Drop(cctx, cfg.Pool, c.s); err != nil {
			c.log.Warn("drop the case's schemas", "err", err)
		}
	})
	if err := judge.Setup(ctx, cfg.Pool, c.s); err != nil {
		return nil, nil, fmt.Errorf("set up the case's schemas: %w", err)
	}
	if c.role, err = sandbox.NewWorkerRole(ctx, cfg.Pool, c.s); err != nil {
		return nil, nil, fmt.Errorf("make the workers' role: %w", err)
	}
	undo = append(undo, func(cctx context.Context) {
		if err := c.role.Drop(cctx, cfg.Pool); err != nil {
			c.log.Warn("drop the workers' role", "err", err)
		}
	})
	if c.roleURL, err = c.role.DatabaseURL(cfg.DatabaseURL); err != nil {
		return nil, nil, fmt.Errorf("the workers' database URL: %w", err)
	}
	if c.q, err = engine.NewQueue(cfg.Pool, engine.QueueConfig{Schema: c.s.Jobs}); err != nil {
		return nil, nil, err
	}
	recv, done, err := cfg.NewReceiverFunc(ctx, c.s)
	if err != nil {
		return nil, nil, fmt.Errorf("make the case's receiver: %w", err)
	}
	if done != nil {
		undo = append(undo, func(context.Context) { done() })
	}
	c.recv = recv

	gctx, cancelGate := context.WithCancel(ctx)
	undo = append(undo, func(context.Context) { cancelGate() })
	if c.gate, err = newGate(gctx, recv, experiments.Zombie, experiments.NewOwner); err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("listen for the receiver: %w", err)
	}
	c.addr = ln.Addr()
	srv := &http.Server{Handler: c.gate, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(slog.DiscardHandler, 0)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	undo = append(undo, func(context.Context) {
		c.gate.close()
		_ = srv.Close()
		<-served
	})

	// The temp folder goes after the workers (undo runs last first).
	if c.tmp, err = os.MkdirTemp("", "fencelab-worker-"); err != nil {
		return nil, nil, fmt.Errorf("make the workers' temp folder: %w", err)
	}
	undo = append(undo, func(context.Context) {
		if err := os.RemoveAll(c.tmp); err != nil {
			c.log.Warn("remove the workers' temp folder", "err", err)
		}
	})
	go c.watchTemp(gctx)
	undo = append(undo, func(context.Context) {
		for _, p := range c.workers {
			p.kill()
		}
	})
	return c, closeAll, nil
}

// runCase plays a case. A clock-skew case in which worker B connected
// too late to look for the job inside A's lease (a *lateLook) proves
// nothing, and is played again with the lease that play measured B
// needs, skewPlays times at most; the case's notes say so.
//
// idle is the case's error when it showed the worker doing nothing
// (caseError.idle), nil otherwise.
func runCase(ctx context.Context, cfg *Config, cs experiments.CheckCase) (judge.CheckInput, *caseError, error) {
	lease := cfg.Lease
	if cs == experiments.CaseClockSkew {
		lease = max(lease, MinClockSkewLease)
	}
	var notes []string
	for play := 1; ; play++ {
		in, idle, err := playCase(ctx, cfg, cs, lease)
		var late *lateLook
		if !errors.As(err, &late) {
			in.Notes = append(notes, in.Notes...)
			return in, idle, err
		}
		next := min(late.lease(lease), MaxClockSkewLease)
		if play == skewPlays || next <= lease {
			return judge.CheckInput{Case: cs, Notes: notes, Err: &protocol.Failure{Code: protocol.ErrWorkerNoClaim,
				Message: fmt.Sprintf("%s, in each of %d plays with leases up to %v: the case needs B looking for a job while A's lease is live", late, play, lease)}}, nil, nil
		}
		cfg.Log.Info("case played again", "case", cs, "lease", next, "why", late.Error())
		notes = append(notes, fmt.Sprintf("Played again with a %v lease: %s.", next, late))
		lease = next
	}
}

// playCase plays a case once, with this lease.
func playCase(ctx context.Context, cfg *Config, cs experiments.CheckCase, lease time.Duration) (in judge.CheckInput, idle *caseError, err error) {
	in.Case = cs
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = ctx.Err() // whatever failed, it failed because the check was cancelled
		}
	}()
	rc := cs.Config(lease)
	if err := rc.Validate(); err != nil {
		return in, nil, err
	}
	c, closeCase, err := openCase(ctx, cfg, cs, rc)
	if err != nil {
		return in, nil, err
	}
	defer closeCase()
	defer func() {
		if c.tmpFull.Load() { // whatever the case came to, this is why its workers died
			in.Notes = append(in.Notes, fmt.Sprintf("The workers wrote more than %d MiB to their temp folder: they were killed.", MaxTempBytes>>20))
		}
	}()
	log, recv := c.log, c.recv
	if c.jobID, err = c.q.Insert(ctx, []byte(`{"task":"check","case":"`+string(cs)+`"}`), 0); err != nil {
		return in, nil, err
	}

	log.Info("case starts", "job", c.jobID, "lease", lease)
	tried, err := c.play(ctx)
	if ctx.Err() != nil {
		return in, nil, ctx.Err()
	}
	if ierr := c.gate.infraErr(); ierr != nil {
		// The receiver's rule may be the reader's own statement: its
		// failure is the case's, not the check's.
		in.Err = &protocol.Failure{Code: protocol.ErrReceiverRule, Message: "the receiver could not decide a delivery: " + strings.TrimSuffix(ierr.Error(), ".")}
		return in, nil, nil
	}
	if err != nil {
		var ce *caseError
		if !errors.As(err, &ce) {
			return in, nil, err
		}
		log.Info("case could not be played", "code", ce.code, "err", ce.msg)
		in.Err = &protocol.Failure{Code: ce.code, Message: ce.msg}
		if ce.idle {
			idle = ce
		}
		return in, idle, nil
	}
	// The workers are done with; nothing of theirs may write now.
	for _, p := range c.workers {
		p.kill()
	}
	o, err := judge.Evaluate(ctx, c.cfg.Pool, c.s.Jobs, recv, judge.EvaluateInput{Config: rc, JobID: c.jobID, ZombieTriedCommit: tried})
	if err != nil {
		if ctx.Err() != nil {
			return in, nil, ctx.Err()
		}
		in.Err = &protocol.Failure{Code: protocol.ErrEvaluate, Message: "the case's outcome could not be read: " + err.Error()}
		return in, nil, nil
	}
	log.Info("case played", "safe", o.Safe, "verdict", o.Headline)
	in.Outcome = &o
	in.Notes = c.notes
	return in, nil, nil
}

// env is a worker's whole environment: fencelab's own, less anything that
// would steer the worker elsewhere, plus the contract's variables.
func (c *caseRun) env(label string) []string {
	ours := map[string]string{
		"DATABASE_URL":           c.roleURL,
		"PGUSER":                 c.role.Name(),
		"PGPASSWORD":             c.role.Password(),
		"PGOPTIONS":              "-c search_path=" + c.s.Jobs,
		"PGAPPNAME":              protocol.AppName(label),
		"FENCELAB_SCHEMA":        c.s.Jobs,
		"FENCELAB_OWNER":         c.rc.Owner(label),
		"FENCELAB_WORKER":        label,
		"FENCELAB_LEASE_MS":      strconv.FormatInt(c.rc.Lease.Milliseconds(), 10),
		"FENCELAB_RECEIVER_URL":  c.gate.url(c.addr, label),
		"FENCELAB_CLOCK_SKEW_MS": strconv.FormatInt(c.rc.WorkerSkew(label).Milliseconds(), 10),
		"TMPDIR":                 c.tmp,
		"TMP":                    c.tmp,
		"TEMP":                   c.tmp,
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, mine := ours[k]; !mine {
			env = append(env, kv)
		}
	}
	for _, k := range []string{"DATABASE_URL", "PGUSER", "PGPASSWORD", "PGOPTIONS", "PGAPPNAME", "FENCELAB_SCHEMA", "FENCELAB_OWNER", "FENCELAB_WORKER",
		"FENCELAB_LEASE_MS", "FENCELAB_RECEIVER_URL", "FENCELAB_CLOCK_SKEW_MS", "TMPDIR", "TMP", "TEMP"} {
		env = append(env, k+"="+ours[k])
	}
	return env
}

// start starts a worker.
func (c *caseRun) start(label string) (*proc, error) {
	redact := []string{c.cfg.DatabaseURL, c.roleURL, c.role.Password(), c.gate.url(c.addr, experiments.Zombie), c.gate.url(c.addr, experiments.NewOwner)}
	p, err := startProc(label, c.cfg.Command, c.cfg.Dir, c.env(label), c.sink, redact)
	if err != nil {
		return nil, &caseError{code: protocol.ErrWorkerStart, msg: fmt.Sprintf("worker %s could not be started: %v", label, errors.Unwrap(err))}
	}
	c.workers[label] = p
	c.tmpMu.Lock()
	c.groups = append(c.groups, p.pid)
	c.tmpMu.Unlock()
	c.cfg.Log.Debug("worker started", "case", c.cs, "label", label, "pid", p.pid)
	return p, nil
}
