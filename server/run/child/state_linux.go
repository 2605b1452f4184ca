package child

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// State reads the state letter of a process from /proc/<pid>/stat (R, S,
// D, T, t, Z, ...), or 0 when there is no such process. A process that a
// SIGSTOP froze reads as T. It is safe for concurrent use.
func State(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	st, ok := parseStat(pid, b)
	if !ok {
		return 0
	}
	return st.State
}

// Procs lists every process from /proc, and reports whether it could read
// /proc at all. A process that goes while Procs reads is left out.
func Procs() ([]Proc, bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	var out []Proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if p, ok := parseStat(pid, b); ok {
			out = append(out, p)
		}
	}
	return out, true
}

// parseStat reads "pid (comm) state ppid pgrp ...", /proc/<pid>/stat. The
// command name may itself hold spaces and parentheses: the state follows
// the last ')'.
func parseStat(pid int, b []byte) (Proc, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Proc{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || len(f[0]) != 1 {
		return Proc{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return Proc{}, false
	}
	return Proc{Pid: pid, PPid: ppid, Pgrp: pgrp, State: f[0][0]}, true
}
