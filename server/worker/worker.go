// Package worker is one worker process: `fencelab worker`. It opens its own
// Postgres connections, claims jobs, calls the receiver over HTTP, then
// commits, and reports every step as one JSON line on stdout. In step mode
// it waits at each checkpoint for a command on stdin, so a supervisor can
// choose the interleaving exactly.
//
// A worker can be frozen with SIGSTOP and thawed with SIGCONT at any moment;
// nothing in it notices, which is the point. Its lease heartbeat stops while
// it is frozen, so the lease runs out on the database clock, and when it
// wakes it carries on with the epoch it still believes it holds.
package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The checkpoints a worker in step mode waits at.
const (
	CheckpointClaim   = "claim"   // before claiming
	CheckpointDeliver = "deliver" // holding a job, before calling the receiver
	CheckpointCommit  = "commit"  // after the receiver answered, before committing
)

// Command is one line a supervisor writes on a worker's stdin.
type Command struct {
	// Cmd is "proceed" (go past the checkpoint the worker waits at),
	// "fail" (at the commit checkpoint: report a failure instead of
	// completing) or "stop" (exit after the current step).
	Cmd string `json:"cmd"`
	// Checkpoint, if set, must name the checkpoint the worker waits at; a
	// command meant for another checkpoint is refused and changes nothing.
	Checkpoint string `json:"checkpoint,omitempty"`
}

// maxCommandBytes bounds one command line.
const maxCommandBytes = 4 << 10

