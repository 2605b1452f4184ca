// Package supervisor spawns worker processes and owns them until they are
// reaped. Each worker is `fencelab worker` started from the fencelab binary,
// in a process group of its own, with a parent-death signal on Linux and a
// pipe watchdog (server/run/child) where there is none, so no worker
// outlives its supervisor: not on a clean exit, a crash, Ctrl-C or SIGKILL.
//
// Pause is SIGSTOP, resume is SIGCONT, kill is SIGKILL, each sent to the
// worker's process group. A worker's real state comes from /proc on Linux,
// from the kernel's process table (sysctl) on macOS.
package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/child"
	"github.com/fencelab/fencelab/server/run/worker"
)

// Config configures a Supervisor.
type Config struct {
	// Exe is the fencelab binary to run as `Exe worker ...`. Default: this
	// process's own executable.
	Exe string
	// ExtraEnv is added to the workers' environment.
	ExtraEnv []string
	Log      *slog.Logger
	// Watchdog kills the workers through a pipe watchdog (server/run/child) if
	// the supervisor dies without Close, even on Linux, where the
	// parent-death signal already does. Elsewhere the watchdog is always on.
	Watchdog bool

	noPdeathsig bool // tests only: no parent-death signal even on Linux (see needWatchdog)
}

// Supervisor starts and tracks worker processes. It is safe for concurrent
// use. Close kills and reaps every worker it started.
type Supervisor struct {
	cfg     Config
	mu      sync.Mutex
	procs   map[*Proc]struct{}
	waiting []*Proc // prestarted, not yet assigned, oldest first
	closed  bool
	wd      *child.Watchdog // nil until a worker needs it (see needWatchdog)
	wg      sync.WaitGroup  // every process's readers
}

// New returns a Supervisor.
func New(cfg Config) (*Supervisor, error) {
	if cfg.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("supervisor: find own executable: %w", err)
		}
		cfg.Exe = exe
	}
	if _, err := os.Stat(cfg.Exe); err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Supervisor{cfg: cfg, procs: map[*Proc]struct{}{}}, nil
}

// Spec says how to start one worker.
type Spec struct {
	Label string   // shown in events; also passed as --label
	Args  []string // flags for `fencelab worker`, without --label
	// Env is added to the worker's environment: the place for secrets such
	// as DATABASE_URL, which a command line would show to every local user.
	Env []string
	// EventFunc receives every event the worker prints and every change of
	// its process state, in order, from one goroutine per worker. It must
	// not block for long.
	EventFunc func(p *Proc, e protocol.Event)
}

// Proc is one worker process.
type Proc struct {
	Label string // set before Start returns it, and never again
	Pid   int
	sup   *Supervisor
	proc  *child.Process
	stdin io.WriteCloser
	inMu  sync.Mutex
	// bound is who the worker is and whom its events go to: set when it
	// starts, or, for a prestarted one, when Start assigns it (until then
	// nil: it has nothing to say, and what it says is logged).
	bound atomic.Pointer[binding]
	done  chan struct{}
	state *os.ProcessState // set before done is closed
}

type binding struct {
	label string
	fn    func(p *Proc, e protocol.Event)
}

func (p *Proc) emit(e protocol.Event) {
	b := p.bound.Load()
	if b == nil {
		// Its exit, when the server ends or the process is killed, is
		// nothing to tell; what it writes on stderr before its
		// assignment is.
		if e.Note != nil && e.Note.Code == protocol.NoteLog {
			p.sup.cfg.Log.Warn("a prestarted worker, not yet assigned, wrote", "pid", p.Pid, "line", e.Note.Line)
		} else {
			p.sup.cfg.Log.Debug("a prestarted worker, not yet assigned", "pid", p.Pid, "kind", e.Kind)
		}
		return
	}
	if b.fn != nil {
		b.fn(p, e)
	}
}

// label is the worker's label in its events.
func (p *Proc) label() string {
	if b := p.bound.Load(); b != nil {
		return b.label
	}
	return "prestarted"
}

// Start starts a worker: one of the prestarted (Prestart), told by its
// assignment to be this one, if there is one waiting, and otherwise a new
// process. The worker is running when Start returns; its first event
// says it is ready.
func (s *Supervisor) Start(spec Spec) (*Proc, error) {
	if err := engine.ValidateOwner(spec.Label); err != nil {
		return nil, fmt.Errorf("start worker: label: %w", err)
	}
	if p := s.assign(spec); p != nil {
		return p, nil
	}
	args := append([]string{"worker", "--label", spec.Label}, spec.Args...)
	p, err := s.spawn(args, spec.Env, &binding{label: spec.Label, fn: spec.EventFunc}, false)
	if err != nil {
		return nil, fmt.Errorf("start worker %s: %w", spec.Label, err)
	}
	s.cfg.Log.Info("worker started", "label", spec.Label, "pid", p.Pid)
	return p, nil
}

