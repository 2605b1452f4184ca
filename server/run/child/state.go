package child

import "syscall"

// Proc is one process as the kernel's process table shows it.
type Proc struct {
	Pid, PPid int
	Pgrp      int  // its process group
	State     byte // as State reports it: R, S, D, T, t, Z, X, ...
}

// Gone reports whether a state letter (State's, or a Proc's) is that of
// a process that is no more: 0, none at all; Z or X, exited, and at most
// a zombie waiting for its parent's wait, which holds nothing but a pid.
func Gone(state byte) bool { return state == 0 || state == 'Z' || state == 'X' }

// GroupLive reports whether any process of the process group pgid is
// alive: not exited, and not a zombie. Where Procs cannot list the
// processes, it reports whether the group has any process, zombies
// included.
func GroupLive(pgid int) bool {
	procs, ok := Procs()
	if !ok {
		return syscall.Kill(-pgid, 0) == nil
	}
	for _, p := range procs {
		if p.Pgrp == pgid && !Gone(p.State) {
			return true
		}
	}
	return false
}
