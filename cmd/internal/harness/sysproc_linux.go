package harness

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// groupLive reports whether any process of the group is alive: not yet
// exited, or exiting but not yet a zombie. A zombie holds nothing but a
// pid, and an orphan's is its new parent's to reap.
func groupLive(pgid int) bool {
	stats, ok := readProcStats()
	if !ok {
		return syscall.Kill(-pgid, 0) == nil
	}
	for _, p := range stats {
		if p.pgrp == pgid && p.state != 'Z' && p.state != 'X' {
			return true
		}
	}
	return false
}

// procStat is what /proc/PID/stat says of a process that matters here.
type procStat struct {
	pid, ppid, pgrp int
	state           byte
}

// procStats reads every process's stat; none when /proc cannot be read.
func procStats() []procStat {
	s, _ := readProcStats()
	return s
}

func readProcStats() ([]procStat, bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	var out []procStat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || len(f[0]) != 1 {
			continue
		}
		ppid, err1 := strconv.Atoi(f[1])
		pgrp, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, procStat{pid: pid, ppid: ppid, pgrp: pgrp, state: f[0][0]})
	}
	return out, true
}
