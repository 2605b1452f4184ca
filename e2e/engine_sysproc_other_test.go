//go:build !linux

package e2e

import "syscall"

// engineAttr returns the process attributes of an engine's process: a
// process group of its own. Without a parent-death signal, an engine whose
// test binary died lives on until it is stopped by hand.
func engineAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
