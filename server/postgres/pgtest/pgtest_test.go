package pgtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

// helperEnv, when set, makes TestInterruptHelper act as the helper process
// of TestInterrupt.
const helperEnv = "FENCELAB_PGTEST_HELPER"

func schemaExists(t *testing.T, name string) bool {
	t.Helper()
	var ok bool
	err := Pool(t).QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", name).Scan(&ok)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestSchemaDroppedAfterTest(t *testing.T) {
	var name string
	t.Run("user", func(t *testing.T) {
		name = Schema(t)
		ctx := context.Background()
		s := pgx.Identifier{name}.Sanitize()
		if _, err := Pool(t).Exec(ctx, "CREATE SCHEMA "+s+"; CREATE TABLE "+s+".jobs (id int)"); err != nil {
			t.Fatal(err)
		}
		if !schemaExists(t, name) {
			t.Fatalf("schema %s not created", name)
		}
	})
	if schemaExists(t, name) {
		t.Errorf("schema %s still exists after its test passed", name)
	}
}

func TestSchemaName(t *testing.T) {
	valid := regexp.MustCompile(`^t_[0-9a-f]{16}$`)
	seen := map[string]bool{}
	for range 100 {
		n := Schema(t)
		if !valid.MatchString(n) || len(n) > 63 {
			t.Fatalf("invalid schema name %q", n)
		}
		if seen[n] {
			t.Fatalf("duplicate schema name %q", n)
		}
		seen[n] = true
	}
}

// failedTB is a testing.TB whose test has failed, recording cleanups and
// logs instead of running them.
type failedTB struct {
	testing.TB
	cleanups []func()
	logs     []string
}

func (f *failedTB) Failed() bool      { return true }
func (f *failedTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *failedTB) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

func TestSchemaKeptWhenTestFailed(t *testing.T) {
	ftb := &failedTB{TB: t}
	name := Schema(ftb)
	if _, err := Pool(t).Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for _, fn := range ftb.cleanups {
		fn()
	}
	if !schemaExists(t, name) {
		t.Errorf("schema %s dropped although the test failed", name)
	}
	// The message names the schema and how to reach it, but never the
	// private cluster's password.
	want := fmt.Sprintf("kept schema %s for inspection: psql '%s'", name, withoutPassword(DSN(t)))
	if len(ftb.logs) != 1 || ftb.logs[0] != want {
		t.Errorf("logs = %q; want [%q]", ftb.logs, want)
	}
	if pw := passwordOf(DSN(t)); pw != "" && strings.Contains(ftb.logs[0], pw) {
		t.Errorf("the log holds the cluster's password: %q", ftb.logs[0])
	}
	if _, err := Pool(t).Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
}

func TestPoolShared(t *testing.T) {
	p := Pool(t)
	if p != Pool(t) {
		t.Error("Pool returned two different pools")
	}
	if got := p.Config().MaxConns; got != poolMaxConns {
		t.Errorf("MaxConns = %d; want %d", got, poolMaxConns)
	}
	var one int
	if err := p.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
}

// TestInterruptHelper is the helper process of TestInterrupt: it reports
// the binary's DSN and waits to be interrupted. Without helperEnv it does
// nothing.
func TestInterruptHelper(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	// An open session must not keep the cluster from stopping.
	if err := Pool(t).Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(DSN(t)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Minute)
}

// TestInterrupt sends SIGINT to a test binary using Main and expects it to
// exit 1 with its cluster stopped and removed.
func TestInterrupt(t *testing.T) {
	if os.Getenv("DATABASE_URL") != "" {
		t.Skip("DATABASE_URL is set: Main starts no cluster to clean up")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInterruptHelper$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var dir string
	pid := 0
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-waited
		if pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		if strings.Contains(filepath.Base(dir), "fencelab-pg-") {
			_ = os.RemoveAll(dir)
		}
	})

	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- line
	}()
	var dsn string
	select {
	case line := <-lines:
		if err := json.Unmarshal([]byte(line), &dsn); err != nil {
			t.Fatalf("helper said %q (%v); stderr:\n%s", line, err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("helper did not report within 60s; stderr:\n%s", stderr.String())
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Dir(cfg.Host)
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	if pid, err = strconv.Atoi(first); err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-waited:
		waited <- err // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatalf("helper still running 30s after SIGINT; stderr:\n%s", stderr.String())
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
		t.Errorf("helper exited with %v; want exit status 1", err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("cluster folder %s still exists", dir)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Errorf("postmaster %d still exists", pid)
	}
	t.Logf("helper stderr:\n%s", stderr.String())
}

// passwordOf is a keyword/value DSN's password, or "".
func passwordOf(dsn string) string {
	for _, kv := range strings.Fields(dsn) {
		if v, ok := strings.CutPrefix(kv, "password="); ok {
			return v
		}
	}
	return ""
}