// spawn starts `Exe args...` with env added to the environment, bound to
// b, or, with b nil, as a prestarted worker that waits for Start.
func (s *Supervisor) spawn(args, env []string, b *binding, prestarted bool) (*Proc, error) {
	cmd := exec.Command(s.cfg.Exe, args...)
	cmd.Env = append(append(os.Environ(), s.cfg.ExtraEnv...), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p := &Proc{sup: s, stdin: stdin, done: make(chan struct{})}
	if b != nil {
		p.Label = b.label
		p.bound.Store(b)
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("supervisor is closed")
	}
	if needWatchdog(s.cfg) {
		if err := s.startWatchdog(); err != nil {
			s.mu.Unlock()
			return nil, err
		}
	}
	// Its own group, and it dies with us: the parent-death signal where
	// there is one, s's watchdog (watchdog.go) where it is needed.
	proc, err := child.Start(cmd, child.Options{NoParentDeath: s.cfg.noPdeathsig, Watchdog: s.wd})
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	p.proc, p.Pid = proc, proc.Pid
	s.procs[p] = struct{}{}
	if prestarted {
		s.waiting = append(s.waiting, p)
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go p.run(stdout, stderr)
	return p, nil
}

// run reads the worker's output, then reaps it and reports how it ended.
func (p *Proc) run(stdout, stderr io.Reader) {
	defer p.sup.wg.Done()
	var wg sync.WaitGroup
	lines := make(chan protocol.Event, 64)
	wg.Add(2)
	long := func(stream string, n int) protocol.Event {
		l := p.label()
		return protocol.Event{Kind: protocol.KindNote, Actor: l, Note: &protocol.NoteEvent{Code: protocol.NoteOutput, Worker: l,
			Line: fmt.Sprintf("%s wrote a line of %d bytes on %s, over the %d a line may hold: it was skipped", l, n, stream, MaxLineBytes)}}
	}
	go func() {
		defer wg.Done()
		readLines(stdout, MaxLineBytes, func(b []byte) {
			var e protocol.Event
			if err := json.Unmarshal(b, &e); err != nil || e.Kind == "" || e.V != protocol.ProtocolVersion {
				e = protocol.Event{Kind: protocol.KindNote, Note: &protocol.NoteEvent{Code: protocol.NoteOutput, Worker: p.label(), Line: protocol.Cut(string(b), 300)}}
			}
			e.Actor = p.label() // a worker speaks for itself only
			lines <- e
		}, func(n int) { lines <- long("stdout", n) })
	}()
	go func() {
		defer wg.Done()
		readLines(stderr, MaxLineBytes, func(b []byte) {
			l := p.label()
			lines <- protocol.Event{Kind: protocol.KindNote, Actor: l, Note: &protocol.NoteEvent{Code: protocol.NoteLog, Worker: l, Line: protocol.Cut(string(b), 300)}}
		}, func(n int) { lines <- long("stderr", n) })
	}()
	go func() {
		wg.Wait()
		close(lines)
	}()
	for e := range lines {
		p.emit(e)
	}
	// Its state is all there is to know, and a failed wait leaves it nil.
	// The wait also takes it off the watchdog's list.
	_ = p.proc.Wait()
	p.state = p.proc.Cmd.ProcessState
	p.sup.mu.Lock()
	delete(p.sup.procs, p)
	p.sup.waiting = slices.DeleteFunc(p.sup.waiting, func(q *Proc) bool { return q == p })
	p.sup.mu.Unlock()
	close(p.done)
	_ = p.stdin.Close()
	st := p.Status()
	pe := &protocol.ProcessEvent{Change: protocol.ProcExited, Pid: p.Pid, State: st.ProcState(), Signal: st.Signal}
	if st.Signal == "" && p.state != nil {
		code := st.ExitCode
		pe.ExitCode = &code
	}
	p.emit(protocol.Event{Kind: protocol.KindProcess, Actor: p.label(), Process: pe})
	level := slog.LevelInfo
	if p.bound.Load() == nil {
		level = slog.LevelDebug // a prestarted one nobody took: hundreds at a shutdown
	}
	p.sup.cfg.Log.Log(context.Background(), level, "worker reaped", "label", p.label(), "pid", p.Pid, "state", st.String())
}

// MaxLineBytes is the longest line a worker's output may hold; a longer
// one is skipped, with a note that says how long it was, and the lines
// after it are read as before.
const MaxLineBytes = 1 << 20

// readLines calls line for each line of r (without its end), and long,
// with its length, for each line over max bytes, which it skips: it never
// stops reading before r ends, so a worker is never left blocked on a
// pipe nobody reads. Its memory grows with the longest line read so far
// (up to max), not with max: a worker's two pipes hold 4 KiB each while
// its lines are short, as they are, and the server holds hundreds of
// workers at once, prestarted ones included. The slice line is given is
// good until it returns.
func readLines(r io.Reader, max int, line func([]byte), long func(n int)) {
	br := bufio.NewReaderSize(r, lineChunk)
	var acc []byte // a line longer than br's buffer, so far
	n := 0         // the line's length so far, counted past max too
	for {
		b, err := br.ReadSlice('\n')
		n += len(b)
		if errors.Is(err, bufio.ErrBufferFull) {
			if n <= max {
				acc = append(acc, b...)
			}
			continue
		}
		switch {
		case n > max:
			long(n - 1)
		case len(acc) > 0:
			acc = append(acc, b...)
			line(bytes.TrimRight(acc, "\r\n"))
		case len(b) > 0:
			line(bytes.TrimRight(b, "\r\n"))
		}
		n, acc = 0, acc[:0]
		if cap(acc) > 16*lineChunk {
			acc = nil // one long line does not keep its memory for the worker's life
		}
		if err != nil {
			return
		}
	}
}

// lineChunk is what readLines reads a pipe by.
const lineChunk = 4 << 10

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return sig.String()
}

// Send writes one command line to the worker's stdin.
func (p *Proc) Send(c worker.Command) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	select {
	case <-p.done:
		return fmt.Errorf("worker %s has exited", p.Label)
	default:
	}
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("send to worker %s: %w", p.Label, err)
	}
	return nil
}

