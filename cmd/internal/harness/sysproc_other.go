//go:build !linux

package harness

import "syscall"

// groupLive reports whether the group still has a process, a zombie
// included: there is no /proc here to tell them apart.
func groupLive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}
