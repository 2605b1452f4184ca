package supervisor

import (
	"syscall"

	"github.com/fencelab/fencelab/server/run/child"
)

// needWatchdog says whether a new worker needs s's watchdog: where the
// kernel has a parent-death signal (Linux), child.Start gives the worker
// one, which kills it with us, even if we are SIGKILLed, and the watchdog
// is only there when cfg.Watchdog asks; without that signal only the
// watchdog kills it when we die.
//
// cfg.noPdeathsig, set only by tests, leaves the signal out so that the
// watchdog alone has to do its job, as it does on macOS.
func needWatchdog(cfg Config) bool {
	return cfg.Watchdog || !child.HasParentDeath || cfg.noPdeathsig
}

// startWatchdog starts s's watchdog unless it is running. Start calls it
// with s.mu held, before it spawns a worker that needs one, so that
// child.Start lists the worker moments after it exists (and Proc.run's
// wait takes it off). The watchdog SIGKILLs the process group of every
// worker still listed when we die without Close (a stopped one too:
// SIGKILL needs no SIGCONT).
func (s *Supervisor) startWatchdog() error {
	if s.wd != nil {
		return nil
	}
	wd, err := child.StartWatchdog(child.Config{Name: "fencelab-worker-watchdog", Signal: syscall.SIGKILL})
	if err != nil {
		return err
	}
	s.wd = wd
	s.cfg.Log.Info("worker watchdog started", "pid", wd.Pid())
	return nil
}

// stopWatchdog tells s's watchdog that every worker is reaped and waits
// for it to exit. Close calls it after it has reaped every worker.
func (s *Supervisor) stopWatchdog() error {
	s.mu.Lock()
	wd := s.wd
	s.mu.Unlock()
	if wd == nil {
		return nil
	}
	return wd.Stop()
}
