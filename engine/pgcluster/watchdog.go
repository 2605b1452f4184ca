package pgcluster

import (
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
)

// watchdogScript cleans up after a parent that died without calling Stop
// (SIGKILL, a crash, os.Exit). Its stdin is a pipe only the parent can
// write to: the parent writes "stop" on a normal Stop; EOF means the parent
// is gone. Then it makes sure the postmaster ($2) is gone too, SIGQUIT
// first (Pdeathsig should already have sent it), SIGKILL to its process
// group after 30s, and removes the cluster folder ($1). The arguments are
// positional so no path or number is ever parsed as shell code. A process
// that lingers as a zombie counts as gone: it holds no files.
const watchdogScript = `trap '' HUP INT
if read -r line && [ "$line" = stop ]; then
	exit 0
fi
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
kill -s QUIT "$2" 2>/dev/null
i=0
while alive "$2"; do
	i=$((i + 1))
	if [ "$i" -gt 300 ]; then
		kill -s KILL -- "-$2" 2>/dev/null
		kill -s KILL "$2" 2>/dev/null
		sleep 1
		break
	fi
	sleep 0.1
done
rm -rf -- "$1"
`

// watchdog is a small shell process that outlives its parent to remove the
// cluster when the parent dies without calling Stop.
type watchdog struct {
	cmd *exec.Cmd
	w   *os.File // write end of the watchdog's stdin
}

// liveWatchdogs keeps the pipes of running watchdogs reachable. If a
// caller dropped its *Cluster without Stop, the garbage collector would
// otherwise finalize the *os.File, closing the pipe and making the watchdog
// delete a cluster that is still in use.
var liveWatchdogs = struct {
	sync.Mutex
	m map[*watchdog]struct{}
}{m: make(map[*watchdog]struct{})}

// startWatchdog starts the watchdog for the cluster in dir whose
// postmaster has the given pid.
func startWatchdog(dir string, pid int) (*watchdog, error) {
	r, w, err := os.Pipe() // close-on-exec: no other child inherits w
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "fencelab-pg-watchdog", dir, strconv.Itoa(pid))
	cmd.Stdin = r
	cmd.Dir = "/"
	// Its own process group keeps a terminal Ctrl-C away from it: it must
	// survive us. No Pdeathsig, for the same reason.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	wd := &watchdog{cmd: cmd, w: w}
	liveWatchdogs.Lock()
	liveWatchdogs.m[wd] = struct{}{}
	liveWatchdogs.Unlock()
	return wd, nil
}

// release tells the watchdog that the cluster is already cleaned up and
// waits for it to exit.
func (wd *watchdog) release() error {
	_, _ = wd.w.WriteString("stop\n") // fails only if it already exited
	wd.w.Close()
	err := wd.cmd.Wait()
	liveWatchdogs.Lock()
	delete(liveWatchdogs.m, wd)
	liveWatchdogs.Unlock()
	return err
}
