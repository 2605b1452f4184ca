package child

import (
	"errors"
	"os/exec"
	"runtime"
	"syscall"
)

// Options says how Start starts a child. The zero Options is the rule: a
// process group of its own, SIGKILL at this process's death where the
// kernel has a parent-death signal, no watchdog.
type Options struct {
	// ParentDeath is the signal the kernel sends the child when this
	// process dies, where it has such a signal (HasParentDeath). 0 means
	// SIGKILL; a child that cleans up after itself may want SIGTERM
	// (postgres: SIGQUIT, its immediate shutdown).
	ParentDeath syscall.Signal
	// NoParentDeath leaves the parent-death signal out even where the
	// kernel has one, so that only a watchdog stops the child when this
	// process dies, as on macOS: for the tests of a watchdog.
	NoParentDeath bool
	// Watchdog, when set, is told of the child right after it starts
	// (Watch), and that it is gone once Process.Wait has reaped it
	// (Unwatch). If Watch fails, Start kills the child's group, reaps it
	// and fails: unwatched, it could outlive this process.
	Watchdog *Watchdog
}

// Process is a child that Start started.
type Process struct {
	Cmd *exec.Cmd
	// Pid is the child's process id, which is also its process group's.
	Pid int
	wd  *Watchdog
}

// Start starts cmd as a child that must not outlive this process (see
// the package comment): it sets cmd.SysProcAttr, keeping what the caller
// set there (a Credential, say) but for Setpgid, Pgid and the
// parent-death signal, and starts cmd, from the spawning thread when it
// has a parent-death signal; then it lists the child with opts.Watchdog.
// Everything else (stdin, pipes, extra files, environment, a context) is
// cmd's as the caller made it. Reap the child with Process.Wait, not
// cmd.Wait: it also takes the child off the watchdog's list.
func Start(cmd *exec.Cmd, opts Options) (*Process, error) {
	attr := &syscall.SysProcAttr{}
	if cmd.SysProcAttr != nil {
		a := *cmd.SysProcAttr // the caller's may serve another command too
		attr = &a
	}
	attr.Setpgid, attr.Pgid = true, 0
	sig := opts.ParentDeath
	if sig == 0 {
		sig = syscall.SIGKILL
	}
	if opts.NoParentDeath {
		sig = 0
	}
	setParentDeath(attr, sig)
	cmd.SysProcAttr = attr
	var err error
	if HasParentDeath && sig != 0 {
		err = startOnSpawner(cmd)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		return nil, err
	}
	p := &Process{Cmd: cmd, Pid: cmd.Process.Pid, wd: opts.Watchdog}
	if p.wd != nil {
		if err := p.wd.Watch(p.Pid); err != nil {
			_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			return nil, err
		}
	}
	return p, nil
}

// Wait waits for the child to exit, as cmd.Wait does (and returns what it
// returns), then takes it off the watchdog's list, if it has one. An
// Unwatch that fails is dropped: the watchdog has been stopped, or is
// gone, and either way will not signal the reaped pid.
func (p *Process) Wait() error {
	err := p.Cmd.Wait()
	if p.wd != nil {
		_ = p.wd.Unwatch(p.Pid)
	}
	return err
}

// Signal sends sig to the child's process group: the child and whatever
// it started that stayed in the group. A group that is gone already is
// no error.
func (p *Process) Signal(sig syscall.Signal) error {
	if err := syscall.Kill(-p.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// The spawner is one goroutine, locked to its OS thread for the life of
// the process, that starts every child with a parent-death signal: Linux
// sends that signal when the forking thread exits, and this one never
// does, nor does the Go runtime ever hand it to another goroutine (one
// that might lock it and exit). It starts with the package, where the
// kernel has such a signal, so that it is there before any goroutine is
// counted (a test's leak check) and before any child is started.
var spawnReqs = make(chan spawnReq)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func init() {
	if HasParentDeath {
		go spawner()
	}
}

func spawner() {
	runtime.LockOSThread() // for good: see spawnReqs
	for req := range spawnReqs {
		req.done <- req.cmd.Start()
	}
}

// startOnSpawner starts cmd from the spawner's thread.
func startOnSpawner(cmd *exec.Cmd) error {
	req := spawnReq{cmd: cmd, done: make(chan error, 1)}
	spawnReqs <- req
	return <-req.done
}
