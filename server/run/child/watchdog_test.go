package child

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the processes these tests need (Go's os/exec
// helper-process pattern), chosen by roleEnv in TestMain.
const (
	roleEnv = "FENCELAB_WATCHDOG_TEST_ROLE"
	// roleChild sleeps for childLifetime, so only a signal ends it early.
	roleChild = "child"
	// roleStubborn is a child that ignores SIGTERM.
	roleStubborn = "stubborn"
	// roleParent is a watchdog's parent: see runParent. Its Config comes
	// as JSON in configEnv.
	roleParent = "parent"
	configEnv  = "FENCELAB_WATCHDOG_TEST_CONFIG"
)

// childLifetime bounds a child's life, so that one leaked by a test binary
// that crashed does not sleep forever. It is far longer than any wait in
// these tests, so it cannot make one pass.
const childLifetime = 2 * time.Minute

// The main goroutine stays on the main thread (thread group leader), as it
// is during init: runParent needs a thread that never ends, and only the
// main thread is sure to outlive every goroutine (a goroutine that locks
// its thread and ends takes the thread with it). Locked after init, it
// would be on whichever thread it ran on then, and the goroutine that
// must not run on the main thread could land there: the helper parent
// then failed, about once a suite under load.
func init() { runtime.LockOSThread() }

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case roleStubborn:
		signal.Ignore(syscall.SIGTERM)
		fallthrough
	case roleChild:
		fmt.Println("ready") // its signals are as they will stay
		time.Sleep(childLifetime)
		os.Exit(0)
	case roleParent:
		if err := runParent(); err != nil {
			fmt.Fprintln(os.Stderr, "parent:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// parentSetup is what a parent helper is asked to do.
type parentSetup struct {
	Config
	// Child is the role of the watched children: roleChild or roleStubborn.
	Child string
}

// parentPids are the processes a parent helper started, as it reports them.
type parentPids struct {
	Watchdog int
	Leader   int // watched: a process group's leader
	Member   int // in Leader's process group
	Unlisted int // watched, then unwatched: to be left alone
	// Pdeath is not watched, started by Start (a parent-death signal)
	// from a goroutine that locked its OS thread and then ended, which
	// ends the thread: Start must not fork from the caller's thread.
	Pdeath int
	// Watched is started by Start with the watchdog and without a
	// parent-death signal (Options.NoParentDeath), as on macOS.
	Watched int
	// HasPdeath says whether Start can give Pdeath its signal here.
	HasPdeath bool
}

// startChild starts the test binary as a child of the given role with the
// given process attributes, and returns once it says it is ready: a
// stubborn child signalled before then would still die of SIGTERM.
func startChild(role string, attr *syscall.SysProcAttr) (*exec.Cmd, error) {
	return startChildWith(role, func(cmd *exec.Cmd) error {
		cmd.SysProcAttr = attr
		return cmd.Start()
	})
}

// startChildWith is startChild with start to start the command, which
// may set its process attributes.
func startChildWith(role string, start func(*exec.Cmd) error) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), roleEnv+"="+role) // the last one counts
	cmd.Stdout = w
	err = start(cmd)
	w.Close()
	if err != nil {
		return nil, err
	}
	if l, err := bufio.NewReader(r).ReadString('\n'); l != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("child (pid %d) said %q (%v), not ready", cmd.Process.Pid, l, err)
	}
	return cmd, nil
}

