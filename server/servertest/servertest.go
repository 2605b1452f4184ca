// Package servertest builds the fencelab binary once per test binary, for
// the tests that run it whole: the CLI's black-box tests, the server tests
// (whose workers are its processes) and the browser tests; and holds the
// log buffer those tests read while a server writes it (LogBuffer).
package servertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The package whose binary the tests run.
const pkg = "github.com/fencelab/fencelab/cmd/fencelab"

var (
	once sync.Once
	dir  string
	path string
	err  error
)

// TagsEnv names the environment variable whose value, if set, is passed to
// go build as -tags: FENCELAB_BUILD_TAGS=fencelab_shout builds a binary
// whose event texts are all upper-cased (server/session/eventlog), to show that the
// page, the exports and the replay read the typed fields alone.
const TagsEnv = "FENCELAB_BUILD_TAGS"

// Binary builds cmd/fencelab on first use and returns its path. Call
// Cleanup from TestMain once the tests are done.
func Binary(tb testing.TB) string {
	tb.Helper()
	once.Do(func() {
		dir, err = os.MkdirTemp("", "fencelab-bin-*")
		if err != nil {
			return
		}
		path = filepath.Join(dir, "fencelab")
		args := []string{"build", "-o", path}
		if tags := os.Getenv(TagsEnv); tags != "" {
			args = append(args, "-tags", tags)
		}
		out, berr := exec.Command("go", append(args, pkg)...).CombinedOutput()
		if berr != nil {
			err = fmt.Errorf("go build -o %s %s: %v\n%s", path, pkg, berr, out)
		}
	})
	if err != nil {
		tb.Fatalf("cannot build fencelab: %v", err)
	}
	return path
}

// Cleanup removes the binary Binary built, if it built one.
func Cleanup() {
	if dir != "" {
		os.RemoveAll(dir)
	}
}

var (
	pythonOnce sync.Once
	python     string
	pythonWhy  string
)

// Python returns a python3 that can import psycopg, for the reference
// workers of `fencelab check --worker` (cmd/internal/harness/examples/python):
// Debian's first (python3-psycopg), then whichever is first on PATH. The
// workers are the proof of the harness, so none is a failure, never a
// skip.
func Python(tb testing.TB) string {
	tb.Helper()
	pythonOnce.Do(func() {
		var tried []string
		cands := []string{"/usr/bin/python3"}
		if p, err := exec.LookPath("python3"); err == nil {
			cands = append(cands, p)
		}
		for _, p := range cands {
			out, err := exec.Command(p, "-c", "import psycopg").CombinedOutput()
			if err == nil {
				python = p
				return
			}
			tried = append(tried, fmt.Sprintf("%s: %v %s", p, err, strings.TrimSpace(string(out))))
		}
		pythonWhy = strings.Join(tried, "; ")
	})
	if python == "" {
		tb.Fatalf("no python3 here can import psycopg (install Debian's python3 and python3-psycopg): %s", pythonWhy)
	}
	return python
}
