package e2etest

import (
	"syscall"

	"github.com/fencelab/fencelab/server/run/child"
)

// serverAttr returns the process attributes of a `fencelab serve` under
// test: the kernel SIGKILLs it if this test binary dies. Where the kernel
// has no parent-death signal (macOS), a server whose test binary died
// lives on until it is stopped by hand; its workers still die with it
// through its watchdog.
func serverAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	child.SetParentDeath(attr, syscall.SIGKILL)
	return attr
}