// runParent is the parent helper: it starts a watchdog as configEnv says,
// a watched group of two children, a child it watches and then unwatches,
// and a child with only a parent-death signal, prints their pids as JSON
// and waits to be killed. If the test binary dies first, its stdin ends
// and it exits without Stop, which leaves the children to the watchdog
// just the same.
func runParent() error {
	var setup parentSetup
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &setup); err != nil {
		return err
	}
	wd, err := StartWatchdog(setup.Config)
	if err != nil {
		return err
	}
	pids := parentPids{Watchdog: wd.Pid()}
	leader, err := startChild(setup.Child, &syscall.SysProcAttr{Setpgid: true})
	if err != nil {
		return err
	}
	pids.Leader = leader.Process.Pid
	if err := wd.Watch(pids.Leader); err != nil {
		return err
	}
	member, err := startChild(setup.Child, &syscall.SysProcAttr{Setpgid: true, Pgid: pids.Leader})
	if err != nil {
		return err
	}
	pids.Member = member.Process.Pid
	unlisted, err := startChild(roleChild, &syscall.SysProcAttr{Setpgid: true})
	if err != nil {
		return err
	}
	pids.Unlisted = unlisted.Process.Pid
	if err := wd.Watch(pids.Unlisted); err != nil {
		return err
	}
	if err := wd.Unwatch(pids.Unlisted); err != nil {
		return err
	}
	pids.HasPdeath = HasParentDeath
	type started struct {
		cmd *exec.Cmd
		err error
	}
	// The main goroutine keeps the main thread, which never ends, so that
	// the goroutine below runs on another, which ends with it.
	runtime.LockOSThread()
	pdeathc := make(chan started, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if onMainThread() {
			pdeathc <- started{err: errors.New("the starting goroutine runs on the main thread, which does not end with it")}
			return
		}
		cmd, err := startChildWith(roleChild, func(cmd *exec.Cmd) error {
			_, err := Start(cmd, Options{})
			return err
		})
		pdeathc <- started{cmd, err}
	}()
	pdeath := <-pdeathc
	if pdeath.err != nil {
		return pdeath.err
	}
	watched, err := startChildWith(roleChild, func(cmd *exec.Cmd) error {
		_, err := Start(cmd, Options{Watchdog: wd, NoParentDeath: true})
		return err
	})
	if err != nil {
		return err
	}
	pids.Watched = watched.Process.Pid
	time.Sleep(200 * time.Millisecond) // for a parent-death signal of the ended thread to have come
	pids.Pdeath = pdeath.cmd.Process.Pid
	if err := json.NewEncoder(os.Stdout).Encode(pids); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return errors.New("stdin closed: the test binary is gone") // no Stop
}

// alive reports whether a process exists and is not a zombie: an exited
// process that nobody reaped yet (an orphan waits for init, which in a
// container may never come) holds nothing and counts as gone.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil { // no /proc (macOS), or it has just gone
		return syscall.Kill(pid, 0) == nil
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || (b[i+2] != 'Z' && b[i+2] != 'X')
}

// waitGone waits up to timeout for pid to be gone (or a zombie).
func waitGone(pid int, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !alive(pid) {
			return true
		}
	}
	return !alive(pid)
}

