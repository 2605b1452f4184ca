// Package pgcluster starts a private, throwaway PostgreSQL cluster from the
// machine's server binaries, so that fencelab and its tests need no
// configured database: the cluster lives in a temp folder, listens on a Unix
// socket only, and is removed when the process is done with it, also when
// the process is interrupted or killed.
package pgcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/server/run/child"
)

// Fixed parts of the cluster's layout and identity. The port only names the
// socket file (<dir>/sock/.s.PGSQL.5432); nothing listens on TCP, so every
// cluster can use the same one.
const (
	superuser = "fencelab"
	port      = 5432
	// maxSocketPath is the longest socket path we allow: sun_path holds
	// 104 bytes on macOS and 108 on Linux, including the trailing NUL.
	maxSocketPath = 103
)

// Defaults for Options.
const (
	DefaultMaxConnections = 300
	DefaultSharedBuffers  = "128MB"
	DefaultStartTimeout   = 60 * time.Second
	// DefaultBackendMemory is the private memory one Postgres process may
	// allocate (RLIMIT_DATA): shared_buffers is shared memory and not in
	// it. A statement that needs more gets Postgres's own "out of memory"
	// error in its backend alone; nothing else restarts. Our statements
	// use a few MiB; a stranger's 952-byte statement that doubles a text
	// 24 times once grew a backend to 8.7 GB.
	DefaultBackendMemory = 512 << 20
)

// shutdownGrace is how long Stop waits after a fast shutdown (SIGINT) and
// again after an immediate shutdown (SIGQUIT) before escalating.
const shutdownGrace = 5 * time.Second

// watchdogGrace is how long the watchdog of a parent that died waits for
// the postmaster's immediate shutdown before it SIGKILLs it: long enough
// for a server under load, short of leaving one running for good.
const watchdogGrace = 30 * time.Second

// Options configures Start. The zero value is ready to use.
type Options struct {
	// Logf receives progress notes (one line each); nil means silent.
	Logf func(format string, args ...any)
	// TempDir is the parent folder for the cluster folder; "" means
	// os.TempDir(). Keep it short: the socket path must fit in 103 bytes.
	TempDir string
	// Binaries selects the server binaries; nil means FindBinaries.
	Binaries *Binaries
	// MaxConnections is the server's max_connections; 0 means 300.
	MaxConnections int
	// SharedBuffers is the server's shared_buffers; "" means 128MB.
	SharedBuffers string
	// StartTimeout bounds the wait for the server to accept connections;
	// 0 means 60s.
	StartTimeout time.Duration
	// Settings are extra server settings passed as -c name=value; they
	// override the defaults of the same name.
	Settings map[string]string
	// BackendMemory caps, in bytes, the private memory of each Postgres
	// process (RLIMIT_DATA, set on the postmaster and so inherited by
	// every backend it forks); 0 means DefaultBackendMemory, -1 none. Where
	// the system cannot set it (not Linux), Start says so through Logf.
	BackendMemory int64
}

// Cluster is a running private PostgreSQL cluster. Its methods are safe for
// concurrent use.
type Cluster struct {
	dir  string
	dsn  string
	logf func(format string, args ...any)

	bin     Binaries
	opts    Options
	cred    *syscall.Credential
	restart sync.Mutex // one Restart at a time, and none during Stop

	cmd     *exec.Cmd       // the postmaster, a direct child; nil until started
	exited  chan struct{}   // closed when the postmaster has been reaped
	waitErr error           // postmaster's exit status; read after exited closes
	wd      *child.Watchdog // nil until started; see launch

	stopOnce sync.Once
	stopErr  error
}

// DSN returns a keyword/value connection string for the cluster's socket,
// accepted by pgx.ParseConfig and psql. It holds the superuser's
// password: a secret, for no log, error or command line.
func (c *Cluster) DSN() string { return c.dsn }

// Dir returns the cluster folder, which holds data/, sock/ and postgres.log.
func (c *Cluster) Dir() string { return c.dir }

// LogPath returns the path of the server log, for diagnosing failures.
func (c *Cluster) LogPath() string { return filepath.Join(c.dir, "postgres.log") }

