// Package worker is one worker process: `fencelab worker`. It opens its own
// Postgres connections, claims jobs, calls the receiver over HTTP, then
// commits, and reports every step as one event (a protocol.Event as a JSON line)
// on stdout. In step mode it waits at each checkpoint for a command on
// stdin, so a supervisor can choose the interleaving exactly.
//
// A worker can be frozen with SIGSTOP and thawed with SIGCONT at any moment;
// nothing in it notices, which is the point. Its lease heartbeat stops while
// it is frozen, so the lease runs out on the database clock, and when it
// wakes it carries on with the epoch it still believes it holds.
//
// A worker exits when its stdin ends: the supervisor that holds the other
// end is gone. With the parent-death signal (Linux) and the supervisor's
// watchdog (elsewhere) that is the third way no worker outlives its server.
package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/receiver"
	"github.com/fencelab/fencelab/server/tick"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Main runs a worker until it is told to stop, runs out of jobs (with
// UntilEmpty), reaches MaxJobs, its stdin ends, or ctx is done.
func Main(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == FlagPrestarted {
		return mainPrestarted(ctx, args, getenv, stdin, stdout, stderr)
	}
	cfg, err := ParseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	// A worker started by hand from a terminal takes no commands unless it
	// steps: reading the terminal would stop it (SIGTTIN) in the background.
	if f, ok := stdin.(*os.File); ok && !cfg.Step {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			stdin = nil
		}
	}
	return Run(ctx, cfg, stdin, stdout)
}

// Worker is one running worker. Its methods run on the worker's own
// goroutine, except emit, which the heartbeat also calls.
type Worker struct {
	cfg   Config
	pool  *pgxpool.Pool
	http  *http.Client
	pid   int
	cmds  <-chan Command
	outMu sync.Mutex
	out   *json.Encoder
	// failNext is set by a "fail" command at the commit checkpoint.
	failNext bool
	stopping bool
}

// Run runs a worker with an already validated config.
func Run(ctx context.Context, cfg Config, stdin io.Reader, stdout io.Writer) error {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return usagef("--database-url is not a connection string Postgres understands")
	}
	// One connection: the job's statements and the heartbeat's take turns,
	// each a single statement, and a server of a hundred runs counts its
	// workers' connections against Postgres's max_connections.
	pcfg.MaxConns = 1
	pcfg.ConnConfig.RuntimeParams["application_name"] = protocol.AppName(cfg.Label)
	if cfg.SQL != nil {
		// The reader's statements run as the run's role, and nothing of
		// this worker runs as anyone else.
		pcfg.ConnConfig.User, pcfg.ConnConfig.Password = cfg.SQL.Role, cfg.SQL.Password
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fault.Errorf(fault.Unavailable, "connect to Postgres: %v", engine.ErrUnavailable)
	}
	defer pool.Close()

	w := &Worker{
		cfg:  cfg,
		pool: pool,
		// No keep-alive: a connection idle across a freeze may be closed by
		// the receiver, and a POST is not retried on a dead connection.
		http: receiver.WithCredential(&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}, cfg.ReceiverCredential),
		pid:  os.Getpid(),
		out:  json.NewEncoder(stdout),
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.cmds = w.readCommands(ctx, stdin, cancel)
	if err := pool.Ping(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fault.Errorf(fault.Unavailable, "connect to Postgres: %v", engine.ErrUnavailable)
	}
	w.emit(protocol.Event{Kind: protocol.KindProcess, Process: &protocol.ProcessEvent{Change: protocol.ProcReady, Pid: w.pid, State: protocol.StateRunning, Owner: cfg.Name}})
	return w.loop(ctx)
}

// readCommands reads command lines from stdin. A bad line is reported as
// an error event and changes nothing. The end of stdin means the
// supervisor is gone: nobody can drive or watch the worker any more, so it
// stops.
func (w *Worker) readCommands(ctx context.Context, stdin io.Reader, cancel context.CancelFunc) <-chan Command {
	ch := make(chan Command, 16)
	if stdin == nil {
		return ch
	}
	go func() {
		defer cancel()
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 0, 4096), maxCommandBytes+1)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			c, err := ParseCommand(line)
			if err != nil {
				w.badCommand(err.Error())
				continue
			}
			select {
			case ch <- c:
			case <-ctx.Done():
				return
			}
		}
		if err := sc.Err(); err != nil {
			w.badCommand("stopped reading commands: " + err.Error())
		}
	}()
	return ch
}