// killLeftover SIGKILLs pid's process group and pid if pid still lives.
// It reports a failure unless expected: no process a test starts may
// outlive it.
func killLeftover(t *testing.T, what string, pid int, expected bool) {
	t.Helper()
	if pid <= 1 || !alive(pid) {
		return
	}
	if !expected {
		t.Errorf("%s (pid %d) still running at the end of the test; killed now", what, pid)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// killParent starts a parent helper with setup, waits for its report,
// SIGKILLs it (no Stop, no deferred cleanup) and returns what it had
// started. At the end of the test every one of them must be gone; the
// unlisted child is killed then.
func killParent(t *testing.T, setup parentSetup) parentPids {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(setup)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), roleEnv+"="+roleParent, configEnv+"="+string(js))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe() // held until the parent is reaped: its lifeline
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids parentPids
	reaped := make(chan struct{}) // closed once Wait has returned
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-reaped
		_ = stdin.Close()
		killLeftover(t, "the unlisted child", pids.Unlisted, true)
		// The test need not have waited for the watchdog's work, nor for
		// the kernel's.
		gone := map[string]int{"the leader": pids.Leader, "the member": pids.Member, "the watchdog": pids.Watchdog, "the watched child": pids.Watched}
		if pids.HasPdeath {
			gone["the parent-death child"] = pids.Pdeath
		} else {
			killLeftover(t, "the parent-death child", pids.Pdeath, true)
		}
		for what, pid := range gone {
			waitGone(pid, 5*time.Second)
			killLeftover(t, what, pid, false)
		}
	})
	line := make(chan []byte, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Scan()
		line <- sc.Bytes()
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait() // after stdout is drained, as Wait requires
		close(reaped)
	}()
	// stderr is read only once the parent is reaped: until then its copy
	// is still being written.
	stderrText := func() string {
		_ = cmd.Process.Kill()
		select {
		case <-reaped:
			return stderr.String()
		case <-time.After(10 * time.Second):
			return "(not reaped 10 s after SIGKILL)"
		}
	}
	select {
	case l := <-line:
		if err := json.Unmarshal(l, &pids); err != nil {
			t.Fatalf("parent printed %q (%v); stderr:\n%s", l, err, stderrText())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("parent printed nothing in 20s; stderr:\n%s", stderrText())
	}
	for _, pid := range []int{pids.Watchdog, pids.Leader, pids.Member, pids.Unlisted, pids.Pdeath, pids.Watched} {
		if pid <= 1 || pid == cmd.Process.Pid || pid == os.Getpid() || !alive(pid) {
			t.Fatalf("parent reported %+v (parent %d, test %d): not separate live processes (pid %d: state %q)", pids, cmd.Process.Pid, os.Getpid(), pid, State(pid))
		}
	}
	for pid, group := range map[int]int{pids.Watchdog: pids.Watchdog, pids.Leader: pids.Leader, pids.Member: pids.Leader, pids.Unlisted: pids.Unlisted, pids.Pdeath: pids.Pdeath, pids.Watched: pids.Watched} {
		if pg, err := syscall.Getpgid(pid); err != nil || pg != group {
			t.Fatalf("pid %d is in process group %d (%v), want %d (%+v)", pid, pg, err, group, pids)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reaped:
	case <-time.After(10 * time.Second):
		t.Fatalf("parent (pid %d) not reaped 10s after SIGKILL", cmd.Process.Pid)
	}
	return pids
}

// TestWatchdog_KillsWatchedGroupsWhenParentDies SIGKILLs a watchdog's
// parent: the watched group, its leader and its member, must be gone
// within a few seconds, the child watched and then unwatched must be left
// alone, and the watchdog must exit.
func TestWatchdog_KillsWatchedGroupsWhenParentDies(t *testing.T) {
	t.Parallel()
	pids := killParent(t, parentSetup{Child: roleChild})
	if !waitGone(pids.Leader, 5*time.Second) {
		t.Errorf("watched leader (pid %d) still alive 5s after its parent was SIGKILLed", pids.Leader)
	}
	if !waitGone(pids.Member, 5*time.Second) {
		t.Errorf("member (pid %d) of the watched group still alive 5s after its parent was SIGKILLed", pids.Member)
	}
	if !waitGone(pids.Watchdog, 5*time.Second) {
		t.Errorf("watchdog (pid %d) still alive 5s after its parent was SIGKILLed", pids.Watchdog)
	}
	if !alive(pids.Unlisted) {
		t.Errorf("the child taken off the list (pid %d) was killed too", pids.Unlisted)
	}
}

// TestStart_ChildDiesWithParent: a child that Start started, which no
// watchdog watches, outlives the OS thread of the goroutine that started
// it (locked, then ended: see parentPids.Pdeath), is the leader of its
// own process group (killParent checks), and dies with its SIGKILLed
// parent where the kernel has a parent-death signal.
func TestStart_ChildDiesWithParent(t *testing.T) {
	t.Parallel()
	if !HasParentDeath {
		t.Skipf("no parent-death signal on %s", runtime.GOOS)
	}
	pids := killParent(t, parentSetup{Child: roleChild})
	if !waitGone(pids.Pdeath, 5*time.Second) {
		t.Errorf("child with a parent-death signal (pid %d) still alive 5s after its parent was SIGKILLed", pids.Pdeath)
	}
}

// TestStart_WatchedChildDiesWithParent: a child that Start started with a
// watchdog and no parent-death signal, as on macOS, is killed by the
// watchdog when its parent is SIGKILLed.
func TestStart_WatchedChildDiesWithParent(t *testing.T) {
	t.Parallel()
	pids := killParent(t, parentSetup{Child: roleChild})
	if !waitGone(pids.Watched, 5*time.Second) {
		t.Errorf("child that Start gave the watchdog (pid %d) still alive 5s after its parent was SIGKILLed", pids.Watched)
	}
}

// TestWatchdog_WaitsThenRemovesDir is pgcluster's use: at its parent's
// death the watchdog signals the group, waits for its leader to exit (a
// postmaster stopping), SIGKILLs it once the grace is over if it has not,
// and only then removes the folder.
func TestWatchdog_WaitsThenRemovesDir(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, child string
		grace       time.Duration
		within      time.Duration // for the folder to go
	}{
		// It exits on SIGTERM: the watchdog does not wait out the grace.
		{"obeys", roleChild, 60 * time.Second, 10 * time.Second},
		// It ignores SIGTERM: the grace ends and SIGKILL follows.
		{"stubborn", roleStubborn, time.Second, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "cluster")
			if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
				t.Fatal(err)
			}
			pids := killParent(t, parentSetup{Child: tc.child, Config: Config{Signal: syscall.SIGTERM, Grace: tc.grace, RemoveDir: dir}})
			killed := time.Now()
			for {
				dirGone := func() bool { _, err := os.Stat(dir); return errors.Is(err, os.ErrNotExist) }()
				if dirGone {
					if alive(pids.Leader) {
						t.Fatalf("the folder was removed while the watched leader (pid %d) was alive", pids.Leader)
					}
					break
				}
				if time.Since(killed) > tc.within {
					t.Fatalf("folder still there %v after the parent was SIGKILLed (leader alive: %v)", tc.within, alive(pids.Leader))
				}
				time.Sleep(10 * time.Millisecond)
			}
			took := time.Since(killed)
			if tc.child == roleStubborn && took < tc.grace {
				t.Errorf("the stubborn child was gone and the folder removed %v after the parent died: before the %v grace", took, tc.grace)
			}
			if !waitGone(pids.Member, 5*time.Second) {
				t.Errorf("member (pid %d) of the watched group still alive after the folder was removed", pids.Member)
			}
			if !waitGone(pids.Watchdog, 5*time.Second) {
				t.Errorf("watchdog (pid %d) still alive after it removed the folder", pids.Watchdog)
			}
			t.Logf("folder removed %v after the parent was SIGKILLed", took.Round(time.Millisecond))
		})
	}
}

