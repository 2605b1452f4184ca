//go:build !linux && !darwin

package child

import (
	"os/exec"
	"strconv"
	"strings"
)

// State reads the state letter of a process from `ps -o stat=` (R, S,
// D, I, T, Z, ...: the first letter, without the flags that follow), or 0
// when there is no such process or no ps. It is safe for concurrent use.
// It starts a process on every call: slow, but these systems have neither
// /proc in the Linux format nor a process table this package reads.
func State(pid int) byte {
	out, err := exec.Command("ps", "-o", "stat=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		return 0
	}
	s := strings.TrimSpace(string(out))
	if s == "" {
		return 0
	}
	return s[0]
}

// Procs cannot list the processes here, and says so.
func Procs() ([]Proc, bool) { return nil, false }
