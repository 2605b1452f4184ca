//go:build !linux && !freebsd

package watchdog

import "syscall"

// SetParentDeath reports false and leaves attr as it is: this kernel
// (macOS, the other BSDs) has no parent-death signal, so only a watchdog
// (Start) stops the child when its parent dies.
func SetParentDeath(attr *syscall.SysProcAttr, sig syscall.Signal) bool {
	return false
}