// startWatched starts a child in its own process group and reaps it in the
// background: done is closed once it is. The test's cleanup kills it.
func startWatched(t *testing.T) (cmd *exec.Cmd, done chan struct{}) {
	t.Helper()
	cmd, err := startChild(roleChild, &syscall.SysProcAttr{Setpgid: true})
	if err != nil {
		t.Fatal(err)
	}
	done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	return cmd, done
}

// startDog starts a watchdog for a test, whose cleanup kills it if it is
// still running then.
func startDog(t *testing.T, cfg Config) *Watchdog {
	t.Helper()
	wd, err := StartWatchdog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pid := wd.Pid() // not wd: a test may drop it
	t.Cleanup(func() { killLeftover(t, "watchdog", pid, false) })
	return wd
}

// orphan closes the watchdog's pipe as its parent's death would, and
// waits for it to exit.
func orphan(t *testing.T, wd *Watchdog) {
	t.Helper()
	wd.mu.Lock()
	_ = wd.w.Close()
	wd.stopped = true
	wd.mu.Unlock()
	waited := make(chan error, 1)
	go func() { waited <- wd.cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("watchdog ended with %v, want exit 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watchdog still running 10s after EOF")
	}
	live.Lock()
	delete(live.m, wd)
	live.Unlock()
}

