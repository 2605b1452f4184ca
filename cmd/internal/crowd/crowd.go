// Package crowd plays a crowd of simulated blog readers against one
// fencelab server, over its real HTTP API and WebSocket, and reports how
// the server held up. It is what `fencelab crowd` runs.
//
// Each reader does what a reader of the page does: creates a session,
// opens its WebSocket, presses Run (the article's run, played
// automatically) and waits for the verdict. A reader is ok when a verdict
// came and it is a correct build's (safe); busy when the server, at one
// of its caps, answered busy (the page then replays a recording); in error
// otherwise. The report gives the counts, the time from Run to the verdict
// of the readers that were ok, and the server's peaks polled from its
// /api/stats every 250ms.
//
// By default the crowd starts its own `fencelab serve` on 127.0.0.1 with a
// free port, from Config.Executable, and stops it at the end; with
// Config.URL it plays against a server already running, on this machine
// unless Config.AllowRemote. RunSeries plays several crowds one after
// another against the one server, settling between them. A crowd of 30
// readers against a server already running on this machine, arriving over
// 5 seconds, each playing the article's zombie-first run with a 300ms
// lease:
//
//	rep, err := crowd.Run(ctx, crowd.Config{
//		Readers: 30,
//		Ramp:    5 * time.Second,
//		Lease:   300 * time.Millisecond,
//		Server:  crowd.Server{URL: "http://127.0.0.1:8080"},
//	})
//	if rep != nil {
//		fmt.Print(rep.Table())
//	}
//
// TestRun_OwnServer plays one against a server of its own.
//
// RunClass plays a classroom instead (`fencelab crowd --class N`): a
// teacher opens a class, N students join it, each with a session and a
// socket of their own, and once all have joined they press Check at once,
// every third on a wrong solution. Its ClassReport gives the time from
// Check to each report, whether each student got exactly one report and
// whether it says what their solution is (ok, wrong verdicts, duplicates,
// missing, busy, errors), and the board's lag: from a report to the
// teacher's board showing it, polled every 250ms. A class of 30 against
// a server of its own (the binary at exe):
//
//	rep, err := crowd.RunClass(ctx, crowd.ClassConfig{Students: 30, Server: crowd.Server{Executable: exe}})
//	if rep != nil {
//		fmt.Print(rep.Table())
//	}
//
// TestRunClass_FourStudents plays a class of four.
//
// This is not the page's "load lab" (server/lab/experiments, server/run/runner), which
// freezes workers at scale: a crowd measures the server, not the queue.
package crowd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/control"
)

// Bounds and defaults of a Config and of a series.
const (
	MaxReaders = 1000
	// MaxLoads and MaxSeriesReaders bound a series: crowds, and readers
	// in all.
	MaxLoads         = 10
	MaxSeriesReaders = 5000
	MaxSettle        = 2 * time.Minute
	MaxTimeout       = 10 * time.Minute
	MaxRamp          = 10 * time.Minute

	DefaultReaders  = 12
	DefaultOrdering = experiments.ZombieFirst
	DefaultLease    = time.Second
	DefaultTimeout  = 2 * time.Minute
	// DefaultPace and DefaultSettle are the command's defaults; in a
	// Config, zero means zero.
	DefaultPace   = 900 * time.Millisecond
	DefaultSettle = 5 * time.Second
)

const (
	// settleRunsMax bounds the wait, between two loads, for the last runs
	// to end; the series goes on after it, with a warning.
	settleRunsMax = time.Minute
	// seriesSlack is what a load may take beyond its own deadline: the
	// readers' goodbyes (each DELETE is bounded at 10s) and the last
	// stats sample (3s).
	seriesSlack = 15 * time.Second
	// loadGrace is what the overall deadline allows beyond the ramp and
	// the timeout: the last reader's session, socket and goodbye.
	loadGrace = 30 * time.Second
	// serveStartTimeout bounds the child server's start, a private
	// cluster's initdb included.
	serveStartTimeout = 90 * time.Second
	// serveStopTimeout is how long the child has to stop after SIGTERM
	// (it promises 10s) before its process group is killed.
	serveStopTimeout = 15 * time.Second
	statsEvery       = 250 * time.Millisecond
)

// ErrInterrupted is what Run and RunSeries return, with the report so
// far, when their context is cancelled (Ctrl-C).
var ErrInterrupted = errors.New("interrupted")

