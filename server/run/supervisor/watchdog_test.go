package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/run/child"
)

// The test binary doubles as the processes these tests need (Go's os/exec
// helper-process pattern), chosen by environment variable in TestMain:
const (
	// workerEnv makes it a stand-in worker: it ignores its arguments and
	// its stdin and sleeps, so only a signal ends it early.
	workerEnv = "FENCELAB_SUPERVISOR_TEST_WORKER"
	// parentEnv makes it a supervisor's parent process: see runParent.
	parentEnv = "FENCELAB_SUPERVISOR_TEST_PARENT"
)

// workerLifetime bounds a stand-in worker's life, so that one leaked by a
// test binary that crashed does not sleep forever. It is far longer than
// any wait in these tests, so it cannot make one pass.
const workerLifetime = 2 * time.Minute

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(workerEnv) != "": // checked first: a worker inherits parentEnv too
		time.Sleep(workerLifetime)
		os.Exit(0)
	case os.Getenv(parentEnv) != "":
		if err := runParent(os.Getenv(parentEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "parent:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testConfig is a Config whose workers are stand-ins (this test binary)
// and which, on Linux too, spawns them without the parent-death signal and
// with the watchdog: what macOS does.
func testConfig() (Config, error) {
	exe, err := os.Executable()
	if err != nil {
		return Config{}, err
	}
	return Config{Exe: exe, ExtraEnv: []string{workerEnv + "=1"}, Watchdog: true, noPdeathsig: true}, nil
}

// runParent is the helper process of TestWatchdog_WorkerDiesWithParent: it
// starts one worker, SIGSTOPs it when mode is "stopped", prints
// "worker PID watchdog PID" and waits to be killed. If the test binary
// dies first, its stdin ends and it exits without Close, which leaves the
// worker to the watchdog just the same.
func runParent(mode string) error {
	// A stopped process whose parent dies gets SIGHUP and SIGCONT from
	// the kernel (its process group is orphaned), which would kill the
	// stopped worker and hide a watchdog that does nothing; a real worker
	// may well ignore SIGHUP (nohup). An ignored signal stays ignored
	// across fork and exec, so the worker ignores it from its first
	// instruction, before Pause can stop it.
	signal.Ignore(syscall.SIGHUP)
	cfg, err := testConfig()
	if err != nil {
		return err
	}
	s, err := New(cfg)
	if err != nil {
		return err
	}
	p, err := s.Start(Spec{Label: "A"})
	if err != nil {
		return err
	}
	if mode == "stopped" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Pause(ctx); err != nil {
			return err
		}
	}
	wd := watchdogOf(s)
	if wd == nil {
		return errors.New("no watchdog")
	}
	fmt.Printf("worker %d watchdog %d\n", p.Pid, wd.Pid())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return errors.New("stdin closed: the test binary is gone") // no Close
}

// watchdogOf returns s's watchdog, or nil when s has none.
func watchdogOf(s *Supervisor) *child.Watchdog {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wd
}

// alive reports whether a process exists and is not a zombie: an exited
// process that nobody reaped yet (an orphan waits for init, which in a
// container may never come) holds nothing and counts as gone.
func alive(pid int) bool {
	return !child.Gone(child.State(pid))
}

// waitGone waits up to timeout for pid to be gone (or a zombie).
func waitGone(pid int, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !alive(pid) {
			return true
		}
	}
	return false
}

