package e2e

import "syscall"

// engineAttr returns the process attributes of an engine's process (an X
// server, a WebDriver, a browser): a process group of its own, so that its
// cleanup can kill it with every child that stays in the group, and a
// parent-death signal, so that it dies with this test binary.
func engineAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
