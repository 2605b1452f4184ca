package child

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// waitState waits up to 5s for State(pid) to satisfy ok, and fails the
// test if it does not.
func waitState(t *testing.T, pid int, what string, ok func(byte) bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ok(State(pid)) {
			return
		}
	}
	t.Fatalf("State(%d) = %q, want %s", pid, State(pid), what)
}

// TestState checks the platform's reading of a process's state: sleeping
// or running, stopped by SIGSTOP, running again after SIGCONT, a zombie
// once killed, and gone once reaped.
func TestState(t *testing.T) {
	t.Parallel()
	// A live process: running, sleeping, or in a disk wait (D) on a busy
	// machine; never stopped, a zombie, or gone.
	if st := State(os.Getpid()); st != 'R' && st != 'S' && st != 'D' {
		t.Errorf("State(self) = %q, want R, S or D", st)
	}
	cmd, err := startChild(roleChild, &syscall.SysProcAttr{Setpgid: true})
	if err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	})
	running := func(b byte) bool { return b == 'R' || b == 'S' || b == 'D' }
	waitState(t, pid, "R, S or D", running)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, "T (stopped)", func(b byte) bool { return b == 'T' })
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, "R, S or D (continued)", running)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, "Z (killed, not reaped)", func(b byte) bool { return b == 'Z' })
	if !Gone(State(pid)) {
		t.Errorf("Gone(%q) = false for a zombie", State(pid))
	}
	_ = cmd.Wait()
	reaped = true
	if st := State(pid); st != 0 {
		t.Errorf("State(%d) after reaping = %q, want 0", pid, st)
	}
}

// TestProcs finds a child in the process table with its parent, its own
// process group and its state, and GroupLive follows the group: alive
// while its leader runs or is stopped, not once it is a zombie.
func TestProcs(t *testing.T) {
	t.Parallel()
	if _, ok := Procs(); !ok {
		t.Skipf("no process table to list on %s", runtime.GOOS)
	}
	cmd, err := startChild(roleChild, &syscall.SysProcAttr{Setpgid: true})
	if err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, "T (stopped)", func(b byte) bool { return b == 'T' })
	procs, _ := Procs()
	var found *Proc
	for i := range procs {
		if procs[i].Pid == pid {
			found = &procs[i]
		}
	}
	if want := (Proc{Pid: pid, PPid: os.Getpid(), Pgrp: pid, State: 'T'}); found == nil || *found != want {
		t.Fatalf("Procs lists the child as %+v, want %+v", found, want)
	}
	if !GroupLive(pid) {
		t.Errorf("GroupLive(%d) = false while its stopped leader lives", pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, "Z (killed, not reaped)", func(b byte) bool { return b == 'Z' })
	if GroupLive(pid) {
		t.Errorf("GroupLive(%d) = true when its only process is a zombie", pid)
	}
}
