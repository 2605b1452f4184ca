package pgcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// helperEnv, when set, makes the test binary act as the helper process of
// TestParentKilled instead of running tests.
const helperEnv = "FENCELAB_PGCLUSTER_HELPER"

// helperInfo is the JSON line the helper prints once its cluster is up.
type helperInfo struct {
	Pid int    `json:"pid"`
	Dir string `json:"dir"`
}

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		runHelper()
		return
	}
	os.Exit(m.Run())
}

// runHelper starts a cluster, reports it and blocks until killed. It never
// calls Stop: cleaning up is the watchdog's job.
func runHelper() {
	c, err := Start(context.Background(), Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	if err := json.NewEncoder(os.Stdout).Encode(helperInfo{Pid: c.Pid(), Dir: c.Dir()}); err != nil {
		os.Exit(3)
	}
	time.Sleep(10 * time.Minute)
	os.Exit(4)
}

// startCluster starts a cluster for a test and stops it at cleanup, so a
// failing test leaves nothing behind.
func startCluster(t *testing.T) *Cluster {
	t.Helper()
	began := time.Now()
	c, err := Start(context.Background(), Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("Start took %v", time.Since(began))
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestStartQueryStop(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	c := startCluster(t)
	pid, dir := c.Pid(), c.Dir()
	if pid <= 0 || !processAlive(pid) {
		t.Fatalf("postmaster pid %d not running", pid)
	}
	for _, p := range []string{"data", "sock", "postgres.log"} {
		if !exists(filepath.Join(dir, p)) {
			t.Errorf("%s missing from %s", p, dir)
		}
	}

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		t.Fatalf("connect %q: %v", c.DSN(), err)
	}
	var one int
	var user string
	if err := conn.QueryRow(ctx, "SELECT 1, current_user").Scan(&one, &user); err != nil {
		t.Fatalf("SELECT 1: %v", err)
	}
	if one != 1 || user != "fencelab" {
		t.Errorf("got %d, %q; want 1, \"fencelab\"", one, user)
	}
	conn.Close(ctx)
	// Nobody logs in without the password, as the superuser or as any
	// other role: a worker program on this socket cannot be the server.
	for _, dsn := range []string{strings.Replace(c.DSN(), "password=", "password=x", 1), withoutPassword(c.DSN()),
		strings.Replace(withoutPassword(c.DSN()), "user=fencelab", "user=postgres", 1)} {
		if conn, err := pgx.Connect(ctx, dsn); err == nil {
			conn.Close(ctx)
			t.Errorf("connected without the password: %s", withoutPassword(dsn))
		} else if !strings.Contains(err.Error(), "password authentication failed") && !strings.Contains(err.Error(), "password") {
			t.Errorf("without the password: %v, want a refused password", err)
		}
	}
	if exists(filepath.Join(dir, "pwfile")) {
		t.Errorf("initdb's password file is still in %s", dir)
	}

	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if exists(dir) {
		t.Errorf("folder %s still exists after Stop", dir)
	}
	if exists(fmt.Sprintf("/proc/%d", pid)) {
		t.Errorf("postmaster pid %d still exists after Stop", pid)
	}
	for i := 0; i < 50 && runtime.NumGoroutine() > goroutines; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("%d goroutines after Stop, %d before Start", n, goroutines)
	}
}

func TestStopIdempotent(t *testing.T) {
	c := startCluster(t)
	// An open connection must not stop a fast shutdown.
	conn, err := pgx.Connect(context.Background(), c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = c.Stop() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Stop %d: %v", i, err)
		}
	}
	if err := c.Stop(); err != nil {
		t.Errorf("Stop after Stop: %v", err)
	}
	if exists(c.Dir()) {
		t.Errorf("folder %s still exists", c.Dir())
	}
}

func TestOpenUsesDatabaseURL(t *testing.T) {
	const url = "postgres://example/db"
	dsn, stop, err := Open(context.Background(), func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	}, Options{})
	if err != nil || dsn != url {
		t.Fatalf("Open = %q, %v; want %q", dsn, err, url)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenStartsCluster(t *testing.T) {
	dsn, stop, err := Open(context.Background(), func(string) string { return "" }, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("ParseConfig(%q): %v", dsn, err)
	}
	sockDir := cfg.Host
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close(context.Background())
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Dir(sockDir)) {
		t.Errorf("%s still exists after stop", filepath.Dir(sockDir))
	}
}

