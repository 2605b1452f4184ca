package supervisor

import "syscall"

// workerAttr returns the process attributes of a new worker. Its own
// process group means a terminal's Ctrl-C is ours to pass on and our
// signals reach all of it; the parent-death signal makes it die with us,
// even if we are SIGKILLed. Start runs it from the spawner's locked OS
// thread, which the parent-death signal needs (see spawner).
//
// cfg.noPdeathsig, set only by tests, leaves the signal out so that the
// watchdog alone has to do its job, as it does on macOS.
func workerAttr(cfg Config) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if !cfg.noPdeathsig {
		attr.Pdeathsig = syscall.SIGKILL
	}
	return attr
}

// needWatchdog reports whether workers need the pipe watchdog: on Linux
// only when asked for, or when a test has taken the parent-death signal
// away.
func needWatchdog(cfg Config) bool {
	return cfg.Watchdog || cfg.noPdeathsig
}
