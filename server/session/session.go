package session

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/control"
	"github.com/fencelab/fencelab/server/hub"
	"github.com/fencelab/fencelab/server/receiver"
	"github.com/fencelab/fencelab/server/recording"
	"github.com/fencelab/fencelab/server/runner"
)

// Session is one visitor's playground: its runs and their event log. The
// person holding Token drives; anyone with ID may watch. Safe for
// concurrent use.
type Session struct {
	ID      string
	Token   string
	Created time.Time
	Log     *hub.Log

	m      *Manager
	serial string
	ctx    context.Context
	cancel context.CancelFunc

	mu         sync.Mutex
	lastActive time.Time
	current    *runHandle
	runs       []*runHandle // newest last; bounded
	runSerial  int64
	closed     bool
}

// maxKeptRuns bounds how many ended runs a session remembers.
const maxKeptRuns = 200

func newSession(m *Manager, id, token, serial string) *Session {
	s := &Session{ID: id, Token: token, Created: time.Now(), m: m, serial: serial, lastActive: time.Now(),
		Log: hub.New(hub.Config{MaxEvents: m.cfg.Limits.MaxEvents, SubscriberBuffer: m.cfg.Limits.SocketBuffer})}
	s.ctx, s.cancel = context.WithCancel(m.ctx)
	return s
}

func (s *Session) short() string { return s.ID[:6] }

// CanDrive reports whether token is this session's control token.
func (s *Session) CanDrive(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.Token)) == 1
}

// Touch marks the session as in use.
func (s *Session) Touch() {
	s.mu.Lock()
	s.lastActive = time.Now()
	s.mu.Unlock()
}

func (s *Session) idleFor() time.Duration {
	if s.Log.Subscribers() > 0 {
		return 0 // someone is watching
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.lastActive)
}

// runHandle is one run of a session, live or ended.
type runHandle struct {
	s          *Session
	id         string
	cfg        engine.RunConfig
	mode       string // auto, step, free
	background bool   // a matrix cell: not the session's current run
	schemas    engine.Schemas
	key        string // receiver endpoint key
	receiver   *engine.Receiver
	run        *runner.Run
	started    time.Time
	slot       bool

	mu      sync.Mutex
	paused  bool
	pace    time.Duration
	wake    chan struct{}
	ended   time.Time
	outcome *engine.Outcome
	report  *engine.Report
	errText string
	endOnce sync.Once
	done    chan struct{}
}

// emit adds an event to the session's log.
func (s *Session) emit(e engine.Event) { s.Log.Append(e) }

func (h *runHandle) emitFromOutside(e engine.Event) {
	if r := h.run; r != nil {
		r.Emit(context.Background(), e)
		return
	}
	e.Run = h.id
	h.s.emit(e)
}

// Result is what a command answers.
type Result struct {
	OK      bool            `json:"ok"`
	Run     string          `json:"run,omitempty"`
	Step    *engine.Step    `json:"step,omitempty"`
	Done    bool            `json:"done,omitempty"`
	Worker  string          `json:"worker,omitempty"`
	JobID   int64           `json:"job_id,omitempty"`
	Outcome *engine.Outcome `json:"outcome,omitempty"`
	Report  *engine.Report  `json:"report,omitempty"`
	Runs    []string        `json:"runs,omitempty"`
}