// ParseCommand decodes and validates one command line.
func ParseCommand(line []byte) (Command, error) {
	if len(line) > maxCommandBytes {
		return Command{}, fmt.Errorf("command is %d bytes; the limit is %d", len(line), maxCommandBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var c Command
	if err := dec.Decode(&c); err != nil {
		return Command{}, fmt.Errorf("command is not a JSON object of {cmd, checkpoint}: %v", err)
	}
	if dec.More() {
		return Command{}, errors.New("command has trailing data after the JSON object")
	}
	switch c.Cmd {
	case "proceed", "fail", "stop":
	default:
		return Command{}, fmt.Errorf("unknown command %q (want proceed, fail or stop)", c.Cmd)
	}
	switch c.Checkpoint {
	case "", CheckpointClaim, CheckpointDeliver, CheckpointCommit:
	default:
		return Command{}, fmt.Errorf("unknown checkpoint %q (want claim, deliver or commit)", c.Checkpoint)
	}
	if c.Cmd == "fail" && c.Checkpoint != "" && c.Checkpoint != CheckpointCommit {
		return Command{}, errors.New("fail is only possible at the commit checkpoint")
	}
	return c, nil
}

// Config is a worker's configuration, from its flags.
type Config struct {
	DatabaseURL string
	Schema      string
	ReceiverURL string // the full URL deliveries are POSTed to
	Name        string // the owner identity it claims under
	Label       string // the name people see, and its connection's application_name
	Lease       time.Duration
	Heartbeat   time.Duration // 0: a third of the lease; negative: none
	Work        time.Duration // how long the simulated work takes
	Poll        time.Duration // how long to wait when nothing is claimable
	Skew        time.Duration // how far this worker's own clock runs ahead
	Broken      engine.Guards
	Step        bool // wait at each checkpoint for a command
	UntilEmpty  bool // exit when nothing is claimable
	MaxJobs     int  // 0: no limit
}

// UsageError is a bad flag or value: one line for stderr, exit status 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// ParseFlags parses a worker's command line.
func ParseFlags(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	c := Config{}
	fs := flag.NewFlagSet("fencelab worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.DatabaseURL, "database-url", getenv("DATABASE_URL"), "Postgres connection string (default $DATABASE_URL)")
	fs.StringVar(&c.Schema, "schema", engine.DefaultJobsSchema, "the jobs schema")
	fs.StringVar(&c.ReceiverURL, "receiver", "", "the receiver's deliveries URL, e.g. http://127.0.0.1:8081/deliveries")
	fs.StringVar(&c.Name, "name", "", "the owner identity this worker claims under (default worker-<pid>)")
	fs.StringVar(&c.Label, "label", "", "the worker's label in events and in its connection's application_name (default: the name)")
	fs.DurationVar(&c.Lease, "lease", 30*time.Second, "lease length")
	fs.DurationVar(&c.Heartbeat, "heartbeat", 0, "lease renewal interval (0: a third of the lease; negative: never renew)")
	fs.DurationVar(&c.Work, "work", 0, "how long the simulated work on each job takes")
	fs.DurationVar(&c.Poll, "poll", 100*time.Millisecond, "how long to wait when no job is claimable")
	fs.DurationVar(&c.Skew, "skew", 0, "how far this worker's own clock runs ahead (matters only with --break db-clock)")
	fs.Var(&c.Broken, "break", "turn a guard off (repeatable): "+strings.Join(guardNames(), ", "))
	fs.BoolVar(&c.Step, "step", false, "wait at each checkpoint (claim, deliver, commit) for a command on stdin")
	fs.BoolVar(&c.UntilEmpty, "until-empty", false, "exit when no job is claimable")
	fs.IntVar(&c.MaxJobs, "max-jobs", 0, "exit after this many jobs (0: no limit)")
	fs.Usage = func() {} // a parse error is one line, printed by the caller
	help := func() {
		fmt.Fprintf(stderr, "Usage: fencelab worker [flags]\n\nOne worker process: claims jobs, calls the receiver, commits; one JSON event per line on stdout;\nin --step mode it obeys JSON-line commands on stdin: {\"cmd\":\"proceed\"}, {\"cmd\":\"fail\"}, {\"cmd\":\"stop\"}.\n\nFlags:\n")
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help()
			return c, err
		}
		return c, &UsageError{"fencelab worker: " + strings.ReplaceAll(err.Error(), engine.ErrInvalidInput.Error()+": ", "")}
	}
	if fs.NArg() > 0 {
		return c, &UsageError{fmt.Sprintf("fencelab worker: unexpected argument %q", fs.Arg(0))}
	}
	return c, c.fill()
}

func guardNames() []string {
	var out []string
	for _, g := range engine.AllGuards() {
		out = append(out, g.String())
	}
	return out
}

func (c *Config) fill() error {
	bad := func(format string, a ...any) error {
		return &UsageError{"fencelab worker: " + fmt.Sprintf(format, a...)}
	}
	if c.DatabaseURL == "" {
		return bad("--database-url or DATABASE_URL is required")
	}
	if err := engine.ValidateSchemaName(c.Schema); err != nil {
		return bad("--schema: %v", err)
	}
	if c.ReceiverURL == "" {
		return bad("--receiver is required")
	}
	if u, err := url.Parse(c.ReceiverURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("--receiver %q is not an http(s) URL", c.ReceiverURL)
	}
	if c.Name == "" {
		c.Name = fmt.Sprintf("worker-%d", os.Getpid())
	}
	if err := engine.ValidateOwner(c.Name); err != nil {
		return bad("--name: %v", err)
	}
	if c.Label == "" {
		c.Label = c.Name
	}
	if err := engine.ValidateOwner(c.Label); err != nil {
		return bad("--label: %v", err)
	}
	if err := engine.ValidateLease(c.Lease); err != nil {
		return bad("--lease: %v", err)
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = c.Lease / 3
	}
	if c.Heartbeat > 0 && c.Heartbeat < 5*time.Millisecond {
		return bad("--heartbeat %v is too short (at least 5ms)", c.Heartbeat)
	}
	if c.Work < 0 || c.Work > time.Hour {
		return bad("--work %v must be between 0 and 1h", c.Work)
	}
	if c.Poll < time.Millisecond || c.Poll > time.Minute {
		return bad("--poll %v must be between 1ms and 1m", c.Poll)
	}
	if c.Skew < -engine.MaxSkew || c.Skew > engine.MaxSkew {
		return bad("--skew %v must be within ±%v", c.Skew, engine.MaxSkew)
	}
	if c.MaxJobs < 0 {
		return bad("--max-jobs %d is negative", c.MaxJobs)
	}
	return nil
}

// Main runs a worker until it is told to stop, runs out of jobs (with
// UntilEmpty), reaches MaxJobs, or ctx is done.
func Main(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg, err := ParseFlags(args, getenv, stderr)
	if err != nil {
		return err
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
		return &UsageError{"fencelab worker: --database-url: " + err.Error()}
	}
	pcfg.MaxConns = 2 // one for the job, one for the heartbeat
	pcfg.ConnConfig.RuntimeParams["application_name"] = engine.AppName(cfg.Label)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()

	w := &Worker{
		cfg:  cfg,
		pool: pool,
		// No keep-alive: a connection idle across a freeze may be closed by
		// the receiver, and a POST is not retried on a dead connection.
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		pid:  os.Getpid(),
		out:  json.NewEncoder(stdout),
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.cmds = w.readCommands(ctx, stdin, cancel)
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	w.emit(engine.Event{Kind: engine.KindProcess, State: "ready", Outcome: "ready",
		Text: fmt.Sprintf("Worker %s (pid %d) is up, claiming as %s.", cfg.Label, w.pid, cfg.Name)})
	return w.loop(ctx)
}

// readCommands reads command lines from stdin. A bad line is reported as
// an error event and changes nothing. In step mode the end of stdin means
// nobody can drive the worker any more, so it stops.
func (w *Worker) readCommands(ctx context.Context, stdin io.Reader, cancel context.CancelFunc) <-chan Command {
	ch := make(chan Command, 16)
	if stdin == nil {
		return ch
	}
	go func() {
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 0, 4096), maxCommandBytes+1)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			c, err := ParseCommand(line)
			if err != nil {
				w.emit(engine.Event{Kind: engine.KindError, Outcome: "bad-command", Error: err.Error(),
					Text: fmt.Sprintf("Worker %s ignored a bad command: %v.", w.cfg.Label, err)})
				continue
			}
			select {
			case ch <- c:
			case <-ctx.Done():
				return
			}
		}
		if err := sc.Err(); err != nil {
			w.emit(engine.Event{Kind: engine.KindError, Outcome: "bad-command", Error: err.Error(),
				Text: fmt.Sprintf("Worker %s stopped reading commands: %v.", w.cfg.Label, err)})
		}
		if w.cfg.Step {
			cancel()
		}
	}()
	return ch
}

