package supervisor

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

// ProcState reads the state of a process from the kernel's process table
// (sysctl kern.proc.pid), as a /proc/<pid>/stat state letter (R, S, T,
// Z), or 0 when there is no such process. It is safe for concurrent use.
//
// XNU keeps only SIDL, SRUN, SSTOP and SZOMB in p_stat (its ps reads
// sleeping from the threads instead), so a live process that is not
// stopped reads as R; a process still being forked, not yet stopped nor
// sleeping, reads as R too.
func ProcState(pid int) byte {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil || kp.Proc.P_pid != int32(pid) {
		return 0
	}
	switch kp.Proc.P_stat {
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