// Execute carries out one decoded command. The caller has checked that it
// may drive. Errors wrap ErrConflict, ErrBusy, engine.ErrInvalidInput or
// runner.ErrLimit when the command could not be carried out as asked.
func (s *Session) Execute(ctx context.Context, c control.Command) (Result, error) {
	s.Touch()
	switch c.Action {
	case control.Run:
		return s.startRun(ctx, c)
	case control.Reset:
		h := s.currentRun()
		if h == nil {
			return Result{OK: true}, nil
		}
		h.end(ctx, "reset")
		return Result{OK: true, Run: h.id}, nil
	case control.Matrix:
		return s.startMatrix(c)
	}
	h := s.currentRun()
	if h == nil {
		return Result{}, fmt.Errorf("%w: there is no run: start one with {\"action\":\"run\",\"ordering\":\"zombie-first\"}", ErrConflict)
	}
	if h.isEnded() {
		return Result{}, fmt.Errorf("%w: run %s has ended; start another", ErrConflict, h.id)
	}
	res := Result{OK: true, Run: h.id}
	switch c.Action {
	case control.Step:
		if h.mode == "free" {
			return res, fmt.Errorf("%w: free play has no steps", ErrConflict)
		}
		h.setPaused(true)
		st, err := h.run.Step(ctx)
		if errors.Is(err, runner.ErrDone) {
			err = nil
		} else {
			res.Step = &st
		}
		if err != nil {
			h.fail(err)
			return res, err
		}
		if h.run.Done() {
			h.finish(ctx)
			res.Done, res.Outcome = true, h.outcomeCopy()
		}
		return res, nil
	case control.Pause, control.Play:
		if h.mode != "auto" {
			return res, fmt.Errorf("%w: only an auto run plays on its own; this run is %s", ErrConflict, h.mode)
		}
		h.setPaused(c.Action == control.Pause)
		s.emitRunState(h)
		return res, nil
	case control.Pace:
		if h.mode != "auto" {
			return res, fmt.Errorf("%w: only an auto run has a pace; this run is %s", ErrConflict, h.mode)
		}
		h.setPace(time.Duration(*c.PaceMS) * time.Millisecond)
		s.emitRunState(h)
		return res, nil
	case control.Finish:
		if h.mode == "free" {
			h.finish(ctx)
			res.Done, res.Report = true, h.reportCopy()
			return res, nil
		}
		h.setPaused(true)
		for !h.run.Done() {
			if _, err := h.run.Step(ctx); err != nil && !errors.Is(err, runner.ErrDone) {
				h.fail(err)
				return res, err
			}
		}
		h.finish(ctx)
		res.Done, res.Outcome = true, h.outcomeCopy()
		return res, nil
	case control.PauseWorker:
		return res, h.run.Pause(ctx, c.Worker)
	case control.ResumeWorker:
		return res, h.run.Resume(ctx, c.Worker)
	case control.KillWorker:
		return res, h.run.Kill(ctx, c.Worker)
	case control.AddJob:
		if h.mode != "free" {
			return res, fmt.Errorf("%w: jobs can only be added in free play", ErrConflict)
		}
		id, err := h.run.AddJob(ctx, c.Payload)
		res.JobID = id
		return res, err
	case control.AddWorker:
		if h.mode != "free" {
			return res, fmt.Errorf("%w: workers can only be added in free play", ErrConflict)
		}
		label, err := h.run.AddWorker(ctx, runner.WorkerOptions{Skew: time.Duration(c.SkewMS) * time.Millisecond, Work: time.Duration(c.WorkMS) * time.Millisecond})
		res.Worker = label
		return res, err
	case control.Verdict:
		if h.mode != "free" {
			return res, fmt.Errorf("%w: a scripted run gives its verdict when it ends", ErrConflict)
		}
		rep, err := h.run.Report(ctx)
		if err != nil {
			return res, err
		}
		data, _ := json.Marshal(rep)
		h.run.Emit(ctx, engine.Event{Kind: engine.KindVerdict, Actor: "runner", Outcome: safeWord(rep.Safe), Text: rep.Verdict, Data: data})
		res.Report = &rep
		return res, nil
	}
	return res, fmt.Errorf("%w: action %q is not handled", engine.ErrInvalidInput, c.Action)
}

func safeWord(safe bool) string {
	if safe {
		return "safe"
	}
	return "unsafe"
}

func (s *Session) currentRun() *runHandle {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

// newHandle names a run and its schemas.
func (s *Session) newHandle(cfg engine.RunConfig, mode string, background bool) (*runHandle, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the session has ended", ErrNotFound)
	}
	s.runSerial++
	n := strconv.FormatInt(s.runSerial, 36)
	s.mu.Unlock()
	base := schemaPrefix + s.m.instance + "_" + s.serial + "_" + n
	return &runHandle{s: s, id: "r" + n, cfg: cfg, mode: mode, background: background,
		schemas: engine.Schemas{Jobs: base + "_j", Receiver: base + "_r"}, pace: 900 * time.Millisecond,
		wake: make(chan struct{}, 1), done: make(chan struct{})}, nil
}