// TestWatchdog_StopKillsNothing: Stop makes the watchdog exit with status
// 0 and kill and remove nothing; then Watch fails, and Stop again returns
// the same.
func TestWatchdog_StopKillsNothing(t *testing.T) {
	t.Parallel()
	child, _ := startWatched(t)
	dir := t.TempDir()
	wd := startDog(t, Config{RemoveDir: dir})
	if err := wd.Watch(child.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := wd.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if ps := wd.cmd.ProcessState; ps == nil || !ps.Success() {
		t.Errorf("watchdog after Stop: %v, want exited with 0", ps)
	}
	if !alive(child.Process.Pid) {
		t.Error("Stop killed the watched child")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("Stop removed the folder: %v", err)
	}
	if err := wd.Watch(child.Process.Pid); !errors.Is(err, errStopped) {
		t.Errorf("Watch after Stop: %v, want %v", err, errStopped)
	}
	if err := wd.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	live.Lock()
	_, kept := live.m[wd]
	live.Unlock()
	if kept {
		t.Error("a stopped watchdog is still kept reachable")
	}
}

// TestWatchdog_ReadsOnlyPids feeds the watchdog lines its parent never
// writes, then lists a child and dies: lines that are not a sign and a
// pid, shell code among them, are ignored and not run; a child listed and
// still listed is killed at EOF even while it is SIGSTOPped, after all the
// garbage; a child listed and then taken off is left alone: no line that
// names it again put it back, and "+1" did not become `kill -- -1`, which
// would have killed it too.
func TestWatchdog_ReadsOnlyPids(t *testing.T) {
	t.Parallel()
	listed, listedDone := startWatched(t)
	unlisted, _ := startWatched(t)
	wd := startDog(t, Config{})
	marker := filepath.Join(t.TempDir(), "ran")
	touch := "touch " + marker
	u := unlisted.Process.Pid
	lines := []string{
		fmt.Sprintf("+%d", u),
		fmt.Sprintf("-%d", u), // off the list before the lines that name it again
		"-1",
		"+1", // last of the two: if it were taken, 1 would stay listed
		"+abc; " + touch,
		"+$(" + touch + ")",
		"+`" + touch + "`",
		"$(" + touch + ")",
		touch,
		fmt.Sprintf("+%d; %s", u, touch),
		fmt.Sprintf("+%d $(%s)", u, touch),
		fmt.Sprintf("+%d*", u),
		"+*",
		fmt.Sprintf("+0%d", u),
		fmt.Sprintf("+%dx", u),
		fmt.Sprintf("+-%d", u),
		fmt.Sprintf("*%d", u),
		"+0", // kill -- -0 would be the watchdog's own group
		"+",
		"-",
		"",
		"stop now",
		"+4294967297", // 2^32+1: 1 again if a shell cut it to 32 bits
		"+" + strings.Repeat("9", 100_000),
		strings.Repeat("x", 100_000),
		fmt.Sprintf("+%d", listed.Process.Pid),
	}
	if _, err := io.WriteString(wd.w, strings.Join(lines, "\n")+"\n"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(listed.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	orphan(t, wd)

	select {
	case <-listedDone:
		ws, ok := listed.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("listed child ended with %v, want SIGKILL", listed.ProcessState)
		}
	case <-time.After(5 * time.Second):
		t.Error("listed child still running 5s after the watchdog's EOF")
	}
	if !alive(u) {
		t.Errorf("child taken off the list (pid %d) was killed too", u)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the watchdog ran shell code it read: %s exists (%v)", marker, err)
	}
}

// waitTrapped waits until the shell pid has run its first line, which
// ignores SIGHUP and SIGINT: until then they kill it, as they kill any
// process. (A terminal's signals never reach it even then: it is in a
// process group of its own from before its first instruction.) Where
// /proc shows no ignored signals, it waits half a second instead.
func waitTrapped(t *testing.T, pid int) {
	t.Helper()
	const hupInt = 1<<(syscall.SIGHUP-1) | 1<<(syscall.SIGINT-1)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			time.Sleep(500 * time.Millisecond)
			return
		}
		for _, l := range strings.Split(string(b), "\n") {
			if mask, ok := strings.CutPrefix(l, "SigIgn:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64); err == nil && m&hupInt == hupInt {
					return
				}
			}
		}
	}
	t.Fatalf("watchdog (pid %d) does not ignore SIGHUP and SIGINT 5s after it started", pid)
}

