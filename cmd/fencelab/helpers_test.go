package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/labtest"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/servertest"
)

func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	servertest.Cleanup()
	os.Exit(code)
}

// binary is the fencelab binary, built once: the tests drive it as a black
// box, as a person or the CI would.
func binary(t *testing.T) string { return servertest.Binary(t) }

// fencelab runs the binary to completion with DATABASE_URL pointing at the
// test cluster (unless env overrides it) and returns stdout, stderr and the
// exit code.
func fencelab(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	// Every event the command emits is tapped, and must match the schema.
	tap := filepath.Join(t.TempDir(), "events.ndjson")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+pgtest.DSN(t), labtest.TapEnv+"="+tap)
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	n := labtest.File(t, tap)
	if len(args) > 0 && args[0] == "run" && err == nil && n == 0 && !slices.Contains(args, "--help") {
		t.Errorf("fencelab %s emitted no event to its tap", strings.Join(args, " "))
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("fencelab %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), code
}

// runJSON runs `fencelab run --json` in fresh schemas and decodes the outcome.
func runJSON(t *testing.T, args ...string) (protocol.Outcome, error) {
	jobs, recv := pgtest.Schema(t), pgtest.Schema(t)
	args = append([]string{"run", "--json", "--lease", "300ms", "--schema", jobs, "--receiver-schema", recv}, args...)
	stdout, stderr, code := fencelab(t, nil, args...)
	var o protocol.Outcome
	if code != 0 {
		return o, fmt.Errorf("fencelab %s: exit %d\nstderr: %s", strings.Join(args, " "), code, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), &o); err != nil {
		return o, fmt.Errorf("fencelab %s: stdout is not one JSON outcome: %v\n%s", strings.Join(args, " "), err, stdout)
	}
	return o, nil
}

// marker is an environment variable whose value is unique to one test;
// every process started under it inherits it, which is how the leak checks
// find what a test started, whoever its parent is now.
func marker(t *testing.T) string {
	return fmt.Sprintf("FENCELAB_TEST_MARK=%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano())
}

// marked lists the live (not zombie) processes whose environment holds m.
func marked(t *testing.T, m string) []string {
	t.Helper()
	return pgtest.Marked(m)
}

// eventually polls cond every 20ms until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: still not true after %v: %s", what, timeout, last)
}

// started is a fencelab process running in the background whose output
// lines can be waited for.
type started struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	seen  chan struct{}
	done  chan struct{}
}

func start(t *testing.T, env []string, args ...string) *started {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	// stdout and stderr both go to one pipe, read line by line.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	s := &started{cmd: cmd, seen: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			s.mu.Lock()
			s.lines = append(s.lines, sc.Text())
			close(s.seen)
			s.seen = make(chan struct{})
			s.mu.Unlock()
		}
		_ = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	})
	return s
}

// waitLine waits until an output line contains want, and returns it.
func (s *started) waitLine(t *testing.T, want string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		for _, l := range s.lines {
			if strings.Contains(l, want) {
				s.mu.Unlock()
				return l
			}
		}
		ch := s.seen
		s.mu.Unlock()
		select {
		case <-ch:
		case <-s.done:
			t.Fatalf("process exited before printing %q; stderr:\n%s", want, strings.Join(s.lines, "\n"))
		case <-deadline:
			t.Fatalf("no line with %q after %v; stderr:\n%s", want, timeout, strings.Join(s.lines, "\n"))
		}
	}
}