func (w *Worker) badCommand(msg string) {
	w.emit(protocol.Event{Kind: protocol.KindError, Error: &protocol.ErrorEvent{Code: protocol.ErrBadCommand, Message: msg}})
}

// now is the worker's own clock, skew included.
func (w *Worker) now() time.Time { return time.Now().Add(w.cfg.Skew) }

func (w *Worker) loop(ctx context.Context) error {
	done := 0
	idle := false
	for w.cfg.MaxJobs == 0 || done < w.cfg.MaxJobs {
		if err := w.checkpoint(ctx, protocol.CheckpointClaim, nil); err != nil {
			return ignoreStop(err)
		}
		var c engine.Claim
		claim := func(quiet bool) error {
			if w.cfg.SQL != nil {
				return w.readerClaim(ctx, &call{op: protocol.OpClaim, held: &c, quietNoJob: quiet}, &c)
			}
			return w.run(&call{op: protocol.OpClaim, held: &c, quietNoJob: quiet}, func(q *engine.Queue) (err error) {
				c, err = q.Claim(ctx, w.cfg.Name, w.cfg.Lease)
				return err
			})
		}
		var err error
		if w.cfg.Step && w.cfg.SQL == nil {
			err = w.claimStep(ctx, claim)
		} else {
			err = claim(idle)
		}
		idle = errors.Is(err, engine.ErrNoJob)
		if errors.Is(err, engine.ErrNoJob) {
			if w.cfg.UntilEmpty {
				return nil
			}
			if !w.cfg.Step {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(w.cfg.Poll):
				}
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if w.outlasts(err) {
				if !w.sleep(ctx, w.cfg.Poll) {
					return nil
				}
				continue
			}
			return err
		}
		if err := w.process(ctx, c); err != nil {
			return ignoreStop(err)
		}
		done++
	}
	return nil
}

// claimStep is a step's claim. SKIP LOCKED passes over a row that another
// session holds locked for the moment of its statement — a heartbeat's
// renewal, every third of a lease — so a claim the script says must find
// the job could find nothing once in a while. When nothing was claimed
// but the job is claimable (counted without locks), it tries again for a
// few milliseconds; the answer it reports is the last one.
func (w *Worker) claimStep(ctx context.Context, claim func(quiet bool) error) error {
	const tries, gap = 20, 10 * time.Millisecond
	for range tries {
		err := claim(true)
		if !errors.Is(err, engine.ErrNoJob) {
			return err
		}
		q, qerr := playground.NewQueue(w.pool, engine.QueueConfig{Schema: w.cfg.Schema}, playground.QueueHooks{Broken: w.cfg.Broken, Now: w.now})
		if qerr != nil {
			break
		}
		if n, cerr := playground.Claimable(ctx, q); cerr != nil || n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(gap):
		}
	}
	return claim(false)
}

var errStop = errors.New("stop")

