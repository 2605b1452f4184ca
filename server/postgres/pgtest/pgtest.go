// Package pgtest gives each test binary one PostgreSQL database: a private
// cluster (server/postgres/pgcluster) started by Main, or DATABASE_URL when set.
// Tests share one pool and isolate themselves with fresh schemas, so they
// can run in parallel against a single server.
//
// Use it from a package's tests with
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/postgres/pgcluster"
	"github.com/fencelab/fencelab/server/run/child"
)

// poolMaxConns caps the shared pool: enough for parallel tests, far below
// the private cluster's max_connections.
const poolMaxConns = 20

var (
	dsn string // set by Main before any test runs

	// ExportURL, set by a TestMain before Main, puts the database's
	// connection string in the process's DATABASE_URL before the tests
	// run, for runnable examples: they take no testing.TB and connect as a
	// program would, to $DATABASE_URL.
	ExportURL bool

	poolMu sync.Mutex
	pool   *pgxpool.Pool
)

// Main starts one cluster for the whole test binary (or uses DATABASE_URL),
// runs the tests, stops the cluster and exits with the tests' code. Tests
// that need Postgres must fail, never skip, when it is missing: then Main
// prints ErrNoBinaries's line to stderr and exits 1. SIGINT and SIGTERM stop
// the cluster before exiting 1; the cluster's watchdog covers SIGKILL.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit, for a TestMain that has more to clean up:
//
//	func TestMain(m *testing.M) { code := pgtest.Run(m); cleanup(); os.Exit(code) }
func Run(m *testing.M) int {
	flag.Parse() // for testing.Verbose
	// Every process the tests start inherits this mark, whoever its parent
	// is later; once the suite is over, none of them may still be alive.
	mark := fmt.Sprintf("%s=%d-%d", suiteMarkEnv, os.Getpid(), time.Now().UnixNano())
	os.Setenv(suiteMarkEnv, mark[len(suiteMarkEnv)+1:])
	var logf func(string, ...any)
	if testing.Verbose() {
		logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	// A signal during startup cancels it; Start then removes what it made.
	startCtx, cancelStart := context.WithCancel(context.Background())
	startDone := make(chan struct{})
	interrupted := make(chan bool, 1)
	go func() {
		select {
		case <-sigs:
			cancelStart()
			interrupted <- true
		case <-startDone:
			interrupted <- false
		}
	}()
	var stop func() error
	var err error
	dsn, stop, err = pgcluster.Open(startCtx, os.Getenv, pgcluster.Options{Logf: logf})
	close(startDone)
	if <-interrupted {
		_ = stop() // Open may have succeeded just before the signal
		fmt.Fprintln(os.Stderr, "pgtest: interrupted while starting PostgreSQL")
		return 1
	}
	cancelStart()
	if err != nil {
		if errors.Is(err, pgcluster.ErrNoBinaries) {
			fmt.Fprintln(os.Stderr, pgcluster.ErrNoBinaries)
		} else {
			fmt.Fprintf(os.Stderr, "pgtest: start PostgreSQL: %v\n", err)
		}
		return 1
	}

	if ExportURL {
		os.Setenv("DATABASE_URL", dsn)
	}

	// From here on, a signal stops the cluster (terminating the tests'
	// sessions) and exits; Stop is safe to race with the normal path.
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "pgtest: %v: stopping PostgreSQL\n", sig)
		if err := stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stop PostgreSQL: %v\n", err)
		}
		os.Exit(1)
	}()

	code := m.Run()
	closePool()
	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: stop PostgreSQL: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if left := waitNoLeaks(mark, 10*time.Second); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "pgtest: processes started by this test binary are still running after the suite:\n  %s\n",
			strings.Join(left, "\n  "))
		if code == 0 {
			code = 1
		}
	}
	return code
}

// suiteMarkEnv names the environment variable that marks every process a
// test binary starts, so the leak check can find them.
const suiteMarkEnv = "FENCELAB_TEST_SUITE"

