//go:build !linux && !freebsd

package child

import "syscall"

// SetParentDeath asks the kernel to send sig to the child started with
// attr when its parent dies, and reports whether it could: true on Linux
// and FreeBSD, false elsewhere. Here (macOS, the other BSDs) the kernel
// has no such signal, so attr is left as it is and only a watchdog
// (Start) stops the child then.
func SetParentDeath(attr *syscall.SysProcAttr, sig syscall.Signal) bool {
	return false
}
