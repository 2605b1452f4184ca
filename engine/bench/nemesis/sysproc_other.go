//go:build !linux

package nemesis

import "syscall"

// procAttr returns a worker's process attributes: a process group of its
// own. There is no parent-death signal here; a worker whose parent dies
// sees its standard input end and stops, and one that is frozen then gets
// SIGHUP and SIGCONT from the kernel, its process group being orphaned.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
