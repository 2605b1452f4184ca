//go:build !linux

package supervisor

import "syscall"

// workerAttr returns the process attributes of a new worker: its own
// process group, so a terminal's Ctrl-C is ours to pass on and our signals
// reach all of it. There is no parent-death signal here; the watchdog
// kills the workers when we die.
func workerAttr(cfg Config) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// needWatchdog reports whether workers need the pipe watchdog: always,
// without a parent-death signal nothing else kills them when we die.
func needWatchdog(cfg Config) bool {
	return true
}