// Done is closed once the worker has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

func (p *Proc) signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return fmt.Errorf("worker %s (pid %d) has already exited", p.Label, p.Pid)
	default:
	}
	if err := p.proc.Signal(sig); err != nil {
		return fmt.Errorf("signal worker %s (pid %d): %w", p.Label, p.Pid, err)
	}
	return nil
}

// Pause freezes the worker with SIGSTOP and returns once the operating
// system shows it stopped.
func (p *Proc) Pause(ctx context.Context) error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	return p.waitState(ctx, func(s State) bool { return s.Code == 'T' || s.Exited })
}

// Resume thaws a paused worker with SIGCONT and returns once the operating
// system shows it no longer stopped.
func (p *Proc) Resume(ctx context.Context) error {
	if err := p.signal(syscall.SIGCONT); err != nil {
		return err
	}
	return p.waitState(ctx, func(s State) bool { return s.Code != 'T' })
}

// Kill kills the worker with SIGKILL and returns once it is reaped.
func (p *Proc) Kill(ctx context.Context) error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		select {
		case <-p.done:
			return nil
		default:
			return err
		}
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kill worker %s: %w", p.Label, ctx.Err())
	}
}

func (p *Proc) waitState(ctx context.Context, ok func(State) bool) error {
	for {
		if s := p.Status(); ok(s) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("worker %s: waiting for its state to change: %w", p.Label, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// State is a worker's real process state.
type State struct {
	Code     byte // the state letter from ProcState: R, S, D, T, t, Z, ...; 0 once reaped
	Exited   bool
	ExitCode int    // when Exited and not killed by a signal
	Signal   string // when Exited by a signal
}

// ProcState is the state as the event protocol names it.
func (s State) ProcState() protocol.ProcState {
	switch {
	case s.Exited && s.Signal != "":
		return protocol.StateKilled
	case s.Exited:
		return protocol.StateExited
	}
	switch s.Code {
	case 'R':
		return protocol.StateRunning
	case 'S', 'D', 'I':
		return protocol.StateSleeping
	case 'T', 't':
		return protocol.StateStopped
	case 'Z':
		return protocol.StateZombie
	}
	return protocol.StateUnknown
}

// Letter returns the state letter the kernel reports, or "" once reaped.
func (s State) Letter() string {
	if s.Code == 0 {
		return ""
	}
	return string(s.Code)
}

// String says the state for a log line.
func (s State) String() string {
	switch {
	case s.Exited && s.Signal != "":
		return "killed by " + s.Signal
	case s.Exited:
		return fmt.Sprintf("exited (%d)", s.ExitCode)
	}
	return string(s.ProcState())
}

// Status reads the worker's state: from /proc on Linux, from the kernel's
// process table (sysctl) on macOS while it lives (child.State), from its
// wait status once reaped.
func (p *Proc) Status() State {
	select {
	case <-p.done:
		st := State{Exited: true}
		if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			st.Signal = signalName(ws.Signal())
		} else if p.state != nil {
			st.ExitCode = p.state.ExitCode()
		}
		return st
	default:
	}
	return State{Code: child.State(p.Pid)}
}

// Procs returns the workers that are still running, not counting the
// prestarted ones that wait for a Start (Prestarted).
func (s *Supervisor) Procs() []*Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Proc, 0, len(s.procs))
	for p := range s.procs {
		if !slices.Contains(s.waiting, p) {
			out = append(out, p)
		}
	}
	return out
}

// Close kills every worker, waits until each is reaped and its output read,
// and stops the watchdog. It is safe to call more than once.
func (s *Supervisor) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	procs := make([]*Proc, 0, len(s.procs))
	for p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	for _, p := range procs {
		_ = p.proc.Signal(syscall.SIGKILL)
	}
	s.wg.Wait()
	return s.stopWatchdog()
}
