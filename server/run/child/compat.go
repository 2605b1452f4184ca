package child

import "syscall"

// SysProcAttr returns a process group of its own and sig as the
// parent-death signal where there is one. Deprecated: use Start; it goes
// once every spawner does.
func SysProcAttr(sig syscall.Signal) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	SetParentDeath(attr, sig)
	return attr
}

// SetParentDeath sets sig as attr's parent-death signal where there is
// one, and reports whether there is. Deprecated: use Start.
func SetParentDeath(attr *syscall.SysProcAttr, sig syscall.Signal) bool {
	setParentDeath(attr, sig)
	return HasParentDeath
}