// killLeftover SIGKILLs pid's process group and pid if pid still lives,
// and fails the test: no process a test starts may outlive it.
func killLeftover(t *testing.T, what string, pid int) {
	t.Helper()
	if pid <= 1 || !alive(pid) {
		return
	}
	t.Errorf("%s (pid %d) still running at the end of the test (state %q); killed now", what, pid, child.State(pid))
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// TestWatchdog_WorkerDiesWithParent SIGKILLs a supervisor's process (no
// Close, no deferred cleanup) whose worker has no parent-death signal, and
// checks that the watchdog kills the worker, running or SIGSTOPped, and
// then exits. (The kernel continues a stopped worker once its parent's
// death orphans its process group; server/run/child's
// TestWatchdog_ReadsOnlyPids kills one that stays stopped.)
func TestWatchdog_WorkerDiesWithParent(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"running", "stopped"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(exe)
			cmd.Env = append(os.Environ(), parentEnv+"="+mode)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdin, err := cmd.StdinPipe() // held until the parent is reaped: its lifeline
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			parent := cmd.Process.Pid
			reaped := make(chan struct{}) // closed once Wait has returned
			var worker, watchdog int
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				select {
				case <-reaped:
				case <-time.After(10 * time.Second):
					t.Errorf("parent (pid %d) not reaped 10s after SIGKILL", parent)
				}
				killLeftover(t, "worker", worker)
				killLeftover(t, "watchdog", watchdog)
			})

			line := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(stdout)
				sc.Scan()
				line <- sc.Text()
				_, _ = io.Copy(io.Discard, stdout)
				_ = cmd.Wait() // after stdout is drained, as Wait requires
				close(reaped)
			}()
			select {
			case l := <-line:
				if _, err := fmt.Sscanf(l, "worker %d watchdog %d", &worker, &watchdog); err != nil {
					t.Fatalf("parent printed %q (%v); stderr:\n%s", l, err, stderr.String())
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("parent printed nothing in 20s; stderr:\n%s", stderr.String())
			}
			if worker == parent || worker == os.Getpid() || watchdog == parent {
				t.Fatalf("worker %d, watchdog %d, parent %d, test %d: not separate processes", worker, watchdog, parent, os.Getpid())
			}
			want := byte('S')
			if mode == "stopped" {
				want = 'T'
			}
			if st := child.State(worker); st != want && !(want == 'S' && st == 'R') {
				t.Fatalf("worker (pid %d) is in state %q before its parent dies, want %q", worker, st, want)
			}
			if pg, err := syscall.Getpgid(watchdog); err != nil || pg != watchdog {
				t.Errorf("watchdog (pid %d) is in process group %d (%v), want its own", watchdog, pg, err)
			}

			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			select {
			case <-reaped:
			case <-time.After(10 * time.Second):
				t.Fatalf("parent (pid %d) not reaped 10s after SIGKILL", parent)
			}
			if !waitGone(worker, 5*time.Second) {
				t.Errorf("%s worker (pid %d) still alive 5s after its parent was SIGKILLed (state %q)", mode, worker, child.State(worker))
			}
			if !waitGone(watchdog, 5*time.Second) {
				t.Errorf("watchdog (pid %d) still alive 5s after the parent was SIGKILLed", watchdog)
			}
		})
	}
}

// TestWatchdog_CloseStopsIt checks the normal end: Close kills and reaps
// the workers, the watchdog is told so and exits with status 0, and it
// was in a process group of its own.
func TestWatchdog_CloseStopsIt(t *testing.T) {
	t.Parallel()
	cfg, err := testConfig()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Start(Spec{Label: "A"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killLeftover(t, "worker A", a.Pid) })
	b, err := s.Start(Spec{Label: "B"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killLeftover(t, "worker B", b.Pid) })
	wd := watchdogOf(s)
	if wd == nil {
		t.Fatal("no watchdog after Start with Config.Watchdog")
	}
	t.Cleanup(func() { killLeftover(t, "watchdog", wd.Pid()) })
	if pg, err := syscall.Getpgid(wd.Pid()); err != nil || pg != wd.Pid() {
		t.Errorf("watchdog is in process group %d (%v), want its own", pg, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Kill(ctx); err != nil { // the watchdog hears -A, then stop
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if alive(wd.Pid()) { // Close's nil error says it exited with 0
		t.Errorf("watchdog (pid %d) still running after Close", wd.Pid())
	}
	for _, p := range []*Proc{a, b} {
		if st := p.Status(); !st.Exited || st.Signal != "SIGKILL" {
			t.Errorf("worker %s after Close: %v", p.Label, st)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
