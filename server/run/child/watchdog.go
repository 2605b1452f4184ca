package child

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// script is the watchdog (see the package comment for what it reads). Its
// arguments are positional, so no path or number is ever parsed as shell
// code: $1 the signal's name, $2 the grace in tenths of a second, $3 the
// folder to remove or "". At end of file it sends the signal to the
// process group of every pid still listed (a stopped one too when the
// signal is KILL, which needs no SIGCONT); with a grace, it then waits for
// each listed group leader to be gone and SIGKILLs the groups of those
// left when the grace is over; and last it removes the folder. A process
// that lingers as a zombie counts as gone: it holds no files.
const script = `trap '' HUP INT
set -f
unset IFS
sig=$1 grace=$2 dir=$3
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
alive() {
	kill -0 "$1" 2>/dev/null || return 1
	if [ -r "/proc/$1/status" ]; then
		while read -r key val rest; do
			if [ "$key" = State: ]; then
				[ "$val" != Z ]
				return
			fi
		done <"/proc/$1/status"
	fi
	return 0
}
for p in $pids; do
	kill -s "$sig" -- "-$p" 2>/dev/null
done
i=0
for p in $pids; do
	while [ "$grace" -gt 0 ] && alive "$p"; do
		i=$((i + 1))
		if [ "$i" -gt "$grace" ]; then
			kill -s KILL -- "-$p" 2>/dev/null
			kill -s KILL "$p" 2>/dev/null
			sleep 1
			break
		fi
		sleep 0.1
	done
done
[ -z "$dir" ] || rm -rf -- "$dir"
exit 0
`

// signalNames are the signals a watchdog can send, by the names kill -s
// takes; a number would be XSI, not POSIX.
var signalNames = map[syscall.Signal]string{
	syscall.SIGKILL: "KILL",
	syscall.SIGTERM: "TERM",
	syscall.SIGQUIT: "QUIT",
	syscall.SIGINT:  "INT",
	syscall.SIGHUP:  "HUP",
}

// Config says what a watchdog does once its parent is gone. The zero
// Config SIGKILLs every watched process group and removes nothing.
type Config struct {
	// Name is the watchdog's argv[0], what ps shows. Default:
	// "fencelab-watchdog".
	Name string
	// Signal is sent to the process group of every watched pid: SIGKILL
	// (0 means SIGKILL), SIGTERM, SIGQUIT, SIGINT or SIGHUP.
	Signal syscall.Signal
	// Grace, when positive, makes the watchdog wait after Signal for every
	// watched group leader to exit, up to about Grace in all (counted in
	// tenths of a second, rounded up), then SIGKILL the groups of those
	// left.
	Grace time.Duration
	// RemoveDir, when set, is an absolute folder the watchdog removes with
	// everything in it, last, once the watched processes are gone (or
	// have been SIGKILLed): a folder they may write to until they die.
	RemoveDir string
}

// validate checks c and fills its defaults.
func (c *Config) validate() error {
	if c.Name == "" {
		c.Name = "fencelab-watchdog"
	}
	if c.Signal == 0 {
		c.Signal = syscall.SIGKILL
	}
	if _, ok := signalNames[c.Signal]; !ok {
		return fmt.Errorf("signal %v: want SIGKILL, SIGTERM, SIGQUIT, SIGINT or SIGHUP", c.Signal)
	}
	if c.Grace < 0 {
		return fmt.Errorf("grace %v is negative", c.Grace)
	}
	// The watchdog runs in /, where a relative folder would be another.
	if c.RemoveDir != "" && (!filepath.IsAbs(c.RemoveDir) || filepath.Clean(c.RemoveDir) == "/") {
		return fmt.Errorf("remove %q: want an absolute folder other than /", c.RemoveDir)
	}
	return nil
}