// Config is one crowd: the server it plays against, and what each reader
// does. Validate fills its defaults and refuses what is out of bounds; Run
// and RunSeries call it. Its errors are fault.Invalid, one sentence each,
// naming the field as the command's flag (--readers), since that is what
// a person typed.
type Config struct {
	// Readers is how many readers the crowd has, 1 to MaxReaders
	// (default DefaultReaders). RunSeries sets it for each of its loads.
	Readers int
	// Ramp spreads the readers' arrivals evenly over this long; 0: all
	// at once.
	Ramp time.Duration
	// Timeout is how long one reader waits, from its arrival to the
	// verdict (default DefaultTimeout, at most MaxTimeout).
	Timeout time.Duration
	// Ordering, Lease and Pace are the run each reader starts: a scripted
	// ordering (default zombie-first), its lease (default 1s) and the
	// pace between its auto-played steps (zero: none).
	Ordering experiments.Ordering
	Lease    time.Duration
	Pace     time.Duration
	// Settle is, in a series, how long to wait once no run is in flight
	// between two loads, for the server's spare schemas (zero: none).
	Settle time.Duration

	// Server is the server played against, or the one started.
	Server
}

// Server says which server a crowd or a class plays against: one already
// running (URL), or a fencelab serve of its own.
type Server struct {
	// URL is a running server to play against, scheme://host[:port];
	// empty: start one's own fencelab serve.
	URL string
	// AllowRemote lets URL name another machine. A crowd must not land on
	// someone else's site by a slip of the keyboard.
	AllowRemote bool
	// Executable is the fencelab binary that starts the server when URL
	// is empty (the command passes its own); ServeFlags are flags for that
	// serve, e.g. --max-runs=60, and Env is added to this process's
	// environment for it.
	Executable string
	ServeFlags []string
	Env        []string

	// Log gets the progress, a line at a time, and the started server's
	// stderr once it is ready; nil discards it.
	Log *log.Logger
}

// validate fills Log and checks which server is meant.
func (c *Server) validate() error {
	if c.Log == nil {
		c.Log = log.New(io.Discard, "", 0)
	}
	switch {
	case c.URL != "" && len(c.ServeFlags) > 0:
		return invalidf("--serve-flag is for the server this command starts; with --url there is none")
	case c.URL == "" && c.Executable == "":
		return invalidf("no --url, and no fencelab binary to start a server from")
	}
	for _, f := range c.ServeFlags {
		if !strings.HasPrefix(f, "-") {
			return invalidf("--serve-flag %q is not a flag: write it as --serve-flag=--max-runs=120", f)
		}
	}
	if c.URL != "" {
		if _, err := target(c.URL, c.AllowRemote); err != nil {
			return invalidf("--url %s %v", c.URL, err)
		}
	}
	return nil
}

// invalidf is a Config that Validate refuses.
func invalidf(format string, a ...any) error { return fault.Errorf(fault.Invalid, format, a...) }

// Validate fills the zero fields that have a default and checks every
// bound. The command calls it before anything starts, so bad input costs
// no server.
func (c *Config) Validate() error {
	if c.Readers == 0 {
		c.Readers = DefaultReaders
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Ordering == "" {
		c.Ordering = DefaultOrdering
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if err := c.Server.validate(); err != nil {
		return err
	}
	maxPace := control.DefaultLimits().MaxPace
	switch {
	case c.Readers < 1 || c.Readers > MaxReaders:
		return invalidf("--readers %d must be between 1 and %d", c.Readers, MaxReaders)
	case c.Settle < 0 || c.Settle > MaxSettle:
		return invalidf("--settle %v must be between 0 and %v", c.Settle, MaxSettle)
	case c.Ramp < 0 || c.Ramp > MaxRamp:
		return invalidf("--ramp %v must be between 0 and %v", c.Ramp, MaxRamp)
	case c.Timeout < 0 || c.Timeout > MaxTimeout:
		return invalidf("--timeout %v must be above 0 and at most %v", c.Timeout, MaxTimeout)
	case !experiments.RunLease.Holds(c.Lease):
		return invalidf("%v", experiments.RunLease.Validate("--lease", c.Lease))
	case c.Pace < 0 || c.Pace > maxPace:
		return invalidf("--pace %v must be between 0 and %v", c.Pace, maxPace)
	}
	if o, err := experiments.ParseOrdering(string(c.Ordering)); err != nil || o == experiments.FreePlay {
		return invalidf("--ordering %q must be one of new-owner-first, zombie-first, owner-done-first, crash-before-commit or clock-skew", c.Ordering)
	}
	return nil
}

// command is the run command each reader's Run button sends.
func (c *Config) command() control.Command {
	pace := c.Pace.Milliseconds()
	return control.Command{Action: control.Run, Ordering: c.Ordering, Mode: protocol.ModeAuto, LeaseMS: c.Lease.Milliseconds(), PaceMS: &pace}
}

// Run plays one crowd of cfg.Readers readers and reports how the server
// held up. The report is nil only when the crowd could not start (a bad
// Config, a server that would not start or answer); with a report, the
// error is ErrInterrupted, or says how the server it started did not stop
// cleanly. A server it starts is stopped and reaped before Run returns.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base, child, err := cfg.open(ctx)
	if err != nil {
		return nil, err
	}
	defer child.stop() // nil: no server of its own to stop
	l := newLoader(base, cfg.command(), cfg.Readers, cfg.Ramp, cfg.Timeout)
	cfg.Log.Printf("%d reader%s against %s, each pressing Run (%s) and waiting up to %v for the verdict",
		cfg.Readers, plural(cfg.Readers), base, cfg.Ordering, cfg.Timeout)
	rep := l.run(ctx)
	rep.ServerPID, rep.ServerExit = stopServer(child)
	return rep, endErr(ctx, rep.ServerExit)
}

// open finds the server played against (validated already): URL's, once
// it answers /readyz, or a fencelab serve of its own (child), which the
// caller must stop.
func (cfg *Server) open(ctx context.Context) (*url.URL, *serveChild, error) {
	if cfg.URL != "" {
		base, _ := target(cfg.URL, cfg.AllowRemote) // checked by Validate
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := checkReady(rctx, base)
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("crowd: %s: %w", base, err)
		}
		return base, nil, nil
	}
	c, err := startServe(ctx, cfg.Executable, cfg.Env, cfg.ServeFlags, cfg.Log)
	if err != nil {
		return nil, nil, err
	}
	// Every way out of Run passes the caller's stop: the child is stopped
	// and reaped before it returns, Ctrl-C and panics included. (If this
	// process is killed outright, the parent-death signal or the watchdog
	// stops it: see startServe.)
	cfg.Log.Printf("started fencelab serve (pid %d) at %s", c.pid, c.url)
	return c.url, c, nil
}

