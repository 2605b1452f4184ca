package harness

import (
	"syscall"

	"github.com/fencelab/fencelab/server/run/child"
)

// workerAttr puts a worker in a process group of its own, so that one
// signal freezes, thaws or kills all of it (the shell, the reader's
// program and anything they started), and, where the kernel has a
// parent-death signal (Linux), asks it to SIGKILL the worker when the
// thread that forked it dies: the spawner's locked thread (see spawner).
// Elsewhere the case kills the group when it ends, on an error and on a
// cancelled context, but a fencelab that is itself SIGKILLed leaves it
// running.
func workerAttr() *syscall.SysProcAttr {
	return child.SysProcAttr(syscall.SIGKILL)
}

// reaperAttr puts a worker's reaper (reaper.go) in a process group of its
// own, apart from the worker's, so that freezing the worker never freezes
// its reaper, and gives it SIGTERM as its parent-death signal: a reaper
// whose harness died kills what the worker left, then ends.
func reaperAttr() *syscall.SysProcAttr {
	return child.SysProcAttr(syscall.SIGTERM)
}
