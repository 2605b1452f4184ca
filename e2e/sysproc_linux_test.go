package e2e

import "syscall"

// serverAttr returns the process attributes of a `fencelab serve` under
// test: the kernel SIGKILLs it if this test binary dies.
func serverAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
