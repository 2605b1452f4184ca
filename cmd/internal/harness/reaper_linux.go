package harness

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/fencelab/fencelab/server/run/child"
)

// useReaper says whether workers run under a reaper (see reaper.go).
const useReaper = true

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, prctl(2)

// runReaper is the reaper's whole life; it returns the exit status to
// leave with, or ends the process with the shell's own signal.
func runReaper(command string) int {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		fmt.Fprintf(os.Stderr, "fencelab harness: cannot become a subreaper: %v\n", e)
		return 126
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Env = withoutReaperEnv(os.Environ())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	report := os.NewFile(3, "pid")
	// Its own group, and SIGKILL when the reaper dies.
	shell, err := child.Start(cmd, child.Options{ParentDeath: syscall.SIGKILL})
	if err != nil {
		fmt.Fprintf(os.Stderr, "fencelab harness: %v\n", err)
		return 127
	}
	if report != nil {
		_, _ = report.WriteString(strconv.Itoa(cmd.Process.Pid) + "\n")
		report.Close()
	}
	done := make(chan struct{})
	go func() { _ = shell.Wait(); close(done) }()
	select {
	case <-done:
	case <-sigs:
		_ = shell.Signal(syscall.SIGKILL)
		<-done
	}
	sweep(cmd.Process.Pid)
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		signal.Reset()
		_ = syscall.Kill(os.Getpid(), ws.Signal())
		time.Sleep(time.Second) // the signal ends us; should it not, say so
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// sweep kills the shell's group and every child the reaper has (orphans
// of the worker, reparented to it), and reaps them, until none is left.
func sweep(shell int) {
	self := os.Getpid()
	for {
		_ = syscall.Kill(-shell, syscall.SIGKILL)
		for _, pid := range childrenOf(self) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.ECHILD {
			return
		}
		if err != nil && err != syscall.EINTR {
			return
		}
		_ = pid
	}
}

// childrenOf lists the live processes whose parent is ppid, from /proc.
func childrenOf(ppid int) []int {
	var out []int
	procs, _ := child.Procs()
	for _, p := range procs {
		if p.PPid == ppid && p.State != 'Z' {
			out = append(out, p.Pid)
		}
	}
	return out
}
