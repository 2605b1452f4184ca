package engines

// The processes of an engine: an X server, a WebDriver, a browser. Each is
// started in a process group of its own with a parent-death signal
// (child.Start), with the environment of the test binary (pgtest's suite
// mark included: they are stopped by their test's cleanup, well before
// pgtest's check) plus the engine's own mark, so that its cleanup finds
// every process it made, whoever their parent is by then (a browser's
// crash helper leaves the group; a web process outlives its parent for a
// moment).

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/server/run/child"
)

// engineMarkEnv marks every process of one engine's test.
const engineMarkEnv = "FENCELAB_E2E_ENGINE"

// engineProcs is the processes of one engine's test, and their mark.
type engineProcs struct {
	t     *testing.T
	name  string
	mark  string // FENCELAB_E2E_ENGINE=…
	procs []*engineProc
}

// engineProc is one process an engine's test started.
type engineProc struct {
	name   string
	cmd    *exec.Cmd
	stderr e2etest.LockedBuffer
	done   chan struct{} // closed once it has exited and been reaped
	err    error         // cmd.Wait's; read after done
}

// newEngineProcs makes the mark of the engine's processes; t's cleanup
// stops them all, newest first, and fails t if any process with the mark
// is alive 10s later (killing those).
func newEngineProcs(t *testing.T, name string) *engineProcs {
	ep := &engineProcs{t: t, name: name,
		mark: fmt.Sprintf("%s=%s-%d-%d", engineMarkEnv, name, os.Getpid(), time.Now().UnixNano())}
	t.Cleanup(ep.stopAll)
	return ep
}

// start starts path with args, env added to the test binary's environment
// and the mark, stdout and stderr kept (and logged if the test fails),
// extra files from fd 3.
func (ep *engineProcs) start(name, path string, args, env []string, extra ...*os.File) (*engineProc, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = append(append(os.Environ(), env...), ep.mark)
	cmd.ExtraFiles = extra
	// A child that left the group (a browser's crash helper) may hold the
	// output pipe open after the process has exited: Wait gives up on it
	// after this long, and stopAll's check by mark finds the child.
	cmd.WaitDelay = 3 * time.Second
	p := &engineProc{name: name, cmd: cmd, done: make(chan struct{})}
	cmd.Stdout = writerFunc(p.stderr.WriteString)
	cmd.Stderr = writerFunc(p.stderr.WriteString)
	// Its own group, so that its cleanup can kill it with every child
	// that stays in the group, and a parent-death signal, so that it dies
	// with this test binary. Where the kernel has no such signal (macOS),
	// an engine whose test binary died lives on until it is stopped by
	// hand.
	proc, err := child.Start(cmd, child.Options{})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	go func() {
		p.err = proc.Wait()
		close(p.done)
	}()
	ep.procs = append(ep.procs, p)
	return p, nil
}

// writerFunc is an io.Writer of strings.
type writerFunc func(string)

func (f writerFunc) Write(b []byte) (int, error) { f(string(b)); return len(b), nil }

// exited reports whether the process has exited.
func (p *engineProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process's group, then SIGKILL to it after 5s.
func (p *engineProc) stop() {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
	// Whatever is left in its group, the process itself included.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
}

// stopAll stops every process, newest first, and checks that no process
// with the mark is left.
func (ep *engineProcs) stopAll() {
	t := ep.t
	t0 := time.Now()
	for i := len(ep.procs) - 1; i >= 0; i-- {
		p := ep.procs[i]
		if p.exited() {
			if !t.Failed() {
				t.Errorf("e2e (%s): %s exited on its own during the test: %v\n%s", ep.name, p.name, p.err, e2etest.Indent(lastLines(p.stderr.String(), 40)))
			}
		} else {
			p.stop()
		}
		if t.Failed() {
			t.Logf("e2e (%s): %s's output (its end):\n%s", ep.name, p.name, e2etest.Indent(lastLines(p.stderr.String(), 40)))
		}
	}
	if left := e2etest.WaitMarkedGone(ep.mark, 10*time.Second); len(left) > 0 {
		e2etest.KillMarked(ep.mark)
		t.Errorf("e2e (%s): processes still running 10s after the engine was stopped (killed now):\n  %s", ep.name, strings.Join(left, "\n  "))
		return
	}
	t.Logf("e2e (%s): stopped in %v, no process left", ep.name, time.Since(t0).Round(time.Millisecond))
}

// lastLines is the last n lines of s, each cut at 300 bytes: a browser's
// output can be long.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > 300 {
			lines[i] = l[:300] + "…"
		}
	}
	return strings.Join(lines, "\n")
}
