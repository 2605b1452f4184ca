package child

import (
	"os"
	"syscall"
)

// onMainThread reports whether the calling goroutine runs on the
// process's main thread, which the Go runtime never ends (a locked
// goroutine that exits there leaves it wedged instead).
func onMainThread() bool { return syscall.Gettid() == os.Getpid() }