// Pid returns the postmaster's process id.
func (c *Cluster) Pid() int {
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// Open returns the database to use: DATABASE_URL (read via getenv, nil
// meaning os.Getenv) when set, with a no-op stop; otherwise a freshly
// started private cluster and its Stop. stop is never nil, so it can be
// deferred before checking err.
func Open(ctx context.Context, getenv func(string) string, opts Options) (dsn string, stop func() error, err error) {
	noop := func() error { return nil }
	if getenv == nil {
		getenv = os.Getenv
	}
	if u := getenv("DATABASE_URL"); u != "" {
		return u, noop, nil
	}
	c, err := Start(ctx, opts)
	if err != nil {
		return "", noop, err
	}
	return c.DSN(), c.Stop, nil
}

// Start creates a cluster in a new temp folder, starts postgres as a direct
// child and returns once it accepts connections. When no server binaries
// are found the error is ErrNoBinaries. On any failure nothing is left
// behind.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	began := time.Now()
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	var bin Binaries
	if opts.Binaries != nil {
		bin = *opts.Binaries
	} else {
		var err error
		if bin, err = FindBinaries(); err != nil {
			return nil, err
		}
	}

	var cred *syscall.Credential
	var account string
	if os.Geteuid() == 0 {
		var err error
		if cred, account, err = unprivilegedUser(); err != nil {
			return nil, err
		}
		logf("pgcluster: running as root; starting PostgreSQL as user %s (uid %d)", account, cred.Uid)
	}

	dir, err := os.MkdirTemp(opts.TempDir, "fencelab-pg-*")
	if err != nil {
		return nil, fmt.Errorf("temp folder: %w", err)
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	sockDir := filepath.Join(dir, "sock")
	// The superuser logs in with a password (scram-sha-256), not on
	// trust: a worker program a reader wrote reaches this socket with a
	// role of its own, and on trust it could log in as anyone, this
	// superuser too. The password is in the DSN alone.
	password, err := randomPassword()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c := &Cluster{
		dir:    dir,
		logf:   logf,
		bin:    bin,
		opts:   opts,
		cred:   cred,
		exited: make(chan struct{}),
		dsn: fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=postgres sslmode=disable",
			dsnValue(sockDir), port, superuser, password),
	}
	fail := func(err error) (*Cluster, error) {
		if serr := c.Stop(); serr != nil {
			err = fmt.Errorf("%w (cleanup: %v)", err, serr)
		}
		return nil, err
	}

	if n := len(sockDir) + len("/.s.PGSQL.5432"); n > maxSocketPath {
		return fail(fmt.Errorf("socket path under %s is %d bytes, over the limit of %d: use a shorter TempDir", dir, n, maxSocketPath))
	}
	if err := os.Mkdir(sockDir, 0o700); err != nil {
		return fail(fmt.Errorf("socket folder: %w", err))
	}
	logFile, err := os.OpenFile(c.LogPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fail(fmt.Errorf("log file: %w", err))
	}
	defer logFile.Close()
	// initdb reads the superuser's password from a file, which is gone
	// again once it has run.
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return fail(fmt.Errorf("password file: %w", err))
	}
	if cred != nil {
		if err := validateReachable(dir, account, cred); err != nil {
			return fail(err)
		}
		if err := chownTree(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(fmt.Errorf("chown %s: %w", dir, err))
		}
	}

	err = initdb(ctx, bin, dir, pwfile, cred)
	if rerr := os.Remove(pwfile); err == nil && rerr != nil {
		err = fmt.Errorf("remove the password file: %w", rerr)
	}
	if err != nil {
		return fail(err)
	}

	if err := c.launch(ctx, logFile); err != nil {
		return fail(err)
	}
	logf("pgcluster: PostgreSQL %s ready in %v (pid %d)", bin.Version, time.Since(began).Round(time.Millisecond), c.Pid())
	return c, nil
}