// ParseReaders reads the command's --readers: one number of readers, or
// a comma-separated list of them for RunSeries, each 1 to MaxReaders, at
// most MaxLoads of them and MaxSeriesReaders in all. Its error is the
// flag's one line, fault.Invalid.
func ParseReaders(s string) ([]int, error) {
	parts := strings.Split(s, ",")
	if len(parts) == 1 {
		n, err := parseCount(s)
		switch {
		case errors.Is(err, strconv.ErrSyntax):
			return nil, invalidf("--readers %q is not a number of readers, nor a list of them such as 1,12,30", s)
		case err != nil:
			return nil, invalidf("--readers %s must be between 1 and %d", strings.TrimSpace(s), MaxReaders)
		}
		return []int{n}, nil
	}
	counts := make([]int, 0, len(parts))
	for i, p := range parts {
		n, err := parseCount(p)
		switch {
		case strings.TrimSpace(p) == "":
			return nil, invalidf("--readers %q: entry %d is empty; want numbers such as 1,12,30", s, i+1)
		case errors.Is(err, strconv.ErrSyntax):
			return nil, invalidf("--readers %q: %q is not a number of readers", s, strings.TrimSpace(p))
		case err != nil:
			return nil, invalidf("--readers %q: each load must be between 1 and %d readers, not %s", s, MaxReaders, strings.TrimSpace(p))
		}
		counts = append(counts, n)
	}
	if err := validateSeries(counts); err != nil {
		return nil, invalidf("--readers %q %v", s, err)
	}
	return counts, nil
}

// parseCount reads one number of readers: strconv.ErrSyntax when it is not
// a number, strconv.ErrRange when it is not 1 to MaxReaders.
func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, strconv.ErrRange
	case err != nil:
		return 0, strconv.ErrSyntax
	case n < 1 || n > MaxReaders:
		return 0, strconv.ErrRange
	}
	return n, nil
}

// validateSeries checks a series' size: at least one load, at most MaxLoads,
// and at most MaxSeriesReaders readers in all.
func validateSeries(readers []int) error {
	total := 0
	for _, n := range readers {
		total += n
	}
	switch {
	case len(readers) == 0:
		return invalidf("a series needs one load at least")
	case len(readers) > MaxLoads:
		return invalidf("is %d loads: at most %d", len(readers), MaxLoads)
	case total > MaxSeriesReaders:
		return invalidf("is %d readers in all: at most %d", total, MaxSeriesReaders)
	}
	return nil
}

// target checks a URL: an http(s) origin with no path, on this machine
// unless allowRemote.
func target(s string, allowRemote bool) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("is not an http(s) URL such as http://127.0.0.1:8080")
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, errors.New("names a server, not a page: want scheme://host[:port]")
	}
	if !allowRemote {
		host := u.Hostname()
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, fmt.Errorf("is not this machine (%s): loading another machine's server needs --allow-remote", host)
		}
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