// startRun ends the current run and starts a new one.
func (s *Session) startRun(ctx context.Context, c control.Command) (Result, error) {
	rc, err := c.RunConfig()
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", engine.ErrInvalidInput, err)
	}
	lim := s.m.cfg.Limits
	if rc.Lease < lim.MinLease || rc.Lease > lim.MaxLease {
		return Result{}, fmt.Errorf("%w: lease %v must be between %v and %v on this server", engine.ErrInvalidInput, rc.Lease, lim.MinLease, lim.MaxLease)
	}
	mode := c.Mode
	if rc.Ordering == engine.FreePlay {
		mode = "free"
	}
	if old := s.currentRun(); old != nil {
		old.end(ctx, "replaced by a new run")
	}
	h, err := s.newHandle(rc, mode, false)
	if err != nil {
		return Result{}, err
	}
	if c.PaceMS != nil {
		h.pace = time.Duration(*c.PaceMS) * time.Millisecond
	}
	if err := h.start(ctx, 0); err != nil {
		return Result{}, err
	}
	s.mu.Lock()
	s.current = h
	s.keep(h)
	s.mu.Unlock()
	s.emitRunState(h)
	if mode == "auto" {
		go h.autoLoop()
	}
	return Result{OK: true, Run: h.id}, nil
}

// keep remembers a run; s.mu must be held.
func (s *Session) keep(h *runHandle) {
	s.runs = append(s.runs, h)
	if over := len(s.runs) - maxKeptRuns; over > 0 {
		s.runs = append([]*runHandle(nil), s.runs[over:]...)
	}
}

// start creates the run's schemas and receiver and starts its workers.
func (h *runHandle) start(ctx context.Context, waitForSlot time.Duration) error {
	m := h.s.m
	if h.isEnded() {
		return fmt.Errorf("%w: run %s was stopped before it started", ErrConflict, h.id)
	}
	if err := m.acquireRun(ctx, waitForSlot); err != nil {
		return err
	}
	h.slot = true
	h.started = time.Now()
	fail := func(err error) error {
		h.cleanup()
		return err
	}
	if err := engine.Setup(ctx, m.cfg.Pool, h.schemas); err != nil {
		return fail(err)
	}
	receiverURL := ""
	var view engine.ReceiverView
	if m.cfg.ExternalReceiver != "" {
		// Job ids must not meet other runs' at a shared receiver.
		st := engine.JobIDRestart(h.schemas.Jobs, time.Now().UnixMicro())
		if _, err := m.cfg.Pool.Exec(ctx, st.SQL); err != nil {
			return fail(err)
		}
		receiverURL = m.cfg.ExternalReceiver + "/deliveries"
		view = &receiver.Client{BaseURL: m.cfg.ExternalReceiver}
	} else {
		rcv, err := engine.NewReceiver(m.cfg.Pool, engine.ReceiverConfig{Schema: h.schemas.Receiver, Guards: h.cfg.Broken})
		if err != nil {
			return fail(err)
		}
		h.receiver = rcv
		h.key = m.registerReceiver(h)
		receiverURL = m.cfg.ReceiverBase + h.key + "/deliveries"
	}
	r, err := runner.Start(ctx, runner.Config{
		ID: h.id, Run: h.cfg, Pool: m.cfg.Pool, DatabaseURL: m.cfg.DatabaseURL, Schemas: h.schemas,
		ReceiverURL: receiverURL, ReceiverView: view, Supervisor: m.cfg.Supervisor, EmitFunc: h.s.emit,
		MaxWorkers: m.cfg.Limits.MaxWorkers, MaxJobs: m.cfg.Limits.MaxJobs, MaxStall: m.cfg.Limits.MaxStall,
	})
	if err != nil {
		return fail(err)
	}
	h.mu.Lock()
	h.run = r
	ended := !h.ended.IsZero()
	h.mu.Unlock()
	if ended { // stopped while it was starting: give it all back
		h.cleanup()
		return fmt.Errorf("%w: run %s was stopped while it started", ErrConflict, h.id)
	}
	return nil
}