func (w *Worker) emit(e engine.Event) {
	if e.Actor == "" {
		e.Actor = w.cfg.Label
	}
	e.Pid = w.pid
	w.outMu.Lock()
	defer w.outMu.Unlock()
	_ = w.out.Encode(e) // stdout gone means the supervisor is gone; nothing to tell
}

// now is the worker's own clock, skew included.
func (w *Worker) now() time.Time { return time.Now().Add(w.cfg.Skew) }

// call is one engine call a worker makes, and what it learned.
type call struct {
	op    string
	held  *engine.Claim // what the worker holds; filled by a claim
	lease time.Time     // a renewal's new lease end
	err   error
	// quietNoJob keeps an empty claim out of the events: an idle worker
	// polls, and one "found no job" says all there is to say.
	quietNoJob bool
}

// run makes an engine call on a Queue that records the statements it runs,
// then reports each statement as an event that carries what the worker
// holds and what the database answered.
func (w *Worker) run(c *call, fn func(q *engine.Queue) error) error {
	var traces []engine.Trace
	q, err := engine.NewQueue(w.pool, engine.QueueConfig{
		Schema:    w.cfg.Schema,
		Guards:    w.cfg.Broken,
		NowFunc:   w.now,
		TraceFunc: func(t engine.Trace) { traces = append(traces, t) },
	})
	if err != nil {
		return err
	}
	c.err = fn(q)
	if c.quietNoJob && errors.Is(c.err, engine.ErrNoJob) {
		return c.err
	}
	for _, t := range traces {
		w.emit(w.statementEvent(c, t))
	}
	return c.err
}

func (w *Worker) loop(ctx context.Context) error {
	done := 0
	idle := false
	for w.cfg.MaxJobs == 0 || done < w.cfg.MaxJobs {
		if err := w.checkpoint(ctx, CheckpointClaim, nil); err != nil {
			return ignoreStop(err)
		}
		var c engine.Claim
		err := w.run(&call{op: "claim", held: &c, quietNoJob: idle && !w.cfg.Step}, func(q *engine.Queue) (err error) {
			c, err = q.Claim(ctx, w.cfg.Name, w.cfg.Lease)
			return err
		})
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
			return err
		}
		if err := w.process(ctx, c); err != nil {
			return ignoreStop(err)
		}
		done++
	}
	return nil
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
	result, _ := json.Marshal(engine.Result{Worker: w.cfg.Label, Owner: w.cfg.Name, Pid: w.pid, JobID: c.JobID, Epoch: c.Epoch,
		Output: fmt.Sprintf("job %d done by worker %s at epoch %d", c.JobID, w.cfg.Label, c.Epoch)})

	if err := w.checkpoint(ctx, CheckpointDeliver, &c); err != nil {
		return err
	}
	deliverErr := w.deliver(ctx, c, result)
	if err := w.checkpoint(ctx, CheckpointCommit, &c); err != nil {
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
		err := w.run(&call{op: "fail", held: &c}, func(q *engine.Queue) error {
			_, err := q.Fail(ctx, c, reason)
			return err
		})
		return w.commitError(ctx, err)
	}
	err := w.run(&call{op: "complete", held: &c}, func(q *engine.Queue) error {
		_, err := q.Complete(ctx, c, result)
		return err
	})
	return w.commitError(ctx, err)
}

