package supervisor

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// watchdogScript kills the workers of a supervisor that died without
// Close (SIGKILL, a crash, os.Exit) where no parent-death signal does it
// (macOS, the BSDs), the way engine/pgcluster's watchdog stops a
// postmaster. Its stdin is a pipe only the supervisor can write to:
//
//	+PID  a worker started; PID is also its process group (Setpgid)
//	-PID  that worker has been reaped
//	stop  Close has reaped every worker: exit quietly
//
// EOF means the supervisor is gone: it SIGKILLs the process group of
// every worker still listed (a stopped one too: SIGKILL needs no SIGCONT)
// and exits. It never evaluates what it reads: a line that is not "stop"
// or a sign and a decimal pid is ignored, the list holds nothing but such
// pids, and globbing is off. Pid 1 is refused because `kill -- -1` would
// signal every process we may signal.
const watchdogScript = `trap '' HUP INT
set -f
unset IFS
pids=
while read -r line; do
	case $line in
	stop) exit 0 ;;
	[+-][1-9]*) pid=${line#?} ;;
	*) continue ;;
	esac
	case $pid in
	*[!0-9]* | 1) continue ;;
	esac
	keep=
	for p in $pids; do
		[ "$p" = "$pid" ] || keep="$keep $p"
	done
	case $line in
	+*) keep="$keep $pid" ;;
	esac
	pids=$keep
done
for p in $pids; do
	kill -s KILL -- "-$p" 2>/dev/null
done
exit 0
`

// watchdog is a small shell process that outlives its supervisor to kill
// the workers the supervisor left behind. Each message is one write of a
// few bytes, so it reaches the pipe whole (PIPE_BUF) even if we die
// during it; the supervisor makes the writes with its mu held, or after
// every worker is reaped, so they never interleave.
type watchdog struct {
	cmd *exec.Cmd
	w   *os.File // write end of the watchdog's stdin; no other process holds it
}

// watchdogs maps each Supervisor that has started a watchdog to it. Being
// package-level keeps the pipe's write end reachable for the supervisor's
// whole life, even if its owner drops it without Close: a finalized
// *os.File would close the pipe, and the watchdog would kill workers that
// are still running.
var watchdogs = struct {
	sync.Mutex
	m map[*Supervisor]*watchdog
}{m: make(map[*Supervisor]*watchdog)}

// newWatchdog starts a watchdog that lists no worker yet.
func newWatchdog() (*watchdog, error) {
	r, w, err := os.Pipe() // close-on-exec: no worker inherits w and keeps EOF away
	if err != nil {
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "fencelab-worker-watchdog")
	cmd.Stdin = r
	cmd.Dir = "/"
	// Its own process group keeps a terminal's Ctrl-C away from it: it
	// must survive us. No parent-death signal, for the same reason.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	return &watchdog{cmd: cmd, w: w}, nil
}

func (wd *watchdog) send(format string, args ...any) error {
	if _, err := fmt.Fprintf(wd.w, format, args...); err != nil {
		return fmt.Errorf("tell watchdog (pid %d): %w", wd.cmd.Process.Pid, err)
	}
	return nil
}

// startWatchdog starts s's watchdog if s's workers need one (see
// needWatchdog) and it is not running yet. Start calls it with s.mu held,
// before it spawns the worker, so that the worker is listed moments after
// it exists.
func (s *Supervisor) startWatchdog() error {
	if !needWatchdog(s.cfg) {
		return nil
	}
	watchdogs.Lock()
	defer watchdogs.Unlock()
	if watchdogs.m[s] != nil {
		return nil
	}
	wd, err := newWatchdog()
	if err != nil {
		return err
	}
	watchdogs.m[s] = wd
	s.cfg.Log.Info("worker watchdog started", "pid", wd.cmd.Process.Pid)
	return nil
}

// watchdogOf returns s's watchdog, or nil when s has none.
func watchdogOf(s *Supervisor) *watchdog {
	watchdogs.Lock()
	defer watchdogs.Unlock()
	return watchdogs.m[s]
}

// watch lists a worker that has just started with s's watchdog, if s has
// one. Start calls it with s.mu held; when it fails, the worker must not
// be kept, since nothing would kill it if we died.
func (s *Supervisor) watch(pid int) error {
	if wd := watchdogOf(s); wd != nil {
		return wd.send("+%d\n", pid)
	}
	return nil
}

// unwatch takes a worker off the watchdog's list. run calls it with s.mu
// held once the worker is reaped, not before: until then the worker may
// still be alive. (In the moment between the two, its pid could be
// reused; a new process would also have to lead a process group of that
// number to be hit.)
func (s *Supervisor) unwatch(pid int) {
	if wd := watchdogOf(s); wd != nil {
		if err := wd.send("-%d\n", pid); err != nil {
			s.cfg.Log.Warn("worker watchdog", "err", err)
		}
	}
}

// stopWatchdog tells s's watchdog that every worker is reaped and waits
// for it to exit. Close calls it after it has reaped every worker.
func (s *Supervisor) stopWatchdog() error {
	watchdogs.Lock()
	wd := watchdogs.m[s]
	delete(watchdogs.m, s)
	watchdogs.Unlock()
	if wd == nil {
		return nil
	}
	_ = wd.send("stop\n") // fails only if it already exited; Wait says how
	wd.w.Close()
	if err := wd.cmd.Wait(); err != nil {
		return fmt.Errorf("stop watchdog (pid %d): %w", wd.cmd.Process.Pid, err)
	}
	return nil
}
