package nemesis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelab/fencelab/server/run/child"
)

// The worker protocol, one line at a time: a worker prints lineReady on
// its standard output once it is connected and set up, waits for lineGo
// on its standard input, works, and stops when its standard input ends.
const (
	lineReady = "ready"
	lineGo    = "go"
)

// Group is a set of worker processes started together. Its methods are
// safe for concurrent use; the nemesis (Schedule.Run) may freeze and thaw
// its workers while another goroutine waits for them or stops them.
type Group struct {
	procs []*proc
	// reaped is closed once every worker has exited and been waited for.
	reaped chan struct{}

	// dog, where there is no parent-death signal (macOS), SIGKILLs the
	// workers if this process dies; nil elsewhere.
	dog *child.Watchdog

	stopOnce sync.Once
	stopErr  error
}

type proc struct {
	cmd    *exec.Cmd
	child  *child.Process // once started
	stdin  io.WriteCloser
	stderr *tailBuffer
	ready  chan struct{} // closed when the worker says it is ready
	done   chan struct{} // closed once the worker has exited and been reaped
	err    error         // Wait's error, set before done is closed

	mu        sync.Mutex
	readyOnce sync.Once
}

// Start starts cmds as worker processes with child.Start, each in a
// process group of its own and, on Linux, with SIGKILL as its
// parent-death signal; elsewhere a watchdog kills them if this process
// dies. Start sets each command's SysProcAttr, Stdin, Stdout and Stderr. It returns once
// all have started, or, if one fails to start, kills those that did and
// returns the error. The caller owns the group and must end it with Stop
// or Kill.
func Start(cmds []*exec.Cmd) (*Group, error) {
	g := &Group{reaped: make(chan struct{})}
	var pipes []*os.File // the workers' ends of their stdout pipes, closed once started
	undo := func() {
		if g.dog != nil {
			_ = g.dog.Stop()
		}
		for _, w := range pipes {
			w.Close() // its reader then ends
		}
		for _, p := range g.procs {
			p.stdin.Close()
		}
	}
	for _, c := range cmds {
		p := &proc{cmd: c, stderr: &tailBuffer{max: 8 << 10}, ready: make(chan struct{}), done: make(chan struct{})}
		if !child.HasParentDeath && g.dog == nil {
			dog, err := child.StartWatchdog(child.Config{Name: "fencelab-nemesis-watchdog"})
			if err != nil {
				undo()
				return nil, err
			}
			g.dog = dog
		}
		stdin, err := c.StdinPipe()
		if err != nil {
			undo()
			return nil, err
		}
		r, w, err := os.Pipe()
		if err != nil {
			stdin.Close()
			undo()
			return nil, err
		}
		c.Stdout, c.Stderr = w, p.stderr
		p.stdin = stdin
		pipes = append(pipes, w)
		g.procs = append(g.procs, p)
		go p.read(r)
	}
	var err error
	for i, p := range g.procs {
		if p.child, err = child.Start(p.cmd, child.Options{Watchdog: g.dog}); err != nil {
			for _, q := range g.procs[:i] {
				_ = q.child.Signal(syscall.SIGKILL)
				_ = q.child.Wait()
			}
			if g.dog != nil {
				_ = g.dog.Stop()
			}
			err = fmt.Errorf("start worker %d: %w", i, err)
			break
		}
	}
	for _, w := range pipes {
		w.Close()
	}
	if err != nil {
		return nil, err
	}
	var all sync.WaitGroup
	for _, p := range g.procs {
		all.Add(1)
		go func() {
			defer all.Done()
			p.err = p.child.Wait() // and off the watchdog's list
			close(p.done)
		}()
	}
	go func() {
		all.Wait()
		if g.dog != nil {
			_ = g.dog.Stop()
		}
		close(g.reaped)
	}()
	return g, nil
}

// runChild runs cmd to its end as a child (child.Start: its own group,
// SIGKILL as its parent-death signal where there is one). Where there is
// none, it is left to cmd's context to end it.
func runChild(cmd *exec.Cmd) error {
	p, err := child.Start(cmd, child.Options{})
	if err != nil {
		return err
	}
	return p.Wait()
}

// read follows a worker's standard output until it ends.
func (p *proc) read(r *os.File) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == lineReady {
			p.readyOnce.Do(func() { close(p.ready) })
		}
	}
}

