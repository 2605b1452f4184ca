package child

import "golang.org/x/sys/unix"

// The values of p_stat in the kernel's process table, from XNU's
// <sys/proc.h>; x/sys/unix does not name them.
const (
	statIdl   = 1 // SIDL: being created by fork
	statRun   = 2 // SRUN: runnable
	statSleep = 3 // SSLEEP: sleeping on an address
	statStop  = 4 // SSTOP: stopped
	statZomb  = 5 // SZOMB: exited, awaiting its parent's wait
)

// State reads the state of a process from the kernel's process table
// (sysctl kern.proc.pid), as a /proc/<pid>/stat state letter (R, S, T,
// Z), or 0 when there is no such process. A process that a SIGSTOP froze
// reads as T. It is safe for concurrent use.
//
// XNU keeps only SIDL, SRUN, SSTOP and SZOMB in p_stat (its ps reads
// sleeping from the threads instead), so a live process that is not
// stopped reads as R; a process still being forked, not yet stopped nor
// sleeping, reads as R too.
func State(pid int) byte {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil || kp.Proc.P_pid != int32(pid) {
		return 0
	}
	return letter(kp.Proc.P_stat)
}

// Procs lists every process from the kernel's process table (sysctl
// kern.proc.all), and reports whether it could read it.
func Procs() ([]Proc, bool) {
	kps, err := unix.SysctlKinfoProcSlice("kern.proc.all")
	if err != nil {
		return nil, false
	}
	out := make([]Proc, 0, len(kps))
	for _, kp := range kps {
		out = append(out, Proc{Pid: int(kp.Proc.P_pid), PPid: int(kp.Eproc.Ppid), Pgrp: int(kp.Eproc.Pgid), State: letter(kp.Proc.P_stat)})
	}
	return out, true
}

// letter is p_stat as a /proc state letter.
func letter(stat int8) byte {
	switch stat {
	case statIdl, statRun:
		return 'R'
	case statSleep:
		return 'S'
	case statStop:
		return 'T'
	case statZomb:
		return 'Z'
	}
	return '?'
}
