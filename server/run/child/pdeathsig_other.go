//go:build !linux && !freebsd

package child

import "syscall"

// HasParentDeath says whether the kernel here has a parent-death signal:
// not here (macOS, the other BSDs), where only a watchdog stops a child
// when its parent dies.
const HasParentDeath = false

// setParentDeath does nothing: the kernel has no such signal here.
func setParentDeath(*syscall.SysProcAttr, syscall.Signal) {}
