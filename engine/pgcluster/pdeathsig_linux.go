package pgcluster

import "syscall"

// setPdeathsig asks the kernel to send sig to the child when its parent
// dies. Go applies it after switching to attr.Credential, so the uid change
// does not clear it (prctl(2): a credential change resets the setting).
func setPdeathsig(attr *syscall.SysProcAttr, sig syscall.Signal) {
	attr.Pdeathsig = sig
}