// TestWatchdog_SurvivesCtrlC sends SIGINT and SIGHUP to the watchdog's
// process group, as a terminal's Ctrl-C and hang-up do to the foreground
// group: it must lead a group of its own, ignore both, and still kill
// what it watches when its pipe ends.
func TestWatchdog_SurvivesCtrlC(t *testing.T) {
	t.Parallel()
	listed, listedDone := startWatched(t)
	wd := startDog(t, Config{})
	if pg, err := syscall.Getpgid(wd.Pid()); err != nil || pg != wd.Pid() {
		t.Fatalf("watchdog (pid %d) is in process group %d (%v), want its own", wd.Pid(), pg, err)
	}
	if err := wd.Watch(listed.Process.Pid); err != nil {
		t.Fatal(err)
	}
	waitTrapped(t, wd.Pid())
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		if err := syscall.Kill(-wd.Pid(), sig); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // a signal that kills takes far less
	if !alive(wd.Pid()) {
		t.Fatal("watchdog died of SIGINT or SIGHUP")
	}
	orphan(t, wd)
	select {
	case <-listedDone:
	case <-time.After(5 * time.Second):
		t.Error("listed child still running 5s after the watchdog's EOF")
	}
}

// TestWatchdog_KeptFromTheCollector drops a watchdog without Stop and
// collects garbage: its pipe must stay open, so it must neither exit nor
// kill the child it watches.
func TestWatchdog_KeptFromTheCollector(t *testing.T) {
	t.Parallel()
	child, _ := startWatched(t)
	wd := startDog(t, Config{})
	pid := wd.Pid()
	if err := wd.Watch(child.Process.Pid); err != nil {
		t.Fatal(err)
	}
	wd = nil
	for range 5 {
		runtime.GC()
		time.Sleep(50 * time.Millisecond) // finalizers run on a goroutine of their own
	}
	if !alive(pid) || !alive(child.Process.Pid) {
		t.Errorf("after the collector ran: watchdog alive %v, watched child alive %v; want both", alive(pid), alive(child.Process.Pid))
	}
	live.Lock()
	for w := range live.m {
		if w.Pid() == pid {
			wd = w
		}
	}
	live.Unlock()
	if wd == nil {
		t.Fatal("the dropped watchdog is not kept in live")
	}
	if err := wd.Stop(); err != nil {
		t.Error(err)
	}
}

// TestStart_RefusesBadConfig: a signal kill -s may not know, a negative
// grace and a folder that is not absolute, or is /, are refused before
// anything starts; pid 1 and below are refused before they are written.
func TestStart_RefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{Signal: syscall.SIGUSR1},
		{Grace: -time.Second},
		{RemoveDir: "tmp"},
		{RemoveDir: "/"},
		{RemoveDir: "/tmp/.."},
	} {
		if wd, err := StartWatchdog(c); err == nil {
			_ = wd.Stop()
			t.Errorf("Start(%+v) succeeded", c)
		}
	}
	wd, err := StartWatchdog(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer wd.Stop()
	for _, pid := range []int{1, 0, -1} {
		if err := wd.Watch(pid); err == nil {
			t.Errorf("Watch(%d) succeeded", pid)
		}
	}
}