// commitError keeps the worker going after a fenced or refused commit (it
// was reported as an event already) and stops it on anything else.
func (w *Worker) commitError(ctx context.Context, err error) error {
	var fe *engine.FencedError
	switch {
	case err == nil, errors.As(err, &fe), errors.Is(err, engine.ErrJobNotFound):
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return err
}

func (w *Worker) heartbeat(ctx context.Context, c engine.Claim) {
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rc := &call{op: "renew", held: &c}
		err := w.run(rc, func(q *engine.Queue) (err error) {
			rc.lease, err = q.Renew(ctx, c, w.cfg.Lease)
			return err
		})
		if err != nil {
			// A lost lease is reported (the statement event says fenced) and
			// renewal stops; the work carries on, as a zombie's would.
			return
		}
	}
}

// checkpoint waits, in step mode, for a command to go on.
func (w *Worker) checkpoint(ctx context.Context, name string, held *engine.Claim) error {
	if w.stopping {
		return errStop
	}
	if !w.cfg.Step {
		return nil
	}
	e := engine.Event{Kind: engine.KindCheckpoint, Name: name, Outcome: "waiting", Text: checkpointText(w.cfg.Label, name, held)}
	if held != nil {
		e.JobID, e.Epoch, e.Owner = held.JobID, engine.Int64(held.Epoch), held.Owner
	}
	w.emit(e)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case c := <-w.cmds:
			if c.Checkpoint != "" && c.Checkpoint != name {
				w.emit(engine.Event{Kind: engine.KindError, Name: name, Outcome: "bad-command",
					Text: fmt.Sprintf("Worker %s waits at %s, not %s: command ignored.", w.cfg.Label, name, c.Checkpoint)})
				continue
			}
			switch c.Cmd {
			case "stop":
				w.stopping = true
				return errStop
			case "fail":
				if name != CheckpointCommit {
					w.emit(engine.Event{Kind: engine.KindError, Name: name, Outcome: "bad-command",
						Text: fmt.Sprintf("Worker %s can only fail at the commit checkpoint: command ignored.", w.cfg.Label)})
					continue
				}
				w.failNext = true
			}
			return nil
		}
	}
}

func checkpointText(label, name string, held *engine.Claim) string {
	switch name {
	case CheckpointDeliver:
		return fmt.Sprintf("Worker %s holds job %d at epoch %d and is ready to call the receiver.", label, held.JobID, held.Epoch)
	case CheckpointCommit:
		return fmt.Sprintf("Worker %s is ready to commit job %d at epoch %d.", label, held.JobID, held.Epoch)
	}
	return fmt.Sprintf("Worker %s is ready to claim a job.", label)
}

// statementEvent turns a statement the worker ran into an event that says
// in words what the database answered.
func (w *Worker) statementEvent(c *call, t engine.Trace) engine.Event {
	e := engine.Event{Kind: engine.KindSQL, Op: c.op, Name: t.Name, SQL: t.SQL, Args: engine.FormatArgs(t.Args),
		Rows: engine.Int64(t.Rows), At: t.DBTime, Owner: w.cfg.Name}
	h := c.held
	if h != nil && h.JobID != 0 {
		e.JobID, e.Epoch = h.JobID, engine.Int64(h.Epoch)
	}
	l := w.cfg.Label
	why := ""
	var fe *engine.FencedError
	if errors.As(c.err, &fe) && len(fe.Reasons) > 0 {
		why = ": " + strings.Join(fe.Reasons, "; ")
	} else {
		fe = nil
	}
	if t.Err != nil {
		e.Kind, e.Outcome, e.Error = engine.KindError, "error", t.Err.Error()
		e.Text = fmt.Sprintf("Worker %s's %s failed: %v.", l, t.Name, t.Err)
		return e
	}
	switch {
	case t.Name == "JobClaim" && t.Rows == 0:
		e.Outcome, e.Text = "no-job", fmt.Sprintf("Worker %s found no claimable job (0 rows).", l)
	case t.Name == "JobClaim":
		e.LeaseUntil = engine.Time(h.LeaseUntil)
		e.Outcome, e.Text = "ok", fmt.Sprintf("Worker %s claimed job %d at epoch %d, leased until %s on the database clock (1 row).",
			l, h.JobID, h.Epoch, h.LeaseUntil.UTC().Format("15:04:05.000"))
	case t.Name == "LeaseRenew" && t.Rows == 0:
		e.Outcome, e.Text = "fenced", fmt.Sprintf("Worker %s's lease renewal on job %d at epoch %d matched no row: its lease is lost.", l, h.JobID, h.Epoch)
		if fe != nil {
			e.Error = strings.Join(fe.Reasons, "; ")
		}
	case t.Name == "LeaseRenew":
		e.LeaseUntil = engine.Time(c.lease)
		e.Outcome, e.Text = "ok", fmt.Sprintf("Worker %s renewed its lease on job %d at epoch %d (1 row).", l, h.JobID, h.Epoch)
	case (t.Name == "JobComplete" || t.Name == "JobFail") && t.Rows == 0:
		e.Outcome, e.Text = "fenced", fmt.Sprintf("Worker %s's %s of job %d at epoch %d matched no row: fenced, its result is dropped.", l, opName(c.op), h.JobID, h.Epoch)
		if fe != nil {
			e.Error = strings.Join(fe.Reasons, "; ")
			e.Text = strings.TrimSuffix(e.Text, ".") + " (" + e.Error + ")."
		}
	case t.Name == "JobComplete":
		e.Outcome, e.Text = "ok", fmt.Sprintf("Worker %s committed job %d at epoch %d (1 row).", l, h.JobID, h.Epoch)
	case t.Name == "JobFail":
		e.Outcome, e.Text = "ok", fmt.Sprintf("Worker %s reported job %d failed at epoch %d (1 row).", l, h.JobID, h.Epoch)
	case t.Name == "JobGet":
		e.Op, e.Outcome = "read", "ok"
		e.Text = fmt.Sprintf("Worker %s reads job %d to see why%s.", l, h.JobID, why)
	default:
		e.Outcome, e.Text = "ok", fmt.Sprintf("Worker %s ran %s (%d rows).", l, t.Name, t.Rows)
	}
	return e
}

