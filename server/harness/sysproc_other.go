//go:build !linux

package harness

import "syscall"

// workerAttr puts a worker in a process group of its own, so that one
// signal freezes, thaws or kills all of it. There is no parent-death
// signal here: the case kills the group when it ends, on an error and on
// a cancelled context, but a fencelab that is itself SIGKILLed leaves it
// running.
func workerAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// groupLive reports whether the group still has a process, a zombie
// included: there is no /proc here to tell them apart.
func groupLive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}
