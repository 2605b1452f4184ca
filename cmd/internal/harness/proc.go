package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelab/fencelab/server/run/child"
)

// proc is one worker process: the reader's command under /bin/sh -c, the
// leader of its own process group, under a reaper where there is one
// (reaper.go): pid is the shell's, child the reaper's. Its output goes, a line at a time and
// prefixed with its label, to the harness's Stderr, and its last lines
// are kept for the errors that name what it did not do.
type proc struct {
	label   string
	pid     int
	started time.Time
	child   *child.Process // started by child.Start: see workerCommand
	out     *outputReader
	done    chan struct{} // closed once the leader has been reaped
	state   *os.ProcessState
	waitErr error
}

// startProc starts the worker, with env as its whole environment.
func startProc(label, command, dir string, env []string, sink *lineSink, redact []string) (*proc, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start worker %s: %w", label, err)
	}
	cmd, opts, report, err := workerCommand(command, env)
	if err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("start worker %s: %w", label, err)
	}
	cmd.Dir = dir
	cmd.Stdin = nil // /dev/null: a worker reads nothing from us
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &proc{label: label, done: make(chan struct{}),
		out: &outputReader{r: pr, label: label, sink: sink, redact: redact, done: make(chan struct{})}}
	p.child, err = child.Start(cmd, opts)
	pw.Close() // the worker holds the write end now; EOF comes when all of its group has gone
	if err != nil {
		pr.Close()
		closeAll(cmd.ExtraFiles)
		if report != nil {
			report.Close()
		}
		return nil, fmt.Errorf("start worker %s: %w", label, err)
	}
	closeAll(cmd.ExtraFiles)
	p.pid, p.started = p.child.Pid, time.Now()
	if report != nil {
		// Under a reaper, the worker is the shell the reaper started.
		shell, err := readPid(report, 5*time.Second)
		if err != nil {
			_ = cmd.Process.Kill()
			_ = p.child.Wait()
			pr.Close()
			return nil, fmt.Errorf("start worker %s: %w", label, err)
		}
		p.pid = shell
	}
	go p.out.run()
	go func() {
		p.waitErr = p.child.Wait()
		p.state = cmd.ProcessState
		// Whatever the leader left behind in its group goes with it: the
		// contract is one job, then exit. The group id is the leader's pid
		// (Setpgid), not yet reusable this soon.
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		// Its last words are read before its exit is told, so that what
		// says why it ended can quote them: the pipe ends once the group
		// is gone, a moment after the leader.
		select {
		case <-p.out.done:
		case <-time.After(500 * time.Millisecond):
		}
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the leader has been reaped.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the worker's whole process group, unless it is gone.
func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal worker %s (%v): %w", p.label, sig, err)
	}
	return nil
}

// kill SIGKILLs the worker's group and waits, a bounded time, for the
// leader to be reaped, every other process of its group to be gone, and
// its output to end.
func (p *proc) kill() {
	_ = p.signal(syscall.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	select {
	case <-p.done:
	case <-time.After(time.Until(deadline)):
		_ = p.child.Cmd.Process.Kill() // a reaper that did not end with its worker
	}
	for child.GroupLive(p.pid) && time.Now().Before(deadline) {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		time.Sleep(10 * time.Millisecond)
	}
	p.out.finish(2 * time.Second)
}

// exitWords says how the worker ended, for people: "exited with status 1",
// "was killed by signal 9".
func (p *proc) exitWords() string {
	if p.state == nil {
		if p.waitErr != nil {
			return "could not be waited for: " + p.waitErr.Error()
		}
		return "is still running"
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("was killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", p.state.ExitCode())
}

// exitedOK reports whether the worker exited by itself with status 0.
func (p *proc) exitedOK() bool { return p.state != nil && p.state.Success() }

// lastWords is the worker's last line of output, quoted, or "".
func (p *proc) lastWords() string {
	if l := p.out.last(); l != "" {
		return fmt.Sprintf("; its last output: %q", l)
	}
	return ""
}

// lineSink writes the workers' lines to one writer, one whole line at a
// time, so that two workers' lines never interleave inside a line.
type lineSink struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *lineSink) line(label, text string) {
	if s.w == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, "worker %s: %s\n", label, text)
}

// maxLine cuts a line of a worker's output: the rest is dropped.
const maxLine = 4 << 10

// outputReader reads a worker's stdout and stderr (one pipe) line by line.
type outputReader struct {
	r      *os.File
	label  string
	sink   *lineSink
	redact []string // secrets a line must not show: the database URL, the receiver's URLs
	done   chan struct{}
	mu     sync.Mutex
	tail   string
}

func (o *outputReader) run() {
	defer close(o.done)
	br := bufio.NewReaderSize(o.r, maxLine)
	for {
		b, isPrefix, err := br.ReadLine()
		if len(b) > 0 || (err == nil && !isPrefix) {
			line := string(b)
			for _, s := range o.redact {
				if s != "" {
					line = strings.ReplaceAll(line, s, "<redacted>")
				}
			}
			o.sink.line(o.label, line)
			if t := strings.TrimSpace(line); t != "" {
				o.mu.Lock()
				o.tail = t
				o.mu.Unlock()
			}
		}
		for isPrefix && err == nil { // the rest of a long line
			_, isPrefix, err = br.ReadLine()
		}
		if err != nil {
			return
		}
	}
}

// finish waits up to d for the output to end (every process holding the
// pipe gone), then closes the pipe so the reader ends anyway: a process
// that left the group (setsid) must not keep a goroutine of ours.
func (o *outputReader) finish(d time.Duration) {
	select {
	case <-o.done:
	case <-time.After(d):
	}
	o.r.Close()
	<-o.done
}

func (o *outputReader) last() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.tail) > 200 {
		return o.tail[:200] + "…"
	}
	return o.tail
}

// workerCommand is the command that runs a worker, and how child.Start
// starts it: on Linux a reaper (this program again, see reaper.go) that
// runs the shell and reports its pid on the returned pipe; elsewhere the
// shell itself, and no pipe.
//
// Either leads a process group of its own (child.Start): the shell's, so
// that one signal freezes, thaws or kills all of it (the shell, the
// reader's program and anything they started); the reaper's apart from
// the worker's, so that freezing the worker never freezes its reaper.
// Where the kernel has a parent-death signal (Linux), the reaper gets
// SIGTERM by it when the harness dies, and then kills what the worker
// left and ends; a shell without a reaper gets SIGKILL. Elsewhere the
// case kills the group when it ends, on an error and on a cancelled
// context, but a fencelab that is itself SIGKILLed leaves it running.
func workerCommand(command string, env []string) (*exec.Cmd, child.Options, *os.File, error) {
	self, err := os.Executable()
	if !useReaper || err != nil {
		cmd := exec.Command("/bin/sh", "-c", command)
		cmd.Env = env
		return cmd, child.Options{ParentDeath: syscall.SIGKILL}, nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, child.Options{}, nil, err
	}
	cmd := exec.Command(self, command)
	cmd.Env = append(withoutReaperEnv(env), reaperEnv+"=1")
	cmd.ExtraFiles = []*os.File{w}
	return cmd, child.Options{ParentDeath: syscall.SIGTERM}, r, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// readPid reads the shell's pid, which the reaper writes on its fd 3.
func readPid(r *os.File, timeout time.Duration) (int, error) {
	defer r.Close()
	_ = r.SetReadDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("the reaper did not say its worker's pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("the reaper said %q, not a pid", line)
	}
	return pid, nil
}
