// Package child is how fencelab starts a process of its own: a worker, a
// throwaway PostgreSQL, a server, a browser. Each such child must not
// outlive the program, even when the program dies without cleaning up
// (SIGKILL, a crash, os.Exit), and must be reachable, with everything it
// starts, by one signal. Start is that rule, written once:
//
//   - The child leads a process group of its own (Setpgid), so that one
//     signal to -pid (Process.Signal) freezes, thaws or kills all of it,
//     and a terminal's Ctrl-C reaches only the parent, which passes it on.
//   - Where the kernel has a parent-death signal (Linux, FreeBSD:
//     HasParentDeath), the child gets one: the kernel signals it when the
//     parent dies, SIGKILLed or not. On Linux that signal fires when the
//     thread that forked the child exits, not only when the process does
//     (go.dev/issue/27505), so Start forks every such child from one OS
//     thread that stays locked, and alive, as long as the process.
//   - Where asked (Options.Watchdog), a watchdog (StartWatchdog) lists the
//     child from the moment it starts until it is reaped (Process.Wait).
//     A watchdog is a small /bin/sh process that outlives its parent: its
//     stdin is a pipe only the parent writes to, so end of file means the
//     parent is gone; then it signals the process groups it was told
//     about, waits for them if asked to, and removes a folder if asked to.
//     It is what stops children where there is no parent-death signal
//     (macOS), and what cleans up after them everywhere.
//
// State and Procs read what the kernel says of a process (from /proc on
// Linux, the process table on macOS): stopped, running, a zombie, gone.
//
// # What the watchdog reads
//
// One message a line, each written whole by one write (a few bytes, far
// under PIPE_BUF, so a parent that dies during the write leaves no half
// line):
//
//	+PID  watch PID, the leader of a process group (Setpgid)
//	-PID  stop watching PID (it has been reaped)
//	stop  the parent has cleaned up: exit at once, killing nothing
//
// The watchdog never evaluates what it reads. A line that is not "stop" or
// a sign and a decimal pid is ignored; the list holds nothing but such
// pids; globbing is off; pid 1 is refused, since `kill -- -1` would signal
// every process the watchdog may signal. It leads a process group of its
// own from before its first instruction, so a terminal's Ctrl-C or
// hang-up, which kill its parent, never reach it; and from its first line
// on it ignores SIGHUP and SIGINT sent to it some other way.
package child
