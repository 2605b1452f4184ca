//go:build linux || freebsd

package child

import "syscall"

// HasParentDeath says whether the kernel here has a parent-death signal:
// true on Linux and FreeBSD. Where it is false (macOS), only a watchdog
// stops a child when its parent dies.
const HasParentDeath = true

// setParentDeath asks the kernel to send sig (0: none) to the child
// started with attr when its parent dies. Go applies the signal after it
// switches to attr.Credential, so a child started as another user keeps
// it (prctl(2): a credential change resets the setting).
func setParentDeath(attr *syscall.SysProcAttr, sig syscall.Signal) {
	attr.Pdeathsig = sig
}