// waitNoLeaks waits up to timeout for every live process whose
// environment holds mark (other than this one) to exit, and returns those
// still alive. Zombies count as gone: they hold nothing but a pid.
func waitNoLeaks(mark string, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		left := Marked(mark)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Marked lists the live processes (not zombies) whose environment contains
// the exact entry mark ("NAME=value"), as "pid N (state): command line".
// /proc/PID/environ is the environment the process started with.
func Marked(mark string) []string {
	entry := []byte("\x00" + mark + "\x00")
	return Processes(func(_, env []byte) bool { return bytes.Contains(append([]byte{0}, env...), entry) })
}

// Processes lists the live processes (not zombies, not this one) for which
// match, given the NUL-separated command line and environment from /proc,
// is true, as "pid N (state): command line" (cut at 200 bytes). Without
// /proc it lists nothing.
func Processes(match func(cmdline, env []byte) bool) []string {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		return nil // no /proc: nothing to check with
	}
	procs, _ := child.Procs()
	var out []string
	for _, p := range procs {
		if p.Pid == os.Getpid() || child.Gone(p.State) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.Pid))
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.Pid))
		if !match(cmdline, env) {
			continue
		}
		cmd := strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		if len(cmd) > 200 {
			cmd = cmd[:200] + "…"
		}
		out = append(out, fmt.Sprintf("pid %d (%c): %s", p.Pid, p.State, cmd))
	}
	return out
}

// closePool closes the shared pool, giving up after a few seconds: Close
// waits for every acquired connection, and a test that leaked one must not
// hang the binary (stopping the server ends those sessions anyway).
func closePool() {
	poolMu.Lock()
	p := pool
	pool = nil
	poolMu.Unlock()
	if p == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		p.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		fmt.Fprintln(os.Stderr, "pgtest: pool still has acquired connections after 5s; a test did not release one")
	}
}

// DSN returns the connection string of the binary's database. It fails
// the test if Main did not run.
func DSN(tb testing.TB) string {
	tb.Helper()
	if dsn == "" {
		tb.Fatal("pgtest: no database: add func TestMain(m *testing.M) { pgtest.Main(m) } to the package's tests")
	}
	return dsn
}

// Pool returns the pool shared by all tests of the binary, creating it on
// first use; Main closes it. Tests must not close it.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	d := DSN(tb)
	poolMu.Lock()
	defer poolMu.Unlock()
	if pool != nil {
		return pool
	}
	cfg, err := pgxpool.ParseConfig(d)
	if err != nil {
		tb.Fatalf("pgtest: pool config: %v", err)
	}
	cfg.MaxConns = poolMaxConns
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("pgtest: pool: %v", err)
	}
	pool = p
	return pool
}

// Schema returns a fresh, unique schema name ("t_" and 16 random hex
// digits) for the test to create and use, and drops that schema with
// everything in it when the test ends, unless the test failed: then it is
// kept, and logged, for inspection. Schema does not create it.
func Schema(tb testing.TB) string {
	tb.Helper()
	d := DSN(tb)
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatalf("pgtest: schema name: %v", err)
	}
	name := "t_" + hex.EncodeToString(b[:])
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("kept schema %s for inspection: psql '%s'", name, withoutPassword(d))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := engine.DropSchemas(ctx, Pool(tb), name); err != nil {
			tb.Errorf("pgtest: drop schema %s: %v", name, err)
		}
	})
	return name
}

// Database makes a new, empty database in the binary's cluster, for a
// test of what happens on a database nobody has used (the first instances
// of a server), drops it when the test ends, and returns a pool config
// for it. The test's pools on it must be closed by then (t.Cleanup runs
// last-in, first-out: register them after calling Database).
func Database(tb testing.TB) *pgxpool.Config {
	tb.Helper()
	db := "db_" + strings.TrimPrefix(Schema(tb), "t_")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := Pool(tb).Exec(ctx, "CREATE DATABASE "+db); err != nil {
		tb.Fatalf("pgtest: create database: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := Pool(tb).Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: drop database %s: %v", db, err)
		}
	})
	cfg, err := pgxpool.ParseConfig(DSN(tb))
	if err != nil {
		tb.Fatalf("pgtest: pool config: %v", err)
	}
	cfg.ConnConfig.Database = db
	return cfg
}

// withoutPassword is a connection string with its password's value
// replaced, for a log: a private cluster's superuser logs in with one.
func withoutPassword(dsn string) string {
	f := strings.Fields(dsn)
	for i, kv := range f {
		if strings.HasPrefix(kv, "password=") {
			f[i] = "password=(hidden)"
		}
	}
	return strings.Join(f, " ")
}
