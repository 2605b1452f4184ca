package child

import (
	"errors"
	"os/exec"
	"reflect"
	"syscall"
	"testing"
)

// startProcess starts a child of the given role with Start and returns
// once it is ready; the test's cleanup kills and reaps it if the test did
// not.
func startProcess(t *testing.T, role string, opts Options) *Process {
	t.Helper()
	var p *Process
	_, err := startChildWith(role, func(cmd *exec.Cmd) error {
		var err error
		p, err = Start(cmd, opts)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.Cmd.ProcessState == nil {
			_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
			_ = p.Wait()
		}
	})
	return p
}

// TestStart_OwnGroup: a child Start started leads a process group of its
// own, not ours, and Signal reaches it there: SIGSTOP freezes it (State
// says T), SIGCONT thaws it, SIGKILL kills it; once it is reaped, Signal
// is no error.
func TestStart_OwnGroup(t *testing.T) {
	t.Parallel()
	p := startProcess(t, roleChild, Options{})
	if pg, err := syscall.Getpgid(p.Pid); err != nil || pg != p.Pid {
		t.Fatalf("child (pid %d) is in process group %d (%v), want its own", p.Pid, pg, err)
	}
	if pg := syscall.Getpgrp(); pg == p.Pid {
		t.Fatalf("the test is in the child's group %d", pg)
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, p.Pid, "T (stopped)", func(b byte) bool { return b == 'T' })
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState(t, p.Pid, "R, S or D (continued)", func(b byte) bool { return b == 'R' || b == 'S' || b == 'D' })
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := p.Wait(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("Wait after SIGKILL: %v, want killed by SIGKILL", err)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Errorf("Signal to a reaped child: %v, want nil", err)
	}
}

// TestStart_KeepsTheCallersAttr: Start sets its own attributes on a copy
// of the command's SysProcAttr, and leaves the caller's struct, which may
// serve another command, as it was.
func TestStart_KeepsTheCallersAttr(t *testing.T) {
	t.Parallel()
	attr := &syscall.SysProcAttr{}
	var cmd *exec.Cmd
	_, err := startChildWith(roleChild, func(c *exec.Cmd) error {
		cmd = c
		c.SysProcAttr = attr
		_, err := Start(c, Options{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	if attr.Setpgid || !reflect.DeepEqual(*attr, syscall.SysProcAttr{}) {
		t.Errorf("Start changed the caller's SysProcAttr: %+v", attr)
	}
	if !cmd.SysProcAttr.Setpgid {
		t.Errorf("the command's SysProcAttr has no Setpgid: %+v", cmd.SysProcAttr)
	}
}

// TestStart_FailsWhenItCannotWatch: with a watchdog that cannot take the
// child (it is stopped), Start fails, and leaves no child behind: killed
// and reaped.
func TestStart_FailsWhenItCannotWatch(t *testing.T) {
	t.Parallel()
	wd := startDog(t, Config{})
	if err := wd.Stop(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	if _, err := Start(cmd, Options{Watchdog: wd}); !errors.Is(err, errStopped) {
		t.Fatalf("Start with a stopped watchdog: %v, want %v", err, errStopped)
	}
	if cmd.Process == nil {
		t.Fatal("Start failed before it started the child: nothing tested")
	}
	if st := State(cmd.Process.Pid); st != 0 {
		t.Errorf("the child Start could not watch (pid %d) is in state %q, want reaped", cmd.Process.Pid, st)
	}
}
