package nemesis

import "syscall"

// procAttr returns a worker's process attributes: a process group of its
// own, so that SIGSTOP and SIGCONT reach all of it and a terminal's Ctrl-C
// does not, and SIGKILL when the thread that started it ends (Start keeps
// that thread locked until every worker is reaped), so that no worker
// outlives a parent that was killed.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