// launch starts the postmaster on the cluster's folder, with a watchdog
// for it, and waits until it accepts connections.
func (c *Cluster) launch(ctx context.Context, logFile *os.File) error {
	// The watchdog cleans up after a parent that dies without Stop
	// (SIGKILL, a crash, os.Exit): it makes sure the postmaster is gone
	// too, SIGQUIT first (the parent-death signal, where there is one,
	// has already sent it), SIGKILL after watchdogGrace, and then removes
	// the cluster folder.
	wd, err := child.StartWatchdog(child.Config{Name: "fencelab-pg-watchdog", Signal: syscall.SIGQUIT, Grace: watchdogGrace, RemoveDir: c.dir})
	if err != nil {
		return err
	}
	c.wd = wd
	sockDir := filepath.Join(c.dir, "sock")
	cmd := exec.Command(c.bin.Postgres, postgresArgs(c.dir, sockDir, c.opts)...)
	if mem := c.opts.BackendMemory; mem >= 0 {
		if mem == 0 {
			mem = DefaultBackendMemory
		}
		// The shell lowers its own limit (no privilege needed), then becomes
		// postgres (exec: the same pid); every backend the postmaster forks
		// inherits the limit.
		cmd = exec.Command("/bin/sh", append([]string{"-c", `ulimit -d "$1" 2>/dev/null; shift; exec "$0" "$@"`,
			c.bin.Postgres, strconv.FormatInt(mem>>10, 10)}, postgresArgs(c.dir, sockDir, c.opts)...)...)
	}
	cmd.Dir = c.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	// Its own group, watched from its start; SIGQUIT, postgres's immediate
	// shutdown, if we die, which holds across the switch to c.cred.
	proc, err := child.Start(cmd, child.Options{ParentDeath: syscall.SIGQUIT, Watchdog: wd})
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}

	exited := make(chan struct{})
	c.cmd, c.exited = cmd, exited
	go func() {
		c.waitErr = proc.Wait()
		close(exited)
	}()
	timeout := c.opts.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	return c.waitReady(ctx, timeout)
}

// Restart stops the server with a fast shutdown (as pg_ctl restart -m
// fast does: every session is ended), keeps it down for down, and starts
// it again on the same folder and socket: a database outage, for the
// tests of what outlives one. Its connection string stays the same.
func (c *Cluster) Restart(ctx context.Context, down time.Duration) error {
	c.restart.Lock()
	defer c.restart.Unlock()
	if c.cmd == nil {
		return errors.New("pgcluster: restart: the cluster is not running")
	}
	// The old watchdog must not remove the folder the new server uses.
	if err := c.wd.Stop(); err != nil {
		return fmt.Errorf("pgcluster: restart: %w", err)
	}
	c.shutdown()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	logFile, err := os.OpenFile(c.LogPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgcluster: restart: log file: %w", err)
	}
	defer logFile.Close()
	if err := c.launch(ctx, logFile); err != nil {
		return fmt.Errorf("pgcluster: restart: %w", err)
	}
	c.logf("pgcluster: PostgreSQL restarted after %v down (pid %d)", down, c.Pid())
	return nil
}

// Stop shuts the server down and removes the cluster folder. It tries a
// fast shutdown (SIGINT) first, an immediate one (SIGQUIT) after 5s, and
// SIGKILL to the whole process group after another 5s, and always waits for
// the postmaster to exit. Stop is idempotent and safe to call concurrently;
// every call returns the result of the first.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	c.restart.Lock()
	defer c.restart.Unlock()
	if c.cmd != nil {
		c.shutdown()
	}
	var errs []error
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", c.dir, err))
	}
	// Only now release the watchdog: until the folder is gone it is our
	// insurance against being killed half way through.
	if c.wd != nil {
		if err := c.wd.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// shutdown stops the postmaster, escalating until it has exited.
func (c *Cluster) shutdown() {
	steps := []struct {
		sig  syscall.Signal
		name string
	}{
		{syscall.SIGINT, "fast shutdown (SIGINT)"},
		{syscall.SIGQUIT, "immediate shutdown (SIGQUIT)"},
	}
	for _, s := range steps {
		select {
		case <-c.exited:
			return
		default:
		}
		_ = c.cmd.Process.Signal(s.sig)
		t := time.NewTimer(shutdownGrace)
		select {
		case <-c.exited:
			t.Stop()
			return
		case <-t.C:
			c.logf("pgcluster: postgres (pid %d) still running %v after %s", c.Pid(), shutdownGrace, s.name)
		}
	}
	select {
	case <-c.exited:
		return
	default:
	}
	// The postmaster leads its own process group (Setpgid), so this also
	// reaches any backend it left behind.
	_ = syscall.Kill(-c.Pid(), syscall.SIGKILL)
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// waitReady polls until a connection succeeds, the postmaster exits, ctx
// ends or timeout passes.
func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		select {
		case <-c.exited:
			return fmt.Errorf("postgres exited during startup (%v); %s:\n%s", c.waitErr, c.LogPath(), tailFile(c.LogPath(), 20))
		default:
		}
		if lastErr = c.ping(ctx); lastErr == nil {
			return nil
		}
		select {
		case <-c.exited:
			// Reported at the top of the loop.
		case <-ctx.Done():
			return fmt.Errorf("postgres startup: %w", ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("postgres not ready after %v: %w; %s:\n%s", timeout, lastErr, c.LogPath(), tailFile(c.LogPath(), 20))
		case <-tick.C:
		}
	}
}

// ping opens and closes one connection.
func (c *Cluster) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.dsn)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// initdb creates the data folder <dir>/data.
func initdb(ctx context.Context, bin Binaries, dir, pwfile string, cred *syscall.Credential) error {
	cmd := exec.CommandContext(ctx, bin.Initdb,
		"-D", filepath.Join(dir, "data"),
		"-U", superuser,
		"-A", "scram-sha-256",
		"--pwfile", pwfile,
		"-E", "UTF8",
		"--no-locale",
		"--no-sync",
		"--no-instructions",
	)
	cmd.Dir = dir
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out
	// Its own process group (child.Start) keeps a terminal Ctrl-C away
	// (we clean up ourselves) and lets cancellation reach the postgres
	// processes initdb runs for bootstrapping.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := func() error {
		p, err := child.Start(cmd, child.Options{})
		if err != nil {
			return err
		}
		return p.Wait()
	}()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("initdb: %w", ctx.Err())
		}
		return fmt.Errorf("initdb: %w:\n%s", err, lastLines(out.String(), 20))
	}
	return nil
}

