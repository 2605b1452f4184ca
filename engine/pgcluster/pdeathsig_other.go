//go:build !linux

package pgcluster

import "syscall"

// setPdeathsig does nothing where there is no parent-death signal in
// syscall.SysProcAttr; the watchdog alone then stops the server when the
// parent dies.
func setPdeathsig(attr *syscall.SysProcAttr, sig syscall.Signal) {}