// Watchdog is a running watchdog process. Its methods are safe for
// concurrent use; messages reach the watchdog in the order of the calls
// that sent them.
type Watchdog struct {
	cmd *exec.Cmd

	mu      sync.Mutex
	w       *os.File // write end of the watchdog's stdin; no other process holds it
	stopped bool

	stopOnce sync.Once
	stopErr  error
}

// live holds every running Watchdog. A program that drops its *Watchdog
// without Stop would otherwise let the garbage collector finalize the
// *os.File, which closes the pipe: the watchdog would take that for its
// parent's death and kill processes that are still in use.
var live = struct {
	sync.Mutex
	m map[*Watchdog]struct{}
}{m: make(map[*Watchdog]struct{})}

// StartWatchdog starts a watchdog that watches no process yet: Watch
// each child right after it starts (Options.Watchdog does that for Start), Unwatch it once it is reaped, and Stop the
// watchdog when everything is cleaned up. Until Stop, the watchdog runs
// as long as this process does, and then does what cfg says. A Watchdog
// dropped without Stop is kept from the garbage collector (see live), so
// it still does its job when the process ends.
func StartWatchdog(cfg Config) (*Watchdog, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	r, w, err := os.Pipe() // close-on-exec: no other child inherits w and keeps EOF away
	if err != nil {
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	tenths := (cfg.Grace + 100*time.Millisecond - 1) / (100 * time.Millisecond)
	cmd := exec.Command("/bin/sh", "-c", script, cfg.Name, signalNames[cfg.Signal], strconv.FormatInt(int64(tenths), 10), cfg.RemoveDir)
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
	wd := &Watchdog{cmd: cmd, w: w}
	live.Lock()
	live.m[wd] = struct{}{}
	live.Unlock()
	return wd, nil
}

// Pid returns the watchdog's process id, which is also its process group.
func (wd *Watchdog) Pid() int { return wd.cmd.Process.Pid }

// Watch tells the watchdog that pid, the leader of a process group, has
// started. Call it right after the child starts; if it fails, nothing
// would stop the child if this process died.
func (wd *Watchdog) Watch(pid int) error { return wd.send('+', pid) }

// Unwatch tells the watchdog that pid has been reaped. Call it after the
// child's Wait, not before: until then the child may still be alive. (In
// the moment between the two its pid could be reused; a new process would
// also have to lead a process group of that number to be hit.)
func (wd *Watchdog) Unwatch(pid int) error { return wd.send('-', pid) }

// errStopped is what Watch and Unwatch return after Stop.
var errStopped = errors.New("the watchdog is stopped")

// send writes one message in one write.
func (wd *Watchdog) send(sign byte, pid int) error {
	if pid <= 1 {
		return fmt.Errorf("tell watchdog (pid %d): pid %d: the watchdog takes pids above 1", wd.Pid(), pid)
	}
	line := strconv.AppendInt([]byte{sign}, int64(pid), 10)
	line = append(line, '\n')
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.stopped {
		return fmt.Errorf("tell watchdog (pid %d): %w", wd.Pid(), errStopped)
	}
	if _, err := wd.w.Write(line); err != nil {
		return fmt.Errorf("tell watchdog (pid %d): %w", wd.Pid(), err)
	}
	return nil
}

// Stop tells the watchdog that everything it watches is cleaned up, so it
// exits without signalling or removing anything, and waits for it to
// exit. Stop is idempotent; every call returns the result of the first.
func (wd *Watchdog) Stop() error {
	wd.stopOnce.Do(func() {
		wd.mu.Lock()
		_, _ = wd.w.WriteString("stop\n") // fails only if it already exited; Wait says how
		wd.w.Close()
		wd.stopped = true
		wd.mu.Unlock()
		if err := wd.cmd.Wait(); err != nil {
			wd.stopErr = fmt.Errorf("stop watchdog (pid %d): %w", wd.Pid(), err)
		}
		live.Lock()
		delete(live.m, wd)
		live.Unlock()
	})
	return wd.stopErr
}
