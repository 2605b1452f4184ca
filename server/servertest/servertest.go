// Package servertest builds the fencelab binary once per test binary, for
// the tests that run it whole: the CLI's black-box tests, the server tests
// (whose workers are its processes) and the browser tests.
package servertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
		out, berr := exec.Command("go", "build", "-o", path, pkg).CombinedOutput()
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