// TestParentKilled SIGKILLs a process that owns a cluster and expects the
// postmaster to die (Pdeathsig, watchdog) and the folder to be removed
// (watchdog).
func TestParentKilled(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var info helperInfo
	// Whatever happens, leave no helper, postgres or folder behind.
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if info.Pid > 0 && processAlive(info.Pid) {
			t.Logf("cleanup: killing leftover postmaster %d", info.Pid)
			_ = syscall.Kill(-info.Pid, syscall.SIGKILL)
			_ = syscall.Kill(info.Pid, syscall.SIGKILL)
			for i := 0; i < 100 && processAlive(info.Pid); i++ {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if info.Dir != "" && strings.Contains(filepath.Base(info.Dir), "fencelab-pg-") {
			_ = os.RemoveAll(info.Dir)
		}
	})

	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- line
	}()
	select {
	case line := <-lines:
		if err := json.Unmarshal([]byte(line), &info); err != nil || info.Pid <= 0 || info.Dir == "" {
			t.Fatalf("helper said %q (%v); stderr:\n%s", line, err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("helper did not report within 60s; stderr:\n%s", stderr.String())
	}
	if !processAlive(info.Pid) || !exists(info.Dir) {
		t.Fatalf("helper's cluster not running: pid %d alive=%v, %s exists=%v", info.Pid, processAlive(info.Pid), info.Dir, exists(info.Dir))
	}

	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	deadline := killed.Add(15 * time.Second)
	var pidGone, dirGone time.Duration
	for time.Now().Before(deadline) && (pidGone == 0 || dirGone == 0) {
		if pidGone == 0 && !processAlive(info.Pid) {
			pidGone = time.Since(killed)
		}
		if dirGone == 0 && !exists(info.Dir) {
			dirGone = time.Since(killed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pidGone == 0 {
		t.Errorf("postmaster %d still running 15s after its parent was killed", info.Pid)
	}
	if dirGone == 0 {
		t.Errorf("folder %s still exists 15s after its parent was killed", info.Dir)
	}
	t.Logf("after SIGKILL of the parent: postmaster gone in %v, folder gone in %v", pidGone, dirGone)
}

func TestFindBinariesNone(t *testing.T) {
	t.Setenv("PATH", "")
	empty := t.TempDir()
	_, err := findBinaries([]string{filepath.Join(empty, "*", "bin"), filepath.Join(empty, "pgsql", "bin")})
	if !errors.Is(err, ErrNoBinaries) {
		t.Fatalf("err = %v; want ErrNoBinaries", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("message is not one line: %q", msg)
	}
	for _, want := range []string{"initdb", "postgres", "apt-get install postgresql", "DATABASE_URL"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not mention %q", msg, want)
		}
	}
}

// TestFindBinariesHighestVersion uses fake installations: the highest
// major version wins numerically, and a folder with only one of the two
// binaries is skipped.
func TestFindBinariesHighestVersion(t *testing.T) {
	t.Setenv("PATH", "")
	root := t.TempDir()
	fake := func(version string, names ...string) {
		dir := filepath.Join(root, version, "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			script := fmt.Sprintf("#!/bin/sh\necho '%s (PostgreSQL) %s.3 (Fake)'\n", n, version)
			if err := os.WriteFile(filepath.Join(dir, n), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	fake("9.6", "initdb", "postgres")
	fake("10", "initdb", "postgres")
	fake("16", "initdb") // incomplete: no postgres
	b, err := findBinaries([]string{filepath.Join(root, "*", "bin")})
	if err != nil {
		t.Fatal(err)
	}
	wantDir := filepath.Join(root, "10", "bin")
	if b.Initdb != filepath.Join(wantDir, "initdb") || b.Postgres != filepath.Join(wantDir, "postgres") || b.Version != "10.3" {
		t.Errorf("got %+v; want initdb and postgres in %s, version 10.3", b, wantDir)
	}
}

// TestFindBinariesReal checks the machine's own installation, which the
// other tests rely on.
func TestFindBinariesReal(t *testing.T) {
	b, err := FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(b.Initdb) != filepath.Dir(b.Postgres) || b.Version == "" {
		t.Errorf("got %+v", b)
	}
	t.Logf("%+v", b)
}

func TestDSNQuoting(t *testing.T) {
	for _, host := range []string{"/tmp/x/sock", "/tmp/my dir/sock", `/tmp/it's\odd/sock`} {
		dsn := fmt.Sprintf("host=%s port=5432 user=fencelab dbname=postgres sslmode=disable", dsnValue(host))
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Errorf("ParseConfig(%q): %v", dsn, err)
			continue
		}
		if cfg.Host != host {
			t.Errorf("ParseConfig(%q).Host = %q; want %q", dsn, cfg.Host, host)
		}
	}
}

// TestStartFailsFast makes postgres exit at once (an invalid setting) and
// expects a prompt error quoting its log, with nothing left behind.
func TestStartFailsFast(t *testing.T) {
	parent := shortTempDir(t)
	began := time.Now()
	c, err := Start(context.Background(), Options{TempDir: parent, Settings: map[string]string{"max_connections": "bogus"}})
	if err == nil {
		c.Stop()
		t.Fatal("Start succeeded with max_connections=bogus")
	}
	t.Logf("Start failed in %v: %v", time.Since(began), err)
	if !strings.Contains(err.Error(), "exited during startup") || !strings.Contains(err.Error(), "max_connections") {
		t.Errorf("error does not explain the early exit with the log's tail: %v", err)
	}
	assertEmpty(t, parent)
}

// TestStartSocketPathTooLong expects a clear error, and no leftovers, when
// the socket path cannot fit in sun_path.
func TestStartSocketPathTooLong(t *testing.T) {
	parent := filepath.Join(shortTempDir(t), strings.Repeat("x", 100))
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Options{TempDir: parent})
	if err == nil || !strings.Contains(err.Error(), "shorter TempDir") {
		t.Fatalf("err = %v; want a socket path error", err)
	}
	assertEmpty(t, parent)
}

// TestStartAsRootUnreachableTempDir: as root, postgres runs as another user
// who must be able to reach the folder; a root-only TempDir gets advice.
func TestStartAsRootUnreachableTempDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root switches to an unprivileged user")
	}
	parent := filepath.Join(shortTempDir(t), "private")
	if err := os.Mkdir(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Options{TempDir: parent})
	if err == nil || !strings.Contains(err.Error(), "cannot enter") {
		t.Fatalf("err = %v; want an unreachable folder error", err)
	}
	t.Log(err)
	assertEmpty(t, parent)
}

// shortTempDir returns a temp folder that every user may enter, with a
// short path (t.TempDir's are long and root-only).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fl-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// assertEmpty fails if Start left anything in dir.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left behind: %s", filepath.Join(dir, e.Name()))
	}
}

// withoutPassword drops a keyword/value DSN's password.
func withoutPassword(dsn string) string {
	var out []string
	for _, kv := range strings.Fields(dsn) {
		if !strings.HasPrefix(kv, "password=") {
			out = append(out, kv)
		}
	}
	return strings.Join(out, " ")
}

// TestBackendMemoryIsCapped: a statement that needs more private memory
// than a backend may have (here a 700 MB text) gets Postgres's own "out of
// memory" error in its backend alone; another session goes on, and the
// postmaster is the same one (nothing restarted).
func TestBackendMemoryIsCapped(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the cap is set with prlimit, which only Linux has") // Linux is where CI runs
	}
	c := startCluster(t)
	ctx := context.Background()
	other, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	var started time.Time
	if err := other.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&started); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, "SELECT length(string_agg(repeat('x', 1000000), '')) FROM generate_series(1, 700)").Scan(&n)
	var pe interface{ SQLState() string }
	if !errors.As(err, &pe) || pe.SQLState() != "53200" {
		t.Fatalf("a 700 MB text: %d, %v; want Postgres's out of memory (53200)", n, err)
	}
	var again time.Time
	if err := other.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&again); err != nil || !again.Equal(started) {
		t.Fatalf("the other session after it: %v, %v (started %v): want it untouched", again, err, started)
	}
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil {
		t.Fatalf("the refused session's next statement: %v", err)
	}
}
