//go:build !linux

package e2e

import "syscall"

// serverAttr returns the process attributes of a `fencelab serve` under
// test. Without a parent-death signal, a server whose test binary died
// lives on until it is stopped by hand; its workers still die with it
// through its watchdog.
func serverAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{}
}