// postgresArgs returns the postgres command line: settings for a fast,
// throwaway, socket-only server, overridden by opts.Settings.
func postgresArgs(dir, sockDir string, opts Options) []string {
	maxConns := opts.MaxConnections
	if maxConns <= 0 {
		maxConns = DefaultMaxConnections
	}
	sharedBuffers := opts.SharedBuffers
	if sharedBuffers == "" {
		sharedBuffers = DefaultSharedBuffers
	}
	settings := map[string]string{
		"listen_addresses":        "",
		"port":                    strconv.Itoa(port),
		"unix_socket_permissions": "0777",
		"max_connections":         strconv.Itoa(maxConns),
		"shared_buffers":          sharedBuffers,
		// Durability is pointless for a database deleted on exit.
		"fsync":              "off",
		"synchronous_commit": "off",
		"full_page_writes":   "off",
		// JIT compilation only slows down the short queries tests run.
		"jit": "off",
		// Keep the log to what explains a failure.
		"log_min_messages": "warning",
		// Little WAL kept between checkpoints: nothing here is recovered,
		// and a burst of writes must not grow the folder for long.
		"max_wal_size": "96MB",
		"min_wal_size": "32MB",
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := []string{"-D", filepath.Join(dir, "data"), "-k", sockDir}
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}
	return args
}

// unprivilegedUser picks the account to run PostgreSQL as when we are root,
// which postgres refuses to run as: "postgres" if it exists, else "nobody".
func unprivilegedUser() (*syscall.Credential, string, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		// NoSetGroups: setgroups(2) is refused in some user namespaces
		// (rootless containers); postgres does not care about groups.
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, name, nil
	}
	return nil, "", errors.New("running as root, which postgres refuses, and found no user postgres or nobody to run it as")
}

// validateReachable verifies that account can walk down to dir, which initdb
// and postgres need; it turns a cryptic "permission denied" from initdb into
// advice.
func validateReachable(dir, account string, cred *syscall.Credential) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		m := fi.Mode().Perm()
		ok := m&0o001 != 0
		if st, isUnix := fi.Sys().(*syscall.Stat_t); isUnix && !ok {
			ok = (st.Uid == cred.Uid && m&0o100 != 0) || (st.Gid == cred.Gid && m&0o010 != 0)
		}
		if !ok {
			return fmt.Errorf("user %s cannot enter %s (mode %v), so PostgreSQL cannot use %s: choose a TempDir it can reach", account, p, m, dir)
		}
		if parent := filepath.Dir(p); parent == p {
			return nil
		}
	}
}

// chownTree gives dir and everything in it to uid:gid.
func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// randomPassword returns 256 random bits, hex-encoded: nothing in it
// needs quoting in a connection string.
func randomPassword() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("the superuser's password: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// dsnValue quotes a keyword/value connection string value when needed.
func dsnValue(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\\") {
		return s
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// tailFile returns the last n lines of the file at path, for error messages.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	return lastLines(string(b), n)
}

// lastLines returns the last n lines of s (ignoring trailing newlines), indented so
// they stand out in a wrapped error.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "\t" + strings.Join(lines, "\n\t")
}
