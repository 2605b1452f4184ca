//go:build linux || freebsd

package child

import "syscall"

// SetParentDeath asks the kernel to send sig to the child started with
// attr when its parent dies, and reports whether it could: true on Linux
// and FreeBSD, false elsewhere (macOS), where only a watchdog (Start)
// stops the child then. Go applies the signal after it switches to
// attr.Credential, so a child started as another user keeps it (prctl(2):
// a credential change resets the setting). On Linux it fires when the
// forking thread exits; see the package comment.
func SetParentDeath(attr *syscall.SysProcAttr, sig syscall.Signal) bool {
	attr.Pdeathsig = sig
	return true
}
