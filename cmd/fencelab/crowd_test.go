package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/cmd/internal/crowd"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/child"
)

// TestCrowd_Refused: bad flags are one line on stderr and exit 2, before
// any server starts. They run in this process, through run and exitCode as
// main does, since a NUL cannot be passed to a real process's arguments.
func TestCrowd_Refused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--readers", "0"}, "fencelab crowd: --readers 0 must be between 1 and 1000"},
		{[]string{"--readers", "-1"}, "--readers -1 must be between 1 and 1000"},
		{[]string{"--readers", "99999999999999999999"}, "--readers 99999999999999999999 must be between 1 and 1000"},
		{[]string{"--readers", "1,,2"}, "entry 2 is empty"},
		{[]string{"--readers", "1\x00"}, `--readers "1\x00" is not a number`},
		{[]string{"--readers", "1,1,1,1,1,1,1,1,1,1,1"}, "11 loads: at most 10"},
		{[]string{"--readers"}, "flag needs an argument"},
		{[]string{"--timeout", "0s"}, "--timeout 0s must be above 0"},
		{[]string{"--timeout", "11m"}, "--timeout"},
		{[]string{"--lease", "0s"}, "--lease 0s"},
		{[]string{"--lease", "1ms"}, "--lease"},
		{[]string{"--pace", "-1s"}, "--pace"},
		{[]string{"--ramp", "-1s"}, "--ramp"},
		{[]string{"--ordering", "free-play"}, "--ordering"},
		{[]string{"--url", "http://example.com"}, "--allow-remote"},
		{[]string{"--url", "ftp://127.0.0.1"}, "--url"},
		{[]string{"--url", "http://127.0.0.1:8080", "--serve-flag=--max-runs=2"}, "--serve-flag"},
		{[]string{"--readers", "1,2", "--settle", "3m"}, "--settle"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--class", "0"}, "fencelab crowd: --class 0 must be between 1 and 60 students"},
		{[]string{"--class", "61"}, "--class 61 must be between 1 and 60 students"},
		{[]string{"--class", "-1"}, "--class -1 must be between 1 and 60 students"},
		{[]string{"--class", "x"}, `invalid value "x" for flag -class`},
		{[]string{"--class"}, "flag needs an argument"},
		{[]string{"--class", "3", "--readers", "5"}, "--readers is for readers pressing Run; --class plays students pressing Check"},
		{[]string{"--class", "3", "--ramp", "1s"}, "--ramp is for readers"},
		{[]string{"--class", "3", "--ordering", "zombie-first"}, "--ordering is for readers"},
		{[]string{"--class", "3", "--pace", "0s"}, "--pace is for readers"},
		{[]string{"--class", "3", "--settle", "1s"}, "--settle is for readers"},
		{[]string{"--class", "3", "--timeout", "0s"}, "--timeout 0s must be above 0"},
		{[]string{"--class", "3", "--timeout", "11m"}, "--timeout 11m0s must be above 0 and at most 10m0s"},
		{[]string{"--class", "3", "--lease", "11s"}, "--lease 11s must be between 100ms and 10s"},
		{[]string{"--class", "3", "--lease", "0s"}, "--lease 0s must be above 0"},
		{[]string{"--class", "3", "--url", "http://example.com"}, "--allow-remote"},
		{[]string{"--class", "3", "--url", "http://127.0.0.1:8080", "--serve-flag=--max-runs=2"}, "--serve-flag"},
	} {
		t.Run(strconv.Quote(strings.Join(c.args, " ")), func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append([]string{"crowd"}, c.args...), func(string) string { return "" }, nil, &stdout, &stderr)
			code := exitCode(err, &stderr)
			if code != 2 {
				t.Errorf("exit %d, want 2\nstderr: %s", code, stderr.String())
			}
			if lines := strings.Split(strings.TrimSpace(stderr.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], c.want) {
				t.Errorf("stderr %q: want one line with %q", stderr.String(), c.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout %q: want nothing", stdout.String())
			}
		})
	}
}

