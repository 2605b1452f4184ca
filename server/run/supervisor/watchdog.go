package supervisor

import (
	"syscall"

	"github.com/fencelab/fencelab/server/run/child"
)

// workerAttr returns the process attributes of a new worker, and whether
// the worker needs s's watchdog. Its own process group means a terminal's
// Ctrl-C is ours to pass on and our signals reach all of it; the
// parent-death signal, where the kernel has one (Linux), makes it die with
// us, even if we are SIGKILLed. Start starts it from the spawner's locked
// OS thread, which the parent-death signal needs (see spawner). Without
// that signal only the watchdog kills it when we die, so it needs one;
// with it, only when cfg.Watchdog asks.
//
// cfg.noPdeathsig, set only by tests, leaves the signal out so that the
// watchdog alone has to do its job, as it does on macOS.
func workerAttr(cfg Config) (attr *syscall.SysProcAttr, needWatchdog bool) {
	attr = &syscall.SysProcAttr{Setpgid: true}
	diesWithUs := !cfg.noPdeathsig && child.SetParentDeath(attr, syscall.SIGKILL)
	return attr, cfg.Watchdog || !diesWithUs
}

// startWatchdog starts s's watchdog unless it is running. Start calls it
// with s.mu held, before it spawns a worker that needs one, so that the
// worker is listed moments after it exists. The watchdog SIGKILLs the
// process group of every worker still listed when we die without Close
// (a stopped one too: SIGKILL needs no SIGCONT).
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

// watch lists a worker that has just started with s's watchdog, if s has
// one. Start calls it with s.mu held; when it fails, the worker must not
// be kept, since nothing would kill it if we died.
func (s *Supervisor) watch(pid int) error {
	if s.wd == nil {
		return nil
	}
	return s.wd.Watch(pid)
}

// unwatch takes a worker off the watchdog's list. run calls it with s.mu
// held once the worker is reaped, not before (see child.Unwatch).
func (s *Supervisor) unwatch(pid int) {
	if s.wd == nil {
		return
	}
	if err := s.wd.Unwatch(pid); err != nil {
		s.cfg.Log.Warn("worker watchdog", "err", err)
	}
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