// cleanup gives back what a run holds: its workers, receiver endpoint,
// schemas and run slot. Safe to call more than once.
func (h *runHandle) cleanup() {
	if h.run != nil {
		h.run.Close()
	}
	m := h.s.m
	if h.key != "" {
		m.unregisterReceiver(h.key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := engine.Drop(ctx, m.cfg.Pool, h.schemas); err != nil {
		m.cfg.Log.Warn("could not drop a run's schemas", "run", h.id, "err", err)
	}
	if h.slot {
		h.slot = false
		m.releaseRun()
	}
}

func (h *runHandle) isEnded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.ended.IsZero()
}

func (h *runHandle) setPaused(p bool) {
	h.mu.Lock()
	h.paused = p
	h.mu.Unlock()
	h.poke()
}

func (h *runHandle) setPace(d time.Duration) {
	h.mu.Lock()
	h.pace = d
	h.mu.Unlock()
	h.poke()
}

func (h *runHandle) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// autoLoop plays an auto run's steps at its pace until it is done, paused
// or ended.
func (h *runHandle) autoLoop() {
	ctx := h.s.ctx
	for {
		select {
		case <-h.done:
			return
		case <-ctx.Done():
			return
		default:
		}
		h.mu.Lock()
		paused, pace := h.paused, h.pace
		h.mu.Unlock()
		if paused {
			select {
			case <-h.wake:
			case <-h.done:
				return
			case <-ctx.Done():
				return
			}
			continue
		}
		if h.run.StepIndex() > 0 {
			t := time.NewTimer(pace)
			select {
			case <-t.C:
			case <-h.wake:
				t.Stop()
				continue // the pace changed, or a pause came: look again
			case <-h.done:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		h.mu.Lock()
		paused = h.paused
		h.mu.Unlock()
		if paused {
			continue
		}
		if _, err := h.run.Step(ctx); err != nil && !errors.Is(err, runner.ErrDone) {
			if h.isEnded() {
				return
			}
			h.fail(err)
			return
		}
		if h.run.Done() {
			h.finish(ctx)
			return
		}
	}
}

// finish evaluates a run and ends it, once.
func (h *runHandle) finish(ctx context.Context) {
	h.endOnce.Do(func() {
		if h.mode == "free" {
			_, _ = h.run.Evaluate(ctx) // emits the report as the verdict
			if rep, err := h.run.Report(ctx); err == nil {
				h.mu.Lock()
				h.report = &rep
				h.mu.Unlock()
			}
		} else {
			o, err := h.run.Evaluate(ctx)
			h.mu.Lock()
			if err != nil {
				h.errText = err.Error()
			} else {
				h.outcome = &o
			}
			h.mu.Unlock()
			if err == nil {
				h.record(o)
			}
		}
		h.close("finished")
	})
}

// record keeps a finished run's events, to replay when the server is busy.
func (h *runHandle) record(o engine.Outcome) {
	store := h.s.m.cfg.Recordings
	if store == nil {
		return
	}
	evs, err := h.s.Log.Since(0, h.id, 0)
	if err != nil {
		return
	}
	store.Add(recording.Recording{Ordering: h.cfg.Ordering, Broken: h.cfg.Broken.Names(), SameIdentity: h.cfg.SameIdentity,
		LeaseMS: h.cfg.Lease.Milliseconds(), Recorded: time.Now(), Outcome: &o, Events: evs})
}

// fail ends a run that could not go on, saying why.
func (h *runHandle) fail(err error) {
	h.endOnce.Do(func() {
		h.mu.Lock()
		h.errText = err.Error()
		h.mu.Unlock()
		h.run.Emit(context.Background(), engine.Event{Kind: engine.KindError, Actor: "runner", Error: err.Error(),
			Text: "The run stopped: " + err.Error()})
		h.close("failed")
	})
}

// end stops a run that has not finished (reset, a new run, expiry).
func (h *runHandle) end(ctx context.Context, why string) {
	h.endOnce.Do(func() {
		if h.run != nil {
			h.run.Emit(ctx, engine.Event{Kind: engine.KindNote, Actor: "runner", Outcome: "ended", Text: "The run was stopped: " + why + "."})
		}
		h.close(why)
	})
}

// close tears a run down and tells the watchers.
func (h *runHandle) close(why string) {
	h.mu.Lock()
	h.ended = time.Now()
	h.mu.Unlock()
	close(h.done)
	h.cleanup()
	h.s.emitRunState(h)
}

func (h *runHandle) outcomeCopy() *engine.Outcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.outcome
}

func (h *runHandle) reportCopy() *engine.Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.report
}

// expireRuns finishes runs that have gone on longer than max.
func (s *Session) expireRuns(max time.Duration) {
	s.mu.Lock()
	var old []*runHandle
	for _, h := range s.runs {
		if !h.isEnded() && !h.started.IsZero() && time.Since(h.started) > max {
			old = append(old, h)
		}
	}
	s.mu.Unlock()
	for _, h := range old {
		h.end(context.Background(), fmt.Sprintf("it ran for longer than %v, this server's limit", max))
	}
}

// close ends the session: every run, then the log and its sockets.
func (s *Session) close(why string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	runs := append([]*runHandle(nil), s.runs...)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, h := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.end(context.Background(), why)
		}()
	}
	wg.Wait()
	s.cancel()
	s.emit(engine.Event{Kind: engine.KindNote, Actor: "server", At: time.Now(), Outcome: "session-ended", Text: "Session ended: " + why + "."})
	s.Log.Close()
}