func ignoreStop(err error) error {
	if errors.Is(err, errStop) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// process does one claimed job: work, deliver, commit, with a heartbeat
// renewing the lease meanwhile.
func (w *Worker) process(ctx context.Context, c engine.Claim) error {
	hbCtx, stopHeartbeat := context.WithCancel(ctx)
	var hb sync.WaitGroup
	if w.cfg.Heartbeat > 0 {
		hb.Add(1)
		go func() {
			defer hb.Done()
			w.heartbeat(hbCtx, c)
		}()
	}
	defer func() {
		stopHeartbeat()
		hb.Wait()
	}()

	if w.cfg.Work > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.cfg.Work):
		}
	}
	result, err := json.Marshal(protocol.Result{Worker: w.cfg.Label, Owner: w.cfg.Name, Pid: w.pid, JobID: c.JobID, Epoch: c.Epoch,
		Output: fmt.Sprintf("job %d done by worker %s at epoch %d", c.JobID, w.cfg.Label, c.Epoch)})
	if err != nil {
		return err
	}

	if err := w.checkpoint(ctx, protocol.CheckpointDeliver, &c); err != nil {
		return err
	}
	delivery := engine.Delivery{JobID: c.JobID, Epoch: c.Epoch, Owner: c.Owner, Payload: result}
	var deliverErr error
	if w.cfg.Delivery == experiments.DeliverOutbox {
		w.deferDelivery(delivery)
	} else {
		deliverErr = w.deliver(ctx, delivery)
	}
	if err := w.checkpoint(ctx, protocol.CheckpointCommit, &c); err != nil {
		return err
	}
	// The worker commits whatever the receiver said: the database fences a
	// zombie on its own, even one that ignores the receiver's refusal.
	if w.failNext || (deliverErr != nil && !errors.Is(deliverErr, engine.ErrStale)) {
		reason := "failed on purpose"
		if !w.failNext {
			reason = "receiver call failed: " + deliverErr.Error()
		}
		w.failNext = false
		var status engine.Status
		rc := &call{op: protocol.OpFail, held: &c}
		if w.cfg.SQL != nil {
			return w.commitError(ctx, w.readerWrite(ctx, rc, c, w.cfg.SQL.Fail, map[string]any{"error": reason}))
		}
		err := w.run(rc, func(q *engine.Queue) (err error) {
			status, err = q.Fail(ctx, c, reason)
			rc.status = status
			return err
		})
		return w.commitError(ctx, err)
	}
	if w.cfg.SQL != nil {
		return w.commitError(ctx, w.readerWrite(ctx, &call{op: protocol.OpComplete, held: &c}, c, w.cfg.SQL.Complete, map[string]any{"result": string(result)}))
	}
	err = w.run(&call{op: protocol.OpComplete, held: &c}, func(q *engine.Queue) error {
		if w.cfg.Delivery == experiments.DeliverOutbox {
			_, err := q.CompleteOutbox(ctx, c, result, delivery)
			return err
		}
		_, err := q.Complete(ctx, c, result)
		return err
	})
	return w.commitError(ctx, err)
}

// commitError keeps the worker going after a fenced or refused commit (it
// was reported as an event already) and stops it on anything else.
func (w *Worker) commitError(ctx context.Context, err error) error {
	switch {
	case err == nil, errors.Is(err, engine.ErrFenced), errors.Is(err, engine.ErrJobNotFound):
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case w.outlasts(err):
		return nil // its lease runs out, and another claim takes the job
	}
	return err
}

// outlasts says whether a worker on its own (not stepped) carries on
// after err: the database is unavailable for a moment (a restart, an
// outage), and its pool connects again on the next statement. A stepped
// worker stops, and its run says why.
func (w *Worker) outlasts(err error) bool {
	return !w.cfg.Step && errors.Is(err, engine.ErrUnavailable)
}

// sleep waits d, or until ctx ends (false).
func (w *Worker) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (w *Worker) heartbeat(ctx context.Context, c engine.Claim) {
	tick.Every(ctx, w.cfg.Heartbeat, func() bool {
		rc := &call{op: protocol.OpRenew, held: &c}
		err := w.run(rc, func(q *engine.Queue) (err error) {
			rc.lease, err = q.Renew(ctx, c, w.cfg.Lease)
			return err
		})
		// A lost lease is reported (the statement event says fenced) and
		// renewal stops; the work carries on, as a zombie's would.
		return err == nil
	})
}

// checkpoint waits, in step mode, for a command to go on.
func (w *Worker) checkpoint(ctx context.Context, name protocol.Checkpoint, held *engine.Claim) error {
	if w.stopping {
		return errStop
	}
	if !w.cfg.Step {
		return nil
	}
	cp := &protocol.CheckpointEvent{Name: name}
	if held != nil {
		cp.JobID, cp.Epoch, cp.Owner = held.JobID, protocol.Int64(held.Epoch), held.Owner
	}
	w.emit(protocol.Event{Kind: protocol.KindCheckpoint, Checkpoint: cp})
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case c := <-w.cmds:
			if c.Checkpoint != "" && c.Checkpoint != name {
				w.badCommand(fmt.Sprintf("it waits at %s, not %s: command ignored", name, c.Checkpoint))
				continue
			}
			switch c.Cmd {
			case CmdStop:
				w.stopping = true
				return errStop
			case CmdFail:
				if name != protocol.CheckpointCommit {
					w.badCommand("it can only fail at the commit checkpoint: command ignored")
					continue
				}
				w.failNext = true
			}
			return nil
		}
	}
}