// TestCrowd_Command: the binary's crowd of its own prints one JSON report
// and exits 0; a --serve-flag its server refuses is exit 2, in the
// server's words.
func TestCrowd_Command(t *testing.T) {
	t.Parallel()
	m := marker(t)
	stdout, stderr, code := fencelab(t, []string{m}, "crowd", "--json", "--serve-flag=--spare-runs=2", "--readers", "1", "--lease", "300ms", "--pace", "0s")
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, stderr)
	}
	var r crowd.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || r.Readers != 1 || r.OK != 1 || r.ServerPID <= 0 {
		t.Errorf("stdout is not one report with one reader ok (%v):\n%s\nstderr: %s", err, stdout, stderr)
	}
	if !strings.Contains(stderr, "fencelab crowd: started fencelab serve (pid") {
		t.Errorf("stderr does not say it started a server:\n%s", stderr)
	}
	if left := marked(t, m); len(left) > 0 {
		t.Errorf("left running:\n%s", strings.Join(left, "\n"))
	}

	_, stderr, code = fencelab(t, nil, "crowd", "--serve-flag=--max-runs=0")
	if lines := strings.Split(strings.TrimSpace(stderr), "\n"); code != 2 || len(lines) != 1 || !strings.Contains(lines[0], "--max-runs 0") {
		t.Errorf("--serve-flag=--max-runs=0: exit %d, stderr %q: want 2 and one line with the server's refusal", code, stderr)
	}
}

// TestCrowd_Class: --class plays a class against the binary's server of
// its own and prints one JSON class report, the student ok, and exits 0.
func TestCrowd_Class(t *testing.T) {
	t.Parallel()
	m := marker(t)
	stdout, stderr, code := fencelab(t, []string{m}, "crowd", "--class", "1", "--json", "--serve-flag=--spare-runs=2")
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, stderr)
	}
	var r crowd.ClassReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || r.Students != 1 || r.OK != 1 || len(r.Each) != 1 || r.Each[0].Reports != 1 || r.ServerPID <= 0 {
		t.Errorf("stdout is not one class report with one student ok (%v):\n%s\nstderr: %s", err, stdout, stderr)
	}
	if left := marked(t, m); len(left) > 0 {
		t.Errorf("left running:\n%s", strings.Join(left, "\n"))
	}
}

// TestLoad_IsCrowdsOldName: `fencelab load` still works, as crowd, and
// says the new name in one line on stderr first.
func TestLoad_IsCrowdsOldName(t *testing.T) {
	t.Parallel()
	_, stderr, code := fencelab(t, nil, "load", "--readers", "0")
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if code != 2 || len(lines) != 2 || !strings.Contains(lines[0], "fencelab load is now fencelab crowd") || !strings.Contains(lines[1], "--readers 0 must be") {
		t.Errorf("load --readers 0: exit %d, stderr %q: want 2, the new name, then the refusal", code, stderr)
	}
	_, stderr, code = fencelab(t, nil, "load", "--help")
	if code != 0 || !strings.HasPrefix(stderr, "fencelab load is now fencelab crowd") || !strings.Contains(stderr, "Usage: fencelab crowd [flags]") {
		t.Errorf("load --help: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestCrowd_KilledLeavesNothing: SIGKILL gives the crowd no chance to
// stop its server; the parent-death signal does, and the server then stops
// its runs and workers.
func TestCrowd_KilledLeavesNothing(t *testing.T) {
	t.Parallel()
	m := marker(t)
	p := start(t, []string{"DATABASE_URL=" + pgtest.DSN(t), m}, "crowd", "--readers", "2", "--lease", "5s", "--serve-flag=--spare-runs=2")
	line := p.waitLine(t, "started fencelab serve (pid", 60*time.Second)
	pid, _ := strconv.Atoi(regexp.MustCompile(`pid (\d+)`).FindStringSubmatch(line)[1])
	p.waitLine(t, "readers against", 30*time.Second)
	eventually(t, 20*time.Second, "workers running", func() (bool, string) {
		left := marked(t, m)
		return len(left) >= 4, strings.Join(left, "\n") // the crowd, its server, two workers at least
	})
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	eventually(t, 20*time.Second, "the server and its workers gone", func() (bool, string) {
		left := marked(t, m)
		st := child.State(pid) // reaped, or a zombie if nothing reaps orphans here
		return len(left) == 0 && (st == 0 || st == 'Z'), fmt.Sprintf("server state %q; %s", st, strings.Join(left, "\n"))
	})
}