func opName(op string) string {
	if op == "complete" {
		return "commit"
	}
	return op
}

// deliver calls the receiver over HTTP with the job id, the epoch held and
// the result, and reports its answer. A refusal is engine.ErrStale.
func (w *Worker) deliver(ctx context.Context, c engine.Claim, result []byte) error {
	d := engine.Delivery{JobID: c.JobID, Epoch: c.Epoch, Owner: c.Owner, Payload: result}
	body, _ := json.Marshal(d)
	e := engine.Event{Kind: engine.KindCall, Op: "deliver", Name: "ReceiverCall", JobID: c.JobID, Epoch: engine.Int64(c.Epoch),
		Owner: c.Owner, Args: []string{"POST " + redactURL(w.cfg.ReceiverURL), string(body)}}
	rc, status, err := w.post(ctx, body)
	e.At = rc.DBTime
	switch {
	case err != nil:
		e.Kind, e.Outcome, e.Error = engine.KindError, "error", err.Error()
		e.Text = fmt.Sprintf("Worker %s could not reach the receiver: %v.", w.cfg.Label, err)
	case status == http.StatusConflict:
		e.Outcome = string(rc.Decision)
		e.Text = fmt.Sprintf("The receiver refused worker %s's epoch %d for job %d: it holds epoch %d (HTTP 409).", w.cfg.Label, c.Epoch, c.JobID, rc.HeldEpoch)
		err = &engine.StaleError{JobID: c.JobID, Epoch: c.Epoch, HeldEpoch: rc.HeldEpoch}
	default:
		e.Outcome = string(rc.Decision)
		e.Text = fmt.Sprintf("The receiver accepted worker %s's epoch %d for job %d (%s, HTTP %d).", w.cfg.Label, c.Epoch, c.JobID, rc.Decision, status)
	}
	w.emit(e)
	return err
}

// post sends one delivery and decodes the receiver's answer.
func (w *Worker) post(ctx context.Context, body []byte) (engine.Receipt, int, error) {
	var rc engine.Receipt
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.ReceiverURL, bytes.NewReader(body))
	if err != nil {
		return rc, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.http.Do(req)
	if err != nil {
		return rc, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return rc, resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		if e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return rc, resp.StatusCode, fmt.Errorf("receiver answered HTTP %d: %s", resp.StatusCode, e.Error)
	}
	if err := json.Unmarshal(b, &rc); err != nil {
		return rc, resp.StatusCode, fmt.Errorf("receiver answered HTTP %d with a body that is not a receipt: %v", resp.StatusCode, err)
	}
	return rc, resp.StatusCode, nil
}

// redactURL keeps a receiver URL's last path element only: the path may
// carry a secret key (the playground's per-run receiver), and events are
// shown to everyone who watches.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the receiver"
	}
	return ".../" + path.Base(u.Path)
}
