package supervisor

import (
	"fmt"
	"os"
	"strings"
)

// ProcState reads the state letter of a process from /proc/<pid>/stat (R,
// S, D, T, t, Z, ...), or 0 when there is no such process. It is safe for
// concurrent use.
func ProcState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name is in parentheses and may itself hold spaces or
	// parentheses; the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}