// Len returns the number of workers.
func (g *Group) Len() int { return len(g.procs) }

// Pid returns worker i's process id, which is also its process group's.
func (g *Group) Pid(i int) int { return g.procs[i].cmd.Process.Pid }

// Alive reports whether worker i has not exited yet.
func (g *Group) Alive(i int) bool {
	select {
	case <-g.procs[i].done:
		return false
	default:
		return true
	}
}

// Freeze stops worker i's process group with SIGSTOP: it stops at once,
// wherever it is, and knows nothing of the time that passes.
func (g *Group) Freeze(i int) error { return g.signal(i, syscall.SIGSTOP) }

// Thaw resumes worker i's process group with SIGCONT.
func (g *Group) Thaw(i int) error { return g.signal(i, syscall.SIGCONT) }

func (g *Group) signal(i int, sig syscall.Signal) error {
	if !g.Alive(i) {
		return nil
	}
	return g.procs[i].child.Signal(sig)
}

// Ready waits until every worker has said it is ready, and fails if one
// exits first or ctx ends.
func (g *Group) Ready(ctx context.Context) error {
	for i, p := range g.procs {
		select {
		case <-p.ready:
		case <-p.done:
			return fmt.Errorf("worker %d exited before it was ready: %v\n%s", i, p.err, p.stderr)
		case <-ctx.Done():
			return fmt.Errorf("worker %d is not ready: %w", i, ctx.Err())
		}
	}
	return nil
}

// Go tells every worker to start working.
func (g *Group) Go() error {
	for i, p := range g.procs {
		p.mu.Lock()
		_, err := io.WriteString(p.stdin, lineGo+"\n")
		p.mu.Unlock()
		if err != nil {
			return fmt.Errorf("tell worker %d to go: %w", i, err)
		}
	}
	return nil
}

// Stop thaws every worker, ends their standard input (which tells them to
// stop) and waits for them to exit, for timeout at most; those still
// running then are killed. It returns an error naming each worker that did
// not exit by itself with status 0, with the end of what it printed on its
// standard error. Stop may be called again (and Kill after it): later calls
// return the first's result.
func (g *Group) Stop(timeout time.Duration) error {
	g.stopOnce.Do(func() { g.stopErr = g.stop(timeout) })
	return g.stopErr
}

func (g *Group) stop(timeout time.Duration) error {
	for i := range g.procs {
		_ = g.Thaw(i)
	}
	for _, p := range g.procs {
		p.mu.Lock()
		p.stdin.Close()
		p.mu.Unlock()
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var errs []error
	for i, p := range g.procs {
		select {
		case <-p.done:
		case <-deadline.C:
			deadline.Reset(0) // the rest are killed at once too
		}
		select {
		case <-p.done:
			if p.err != nil {
				errs = append(errs, fmt.Errorf("worker %d (pid %d): %v\n%s", i, p.cmd.Process.Pid, p.err, p.stderr))
			}
		default:
			_ = p.child.Signal(syscall.SIGKILL)
			<-p.done
			errs = append(errs, fmt.Errorf("worker %d (pid %d) did not stop within %v and was killed\n%s", i, p.cmd.Process.Pid, timeout, p.stderr))
		}
	}
	return errors.Join(errs...)
}

// Kill ends every worker at once, SIGCONT then SIGKILL to each process
// group, and waits for them: the cleanup for a run that failed. After a
// Stop it only waits.
func (g *Group) Kill() {
	for i, p := range g.procs {
		if g.Alive(i) {
			_ = p.child.Signal(syscall.SIGCONT)
			_ = p.child.Signal(syscall.SIGKILL)
		}
	}
	<-g.reaped
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// Serve is the worker's side of the protocol, for the main function of a
// worker process that is set up and connected: it says it is ready, waits
// to be told to go, then runs work with a context that ends when its
// standard input ends (the group's Stop, or the parent's death), and
// returns work's error. If the input ends before "go", work never runs.
func Serve(ctx context.Context, in io.Reader, out io.Writer, work func(ctx context.Context) error) error {
	if _, err := fmt.Fprintln(out, lineReady); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	told := false
	for !told && sc.Scan() {
		told = strings.TrimSpace(sc.Text()) == lineGo
	}
	if !told {
		return nil // stopped before it began
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for sc.Scan() {
		}
		stop()
	}()
	return work(wctx)
}
