package engines

import (
	"syscall"

	"github.com/fencelab/fencelab/server/run/child"
)

// engineAttr returns the process attributes of an engine's process (an X
// server, a WebDriver, a browser): a process group of its own, so that its
// cleanup can kill it with every child that stays in the group, and a
// parent-death signal, so that it dies with this test binary. Where the
// kernel has no such signal (macOS), an engine whose test binary died
// lives on until it is stopped by hand.
func engineAttr() *syscall.SysProcAttr {
	return child.SysProcAttr(syscall.SIGKILL)
}
