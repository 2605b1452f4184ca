package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/engine/lab"
	"github.com/fencelab/fencelab/server/control"
	"github.com/fencelab/fencelab/server/fault"
)

const loadSummary = `Simulated blog readers against the playground server, over its real HTTP
API and WebSocket. Each reader does what a reader of the page does: creates
a session, opens its WebSocket, presses Run (the article's run, played
automatically) and waits for the verdict. Then it prints how the server
held up: readers ok (a verdict came, and it is a correct build's: safe),
busy (the server at one of its caps answered busy, as it tells the page
to replay a recording instead) or in error (each message, with a count);
the time from Run to the verdict (p50, p95, max, of the readers that were
ok); and the server's peak memory and Postgres connections, polled from
its /api/stats every 250ms.

By default it starts its own fencelab serve on 127.0.0.1 with a free port
(pass flags to it with --serve-flag, e.g. --serve-flag=--max-runs=60),
and stops it at the end; with --url it loads a server already running, on
this machine unless --allow-remote. Exits 0 when the load ran, whatever
the counts.

--readers may be a list, e.g. --readers 1,12,30,60,100: the loads run one
after another against the one server, in that order. Between two loads it
settles: it waits until /api/stats counts no run in flight, then --settle
more, so the server makes its spare schemas again while quiet. Then it
prints one table, a row per load, with each load's p50 as a ratio to the
first load's: the first is the baseline.`

// Bounds of the load flags.
const (
	maxLoadReaders = 1000
	// maxLoadSeries and maxSeriesReaders bound a --readers list: loads,
	// and readers in all.
	maxLoadSeries    = 10
	maxSeriesReaders = 5000
	maxLoadSettle    = 2 * time.Minute
	// settleRunsMax bounds the wait, between two loads, for the last runs
	// to end; the series goes on after it, with a warning.
	settleRunsMax = time.Minute
	// seriesSlack is what a load may take beyond its own deadline: the
	// readers' goodbyes (each DELETE is bounded at 10s) and the last
	// stats sample (3s).
	seriesSlack    = 15 * time.Second
	maxLoadTimeout = 10 * time.Minute
	maxLoadRamp    = 10 * time.Minute
	// loadGrace is what the overall deadline allows beyond --ramp and
	// --timeout: the last reader's session, socket and goodbye.
	loadGrace = 30 * time.Second
	// serveStartTimeout bounds the child server's start, a private
	// cluster's initdb included.
	serveStartTimeout = 90 * time.Second
	// serveStopTimeout is how long the child has to stop after SIGTERM
	// (it promises 10s) before its process group is killed.
	serveStopTimeout = 15 * time.Second
	statsEvery       = 250 * time.Millisecond
)

// stringsFlag is a repeatable flag that keeps each value whole: a flag
// passed on to the server may itself hold a comma.
type stringsFlag []string

func (l *stringsFlag) String() string     { return strings.Join(*l, " ") }
func (l *stringsFlag) Set(s string) error { *l = append(*l, s); return nil }

// runCommand is the run command a reader's Run button sends.
type runCommand struct {
	Action   string `json:"action"`
	Ordering string `json:"ordering"`
	Mode     string `json:"mode"`
	LeaseMS  int64  `json:"lease_ms"`
	PaceMS   int64  `json:"pace_ms"`
}

func loadCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("load", loadSummary, stderr)
	readersList := fs.String("readers", "12", fmt.Sprintf("simulated readers, 1 to %d; or a list of loads run one after another against one server, e.g. 1,12,30,60,100 (at most %d loads, %d readers in all)", maxLoadReaders, maxLoadSeries, maxSeriesReaders))
	settle := fs.Duration("settle", 5*time.Second, fmt.Sprintf("between two loads of a --readers list: once no run is in flight, wait this much more for the server's spare schemas (0 to %v)", maxLoadSettle))
	ramp := fs.Duration("ramp", 0, "spread the readers' arrivals evenly over this long; 0: all at once")
	ordering := fs.String("ordering", string(lab.ZombieFirst), "the run each reader starts: new-owner-first, zombie-first, owner-done-first, crash-before-commit or clock-skew")
	lease := fs.Duration("lease", time.Second, "the run's lease")
	pace := fs.Duration("pace", 900*time.Millisecond, "the run's pace between auto-played steps")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long one reader waits, from its arrival to the verdict (at most 10m)")
	target := fs.String("url", "", "a running server to load, e.g. http://127.0.0.1:8080; default: start one's own fencelab serve")
	allowRemote := fs.Bool("allow-remote", false, "let --url point at another machine")
	var serveFlags stringsFlag
	fs.Var(&serveFlags, "serve-flag", "a flag for the fencelab serve this command starts, e.g. --serve-flag=--max-runs=120 (repeatable)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	if err := parse(fs, args); err != nil {
		return err
	}
	bad := func(format string, a ...any) error { return usagef("fencelab load: "+format, a...) }
	counts, err := parseReaders(*readersList)
	if err != nil {
		return bad("%v", err)
	}
	switch {
	case *settle < 0 || *settle > maxLoadSettle:
		return bad("--settle %v must be between 0 and %v", *settle, maxLoadSettle)
	case *ramp < 0 || *ramp > maxLoadRamp:
		return bad("--ramp %v must be between 0 and %v", *ramp, maxLoadRamp)
	case *timeout <= 0 || *timeout > maxLoadTimeout:
		return bad("--timeout %v must be above 0 and at most %v", *timeout, maxLoadTimeout)
	case *lease < lab.MinRunLease || *lease > lab.MaxRunLease:
		return bad("--lease %v must be between %v and %v", *lease, lab.MinRunLease, lab.MaxRunLease)
	case *pace < 0 || *pace > control.DefaultLimits().MaxPace:
		return bad("--pace %v must be between 0 and %v", *pace, control.DefaultLimits().MaxPace)
	case *target != "" && len(serveFlags) > 0:
		return bad("--serve-flag is for the server this command starts; with --url there is none")
	}
	if o, err := lab.ParseOrdering(*ordering); err != nil || o == lab.FreePlay {
		return bad("--ordering %q must be one of new-owner-first, zombie-first, owner-done-first, crash-before-commit or clock-skew", *ordering)
	}
	for _, f := range serveFlags {
		if !strings.HasPrefix(f, "-") {
			return bad("--serve-flag %q is not a flag: write it as --serve-flag=--max-runs=120", f)
		}
	}
	var base *url.URL
	if *target != "" {
		u, err := loadTarget(*target, *allowRemote)
		if err != nil {
			return bad("--url %s %v", *target, err)
		}
		base = u
	}
	cmd := runCommand{Action: "run", Ordering: *ordering, Mode: string(lab.ModeAuto), LeaseMS: lease.Milliseconds(), PaceMS: pace.Milliseconds()}

	var child *serveChild
	if base != nil {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := checkReady(rctx, base)
		cancel()
		if err != nil {
			return fmt.Errorf("load: %s: %w", base, err)
		}
	} else {
		c, err := startServe(ctx, serveFlags, stderr)
		if err != nil {
			return err
		}
		// Every way out of here passes this: the child is stopped and
		// reaped before this command returns, Ctrl-C and panics included.
		// (If this process is killed outright, the parent-death signal or
		// the watchdog stops it: see startServe.)
		defer c.stop()
		child = c
		base = c.url
		fmt.Fprintf(stderr, "fencelab load: started fencelab serve (pid %d) at %s\n", c.pid, c.url)
	}
	if len(counts) > 1 {
		return loadSeriesCmd(ctx, base, child, cmd, counts, *ramp, *timeout, *settle, *asJSON, stdout, stderr)
	}
	readers := counts[0]
	l := newLoader(base, cmd, readers, *ramp, *timeout)
	fmt.Fprintf(stderr, "fencelab load: %d reader%s against %s, each pressing Run (%s) and waiting up to %v for the verdict\n",
		readers, plural(readers), base, *ordering, *timeout)
	rep := l.run(ctx)
	if child != nil {
		rep.ServerPID = child.pid
		if err := child.stop(); err != nil {
			rep.ServerExit = err.Error()
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprint(stdout, rep.table())
	}
	switch {
	case ctx.Err() != nil:
		return errors.New("interrupted")
	case rep.ServerExit != "":
		return fmt.Errorf("the server it started %s", rep.ServerExit)
	}
	return nil
}

// parseReaders reads --readers: one number, or a comma-separated list of
// them, each 1 to maxLoadReaders, at most maxLoadSeries of them and
// maxSeriesReaders in all. Its error is the flag's one line.
func parseReaders(s string) ([]int, error) {
	parts := strings.Split(s, ",")
	if len(parts) == 1 {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("--readers %q is not a number of readers, nor a list of them such as 1,12,30", s)
		}
		if n < 1 || n > maxLoadReaders {
			return nil, fmt.Errorf("--readers %d must be between 1 and %d", n, maxLoadReaders)
		}
		return []int{n}, nil
	}
	if len(parts) > maxLoadSeries {
		return nil, fmt.Errorf("--readers %q is %d loads: at most %d", s, len(parts), maxLoadSeries)
	}
	counts := make([]int, 0, len(parts))
	total := 0
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("--readers %q: entry %d is empty; want numbers such as 1,12,30", s, i+1)
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("--readers %q: %q is not a number of readers", s, p)
		}
		if n < 1 || n > maxLoadReaders {
			return nil, fmt.Errorf("--readers %q: each load must be between 1 and %d readers, not %d", s, maxLoadReaders, n)
		}
		counts = append(counts, n)
		total += n
	}
	if total > maxSeriesReaders {
		return nil, fmt.Errorf("--readers %q is %d readers in all: at most %d", s, total, maxSeriesReaders)
	}
	return counts, nil
}

// loadSeries is what `fencelab load --readers A,B,...` prints with --json:
// every load's report, in the order they ran, against the one server.
type loadSeries struct {
	Loads []*loadReport `json:"loads"`
	// BaselineP50MS is the first load's p50, which each load's p50_ratio
	// is against; null when no reader of the first load was ok.
	BaselineP50MS *int64 `json:"baseline_p50_ms"`
	SettleMS      int64  `json:"settle_ms"`
	// NotRun are the loads of the list that never ran (their readers),
	// and Stopped says why the series stopped before them.
	NotRun      []int  `json:"not_run,omitempty"`
	Stopped     string `json:"stopped,omitempty"`
	ElapsedMS   int64  `json:"elapsed_ms"`
	Interrupted bool   `json:"interrupted,omitempty"`
	// ServerExit says how the server this command started did not stop
	// cleanly; empty when it did.
	ServerExit string `json:"server_exit,omitempty"`
}

// loadSeriesCmd runs one load per entry of counts, one after another,
// against the one server at base (child, when this command started it),
// settling between them, and prints the series.
//
// The overall deadline covers the whole series: each load keeps its own
// (--ramp + --timeout + 30s, from its own start, as a single load has),
// and the series' allows every load that and its goodbyes, and every
// settle its bounds.
func loadSeriesCmd(ctx context.Context, base *url.URL, child *serveChild, cmd runCommand, counts []int, ramp, timeout, settle time.Duration,
	asJSON bool, stdout, stderr io.Writer) error {
	began := time.Now()
	n := time.Duration(len(counts))
	budget := n*(ramp+timeout+loadGrace+seriesSlack) + (n-1)*(settleRunsMax+settle)
	sctx, cancel := context.WithTimeoutCause(ctx, budget, errSeriesDeadline)
	defer cancel()

	ser := &loadSeries{Loads: []*loadReport{}, SettleMS: settle.Milliseconds()}
	var prev *loader
	for i, readers := range counts {
		if i > 0 {
			why := prev.seriesStop(ctx, sctx, child)
			if why == "" {
				prev.settle(sctx, child, settle, stderr)
				why = prev.seriesStop(ctx, sctx, child)
			}
			if why != "" {
				ser.Stopped, ser.NotRun = why, counts[i:]
				fmt.Fprintf(stderr, "fencelab load: the series stops after load %d of %d: %s\n", i, len(counts), why)
				break
			}
		}
		l := newLoader(base, cmd, readers, ramp, timeout)
		fmt.Fprintf(stderr, "fencelab load: load %d of %d: %d reader%s against %s, each pressing Run (%s) and waiting up to %v for the verdict\n",
			i+1, len(counts), readers, plural(readers), base, cmd.Ordering, timeout)
		rep := l.run(sctx)
		if child != nil {
			rep.ServerPID = child.pid
		}
		ser.Loads = append(ser.Loads, rep)
		fmt.Fprintf(stderr, "fencelab load: load %d of %d: %s\n", i+1, len(counts), rep.brief())
		prev = l
	}
	if first := ser.Loads[0]; first.OK > 0 && first.RunToVerdictMS.P50 > 0 {
		p50 := first.RunToVerdictMS.P50
		ser.BaselineP50MS = &p50
		for _, r := range ser.Loads {
			if r.OK > 0 {
				ratio := math.Round(float64(r.RunToVerdictMS.P50)/float64(p50)*1000) / 1000
				r.P50Ratio = &ratio
			}
		}
	}
	if child != nil {
		if err := child.stop(); err != nil {
			ser.ServerExit = err.Error()
		}
	}
	ser.Interrupted = ctx.Err() != nil
	ser.ElapsedMS = time.Since(began).Milliseconds()
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(ser); err != nil {
			return err
		}
	} else {
		fmt.Fprint(stdout, ser.table())
	}
	switch {
	case ctx.Err() != nil:
		return errors.New("interrupted")
	case ser.ServerExit != "":
		return fmt.Errorf("the server it started %s", ser.ServerExit)
	case ser.Stopped != "":
		return fmt.Errorf("load: the series stopped after load %d of %d: %s", len(ser.Loads), len(counts), ser.Stopped)
	}
	return nil
}

// seriesStop says why the series must not go on to its next load, or ""
// when it may: Ctrl-C, the series' deadline, the server gone.
func (l *loader) seriesStop(ctx, sctx context.Context, child *serveChild) string {
	switch {
	case ctx.Err() != nil:
		return "interrupted"
	case sctx.Err() != nil:
		return "the series' overall deadline passed"
	}
	if child != nil {
		select {
		case <-child.done:
			return fmt.Sprintf("the server it started exited (%v)", child.waitErr)
		default:
		}
	}
	rctx, cancel := context.WithTimeout(sctx, 5*time.Second)
	defer cancel()
	if err := checkReady(rctx, l.base); err != nil {
		return fmt.Sprintf("%s: %v", l.base, err)
	}
	return ""
}

// settle waits, between two loads, until the server counts no run in
// flight (for at most settleRunsMax), then extra more. A server makes
// its spare schemas again only once no run has started for a second, one
// pair at a time; the next load should find them made, as the first did,
// or it measures the schemas' making instead of the server.
func (l *loader) settle(ctx context.Context, child *serveChild, extra time.Duration, stderr io.Writer) {
	var exited <-chan struct{}
	if child != nil {
		exited = child.done
	}
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-exited:
			return false
		case <-time.After(d):
			return true
		}
	}
	began := time.Now()
	for {
		s, err := l.stats(ctx)
		if errors.Is(err, errNoStats) {
			fmt.Fprintf(stderr, "fencelab load: settle: %v to tell when its runs have ended; waiting --settle %v\n", err, extra)
			break
		}
		if err == nil && s.Runs == 0 {
			fmt.Fprintf(stderr, "fencelab load: settle: no run in flight after %.1fs; waiting %v more for the spare schemas\n", time.Since(began).Seconds(), extra)
			break
		}
		if time.Since(began) >= settleRunsMax {
			still := "/api/stats does not answer"
			if err == nil {
				still = fmt.Sprintf("%d run%s still in flight", s.Runs, plural(s.Runs))
			}
			fmt.Fprintf(stderr, "fencelab load: settle: %s after %v; going on, %v later\n", still, settleRunsMax, extra)
			break
		}
		if !wait(statsEvery) {
			return
		}
	}
	wait(extra)
}

// brief is one load's counts in a line, for the progress of a series.
func (r *loadReport) brief() string {
	s := fmt.Sprintf("ok %d, busy %d, errors %d", r.OK, r.Busy, r.Errors)
	if r.OK > 0 {
		s += fmt.Sprintf("; Run to verdict p50 %s, p95 %s, max %s", secs(r.RunToVerdictMS.P50), secs(r.RunToVerdictMS.P95), secs(r.RunToVerdictMS.Max))
	}
	return s + fmt.Sprintf("; took %.1fs", float64(r.ElapsedMS)/1000)
}

func secs(ms int64) string { return fmt.Sprintf("%.2fs", float64(ms)/1000) }

// table renders the series for a terminal: what ran, then a row per load.
func (s *loadSeries) table() string {
	var b strings.Builder
	first := s.Loads[0]
	var cmd runCommand
	_ = json.Unmarshal(first.Command, &cmd)
	arrive := "all at once"
	if first.RampMS > 0 {
		arrive = "arriving over " + (time.Duration(first.RampMS) * time.Millisecond).String()
	}
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	server := first.URL
	if first.ServerPID > 0 {
		server += fmt.Sprintf(" (fencelab serve, pid %d, started by this command)", first.ServerPID)
	}
	fmt.Fprintf(tw, "server\t%s\n", server)
	fmt.Fprintf(tw, "loads\t%d of %d, one after another; between two, no run in flight and %v more\n",
		len(s.Loads), len(s.Loads)+len(s.NotRun), time.Duration(s.SettleMS)*time.Millisecond)
	fmt.Fprintf(tw, "each reader\tpresses Run (%s, lease %v, pace %v), %s, and waits up to %v for the verdict\n",
		cmd.Ordering, time.Duration(cmd.LeaseMS)*time.Millisecond, time.Duration(cmd.PaceMS)*time.Millisecond, arrive,
		time.Duration(first.TimeoutMS)*time.Millisecond)
	baseline := fmt.Sprintf("×%d reader%s", first.Readers, plural(first.Readers))
	if s.BaselineP50MS != nil {
		fmt.Fprintf(tw, "baseline\tthe first load (%d reader%s), p50 %s: the column p50 %s is each load's p50 divided by it\n",
			first.Readers, plural(first.Readers), secs(*s.BaselineP50MS), baseline)
	} else {
		fmt.Fprintf(tw, "baseline\tnone: no reader of the first load was ok, so no ratio\n")
	}
	tw.Flush()
	b.WriteString("\n")

	tw = tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "readers\tok\tbusy\terrors\tp50\tp95\tmax\tp50 %s\tpeak RSS\tpeak Postgres connections\n", baseline)
	for _, r := range s.Loads {
		p50, p95, top, ratio := "-", "-", "-", "-"
		if r.OK > 0 {
			p50, p95, top = secs(r.RunToVerdictMS.P50), secs(r.RunToVerdictMS.P95), secs(r.RunToVerdictMS.Max)
		}
		if r.P50Ratio != nil {
			ratio = fmt.Sprintf("%.2f", *r.P50Ratio)
		}
		rss, db := "-", "-"
		if r.PeakRSSBytes != nil {
			rss = mib(*r.PeakRSSBytes)
		}
		if r.PeakDBConnections != nil {
			db = fmt.Sprint(*r.PeakDBConnections)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Readers, r.OK, r.Busy, r.Errors, p50, p95, top, ratio, rss, db)
	}
	tw.Flush()

	tw = tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	var notes bool
	note := func(format string, a ...any) {
		if !notes {
			b.WriteString("\n")
			notes = true
		}
		fmt.Fprintf(tw, format, a...)
	}
	for _, r := range s.Loads {
		for _, e := range r.ErrorMessages {
			note("errors, %d readers\t%d× %s\n", r.Readers, e.Count, e.Message)
		}
		if r.Reconnects > 0 {
			note("reconnects, %d readers\t%d\n", r.Readers, r.Reconnects)
		}
	}
	if s.Stopped != "" {
		note("not run\t%s: %s\n", joinInts(s.NotRun), s.Stopped)
	}
	if s.Interrupted {
		note("\tinterrupted: these are the loads so far\n")
	}
	if s.ServerExit != "" {
		note("server exit\tthe server %s\n", s.ServerExit)
	}
	note("took\t%.1fs in all\n", float64(s.ElapsedMS)/1000)
	tw.Flush()
	return b.String()
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// loadTarget checks --url: an http(s) origin with no path, on this machine
// unless allowRemote. A load test must not land on someone else's site by
// a slip of the keyboard.
func loadTarget(s string, allowRemote bool) (*url.URL, error) {
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

// ---- the child server ------------------------------------------------------------

// serveChild is the `fencelab serve` this command started. It leads a
// process group of its own, so a terminal's Ctrl-C reaches this command
// only, and stop shuts the server down in order after the readers: its
// runs, workers, schemas and private cluster go with it.
type serveChild struct {
	pid  int
	url  *url.URL
	done chan struct{} // closed once it is reaped
	wd   *serveWatchdog

	once    sync.Once
	stopErr error
	waitErr error // set before done is closed
	stopped bool  // it was asked to stop (not dead on its own)
}

// startServe starts `fencelab serve --addr 127.0.0.1:0` from this very
// binary, with the extra flags, and waits until it answers /readyz.
//
// The child must never outlive this process. Every return path of
// loadCmd stops it; and if this process dies without returning (SIGKILL),
// Linux sends the child SIGTERM by its parent-death signal (which the
// kernel ties to the forking thread: hence the locked thread that starts
// it and stays until it is reaped, as server/supervisor does), and
// elsewhere a watchdog does (serveWatchdog, as the supervisor's does for
// its workers on macOS). SIGTERM, not SIGKILL: the server then stops its
// runs, workers and cluster itself.
func startServe(ctx context.Context, extra []string, stderr io.Writer) (*serveChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("load: find own executable: %w", err)
	}
	// Errors only, unless a --serve-flag says otherwise (the last flag
	// wins): at its caps the server logs a warning per busy answer.
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--log-level", "error"}, extra...)
	cmd := exec.Command(exe, args...)
	cmd.Env = os.Environ()
	attr := &syscall.SysProcAttr{Setpgid: true}
	var wd *serveWatchdog
	if !setPdeathsig(attr, syscall.SIGTERM) {
		if wd, err = newServeWatchdog(); err != nil {
			return nil, err
		}
	}
	cmd.SysProcAttr = attr
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW

	c := &serveChild{done: make(chan struct{}), wd: wd}
	startErr := make(chan error, 1)
	go func() {
		// Locked and never unlocked: the thread ends with this goroutine,
		// after the child has been reaped, and not a moment before.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			startErr <- err
			return
		}
		startErr <- nil
		c.waitErr = cmd.Wait()
		close(c.done)
	}()
	err = <-startErr
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if wd != nil {
			wd.release()
		}
		return nil, fmt.Errorf("load: start fencelab serve: %w", err)
	}
	c.pid = cmd.Process.Pid
	if wd != nil {
		if err := wd.watch(c.pid); err != nil {
			_ = syscall.Kill(-c.pid, syscall.SIGKILL) // unwatched, it could outlive us
			<-c.done
			wd.release()
			return nil, err
		}
	}

	// Its stdout says where it listens; its stderr is kept until it is
	// ready (to explain a failed start), then passed on line by line.
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			if m := playgroundURL.FindString(sc.Text()); m != "" {
				select {
				case urlc <- m:
				default:
				}
			}
		}
		outR.Close()
	}()
	logs := &childLog{w: stderr, done: make(chan struct{})}
	go logs.copy(errR)

	fail := func(err error) (*serveChild, error) {
		c.stop()
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, serveStartTimeout)
	defer cancel()
	var raw string
	select {
	case raw = <-urlc:
	case <-c.done:
		logs.wait()
		tail := logs.held()
		if ee, ok := c.waitErr.(*exec.ExitError); ok && ee.ExitCode() == 2 {
			return fail(usagef("fencelab load: --serve-flag: %s", strings.TrimPrefix(tail, "fencelab: ")))
		}
		return fail(fmt.Errorf("load: fencelab serve exited before it was ready (%v): %s", c.waitErr, tail))
	case <-sctx.Done():
		if ctx.Err() != nil {
			return fail(errors.New("interrupted"))
		}
		return fail(fmt.Errorf("load: fencelab serve not ready within %v: %s", serveStartTimeout, logs.held()))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fail(fmt.Errorf("load: fencelab serve printed %q, not its URL", raw))
	}
	c.url = &url.URL{Scheme: u.Scheme, Host: u.Host}
	if err := waitReady(sctx, c); err != nil {
		if ctx.Err() != nil {
			return fail(errors.New("interrupted"))
		}
		return fail(fmt.Errorf("load: fencelab serve at %s: %w: %s", c.url, err, logs.held()))
	}
	logs.release()
	return c, nil
}

var playgroundURL = regexp.MustCompile(`https?://[0-9A-Za-z.\[\]:]+`)

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// checkReady asks a server's /readyz once.
func checkReady(ctx context.Context, base *url.URL) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base.String()+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("/readyz: %w", unwrapURLError(err))
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: HTTP %d", resp.StatusCode)
	}
	return nil
}

// waitReady polls /readyz until it answers 200.
func waitReady(ctx context.Context, c *serveChild) error {
	for {
		if checkReady(ctx, c.url) == nil {
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("it exited (%v)", c.waitErr)
		case <-ctx.Done():
			return errors.New("/readyz does not answer")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop asks the server to shut down (SIGTERM to its process group), kills
// the group if it has not exited within serveStopTimeout, and reaps it.
// It returns an error when the server did not exit cleanly, or had exited
// on its own before it was asked. Safe to call more than once.
func (c *serveChild) stop() error {
	c.once.Do(func() {
		select {
		case <-c.done:
		default:
			c.stopped = true
			_ = syscall.Kill(-c.pid, syscall.SIGTERM)
			select {
			case <-c.done:
			case <-time.After(serveStopTimeout):
				_ = syscall.Kill(-c.pid, syscall.SIGKILL)
				<-c.done
				c.stopErr = fmt.Errorf("did not stop within %v of SIGTERM and was killed", serveStopTimeout)
			}
		}
		if c.wd != nil {
			c.wd.release()
		}
		switch {
		case c.stopErr != nil:
		case !c.stopped:
			c.stopErr = fmt.Errorf("exited during the load (%v)", c.waitErr)
		case c.waitErr != nil:
			c.stopErr = fmt.Errorf("did not stop cleanly (%v)", c.waitErr)
		}
	})
	return c.stopErr
}

// setPdeathsig asks the kernel to send sig to the child when this process
// dies, where SysProcAttr has a Pdeathsig field (Linux, FreeBSD), and
// reports whether it could. The field exists only there and this file
// builds everywhere, so it is set by name.
func setPdeathsig(attr *syscall.SysProcAttr, sig syscall.Signal) bool {
	f := reflect.ValueOf(attr).Elem().FieldByName("Pdeathsig")
	if !f.IsValid() || !f.CanSet() || f.Type() != reflect.TypeOf(sig) {
		return false
	}
	f.Set(reflect.ValueOf(sig))
	return true
}

// childLog passes the child's stderr on, line by line, once released;
// until then it holds the last lines, to explain a failed start.
type childLog struct {
	w        io.Writer
	done     chan struct{} // closed at the end of the child's stderr
	mu       sync.Mutex
	lines    []string
	released bool
}

func (l *childLog) copy(r io.ReadCloser) {
	defer close(l.done)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4<<10), 1<<20)
	for sc.Scan() {
		l.mu.Lock()
		if l.released {
			fmt.Fprintf(l.w, "serve: %s\n", sc.Text())
		} else if l.lines = append(l.lines, sc.Text()); len(l.lines) > 20 {
			l.lines = l.lines[1:]
		}
		l.mu.Unlock()
	}
}

// wait waits, briefly, for the child's stderr to reach its end.
func (l *childLog) wait() {
	select {
	case <-l.done:
	case <-time.After(time.Second):
	}
}

func (l *childLog) held() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		return "it printed nothing"
	}
	return strings.Join(l.lines, "; ")
}

func (l *childLog) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released, l.lines = true, nil
}

// serveWatchdogScript stops the child server of a load that died without
// stopping it, where no parent-death signal does (macOS): a small shell
// whose stdin is a pipe only this process writes to. The first line is
// the child's pid (also its process group); "stop" means it has been
// reaped: exit quietly. EOF means this process is gone: SIGTERM the group.
// Like the supervisor's watchdog it evaluates nothing it reads, and
// refuses pid 1.
const serveWatchdogScript = `trap '' HUP INT
read -r pid || exit 0
case $pid in
'' | *[!0-9]* | 1) exit 0 ;;
esac
while read -r line; do
	[ "$line" = stop ] && exit 0
done
kill -s TERM -- "-$pid" 2>/dev/null
exit 0
`

// serveWatchdog is the shell running serveWatchdogScript.
type serveWatchdog struct {
	cmd *exec.Cmd
	w   *os.File // the write end of its stdin; close-on-exec, so the child does not hold it
}

func newServeWatchdog() (*serveWatchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("load: start watchdog: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", serveWatchdogScript, "fencelab-load-watchdog")
	cmd.Stdin = r
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's Ctrl-C must not reach it
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("load: start watchdog: %w", err)
	}
	return &serveWatchdog{cmd: cmd, w: w}, nil
}

func (wd *serveWatchdog) watch(pid int) error {
	if _, err := fmt.Fprintf(wd.w, "%d\n", pid); err != nil {
		return fmt.Errorf("load: tell watchdog: %w", err)
	}
	return nil
}

// release tells the watchdog the child is reaped (or never started) and
// waits for it to exit.
func (wd *serveWatchdog) release() {
	_, _ = fmt.Fprintln(wd.w, "stop")
	wd.w.Close()
	_ = wd.cmd.Wait()
}

// ---- the readers -----------------------------------------------------------------

// loader runs the readers against one server and polls its stats.
type loader struct {
	base    *url.URL
	command []byte // the socket message that presses Run
	readers int
	ramp    time.Duration
	timeout time.Duration
	client  *http.Client
}

func newLoader(base *url.URL, cmd runCommand, readers int, ramp, timeout time.Duration) *loader {
	c, _ := json.Marshal(cmd)
	msg, _ := json.Marshal(map[string]any{"type": "command", "id": "1", "command": json.RawMessage(c)})
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = readers + 8
	tr.MaxIdleConnsPerHost = readers + 8
	return &loader{base: base, command: msg, readers: readers, ramp: ramp, timeout: timeout, client: &http.Client{Transport: tr}}
}

// Why a reader's context ended, when it did.
var (
	errReaderTimeout   = errors.New("reader timeout")
	errOverallDeadline = errors.New("overall deadline")
	errSeriesDeadline  = errors.New("series deadline")
)

// outcome is how one reader fared.
type outcome struct {
	ok, busy   bool
	took       time.Duration // Run to verdict, when one came
	err        string
	reconnects int
}

// busyError is the server saying it is at a cap: HTTP 503, or a command
// error whose code is busy.
type busyError struct{ msg string }

func (e *busyError) Error() string { return e.msg }

// run plays every reader, arriving at once or spread over the ramp, within
// the overall deadline (the ramp, the per-reader timeout and a grace), and
// reports.
func (l *loader) run(ctx context.Context) *loadReport {
	began := time.Now()
	deadline := l.ramp + l.timeout + loadGrace
	lctx, cancel := context.WithTimeoutCause(ctx, deadline, errOverallDeadline)
	defer cancel()

	statsCtx, stopStats := context.WithCancel(context.WithoutCancel(ctx))
	peaks := make(chan *serverStats, 1)
	go func() { peaks <- l.pollStats(statsCtx) }()

	outs := make([]outcome, l.readers)
	var wg sync.WaitGroup
	for i := range l.readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l.ramp > 0 {
				select {
				case <-time.After(l.ramp * time.Duration(i) / time.Duration(l.readers)):
				case <-lctx.Done():
					outs[i] = outcome{err: l.endedWhy(lctx, nil)}
					return
				}
			}
			outs[i] = l.reader(lctx)
		}()
	}
	wg.Wait()
	stopStats()
	st := <-peaks
	l.client.CloseIdleConnections()
	return newLoadReport(l, outs, st, time.Since(began), ctx.Err() != nil)
}

// reader is one reader: a session, its socket, Run, the verdict.
func (l *loader) reader(ctx context.Context) outcome {
	ctx, cancel := context.WithTimeoutCause(ctx, l.timeout, errReaderTimeout)
	defer cancel()
	var out outcome
	id, token, err := l.createSession(ctx)
	if err == nil {
		// A reader who leaves closes the tab; this one also ends its session,
		// so a server under --url is left as it was found.
		defer l.deleteSession(id, token)
		out.took, out.reconnects, err = l.watch(ctx, id, token)
	}
	var be *busyError
	switch {
	case err == nil:
		out.ok = true
	case errors.As(err, &be):
		out.busy = true
	default:
		out.err = l.endedWhy(ctx, err)
	}
	return out
}

// endedWhy says what became of a reader that did not finish: its own
// timeout, the overall deadline, Ctrl-C, or err itself.
func (l *loader) endedWhy(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		switch context.Cause(ctx) {
		case errReaderTimeout:
			return fmt.Sprintf("no verdict within --timeout %v", l.timeout)
		case errOverallDeadline:
			return "no verdict by the overall deadline (--ramp + --timeout + 30s)"
		case errSeriesDeadline:
			return "no verdict by the series' overall deadline"
		default:
			return "interrupted"
		}
	}
	return err.Error()
}

// apiError reads the API's error body: {"error","code","status"}.
func apiError(what string, resp *http.Response) error {
	var body struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	_ = json.Unmarshal(b, &body)
	msg := body.Error
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	if resp.StatusCode == http.StatusServiceUnavailable || body.Code == string(fault.Busy) {
		return &busyError{msg: fmt.Sprintf("%s: %s", what, msg)}
	}
	return fmt.Errorf("%s: HTTP %d: %s", what, resp.StatusCode, msg)
}

func (l *loader) createSession(ctx context.Context) (id, token string, err error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.base.String()+"/api/sessions", nil)
	resp, err := l.client.Do(req)
	if err != nil {
		return "", "", fmt.Errorf("create session: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return "", "", apiError("create session", resp)
	}
	var c struct{ ID, Token string }
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.ID == "" || c.Token == "" {
		return "", "", errors.New("create session: the answer has no id and token")
	}
	return c.ID, c.Token, nil
}

func (l *loader) deleteSession(id, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, l.base.String()+"/api/sessions/"+url.PathEscape(id), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := l.client.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// unwrapURLError drops net/url's "Post \"http://...\": " prefix: the
// address is the same for every reader and says nothing.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// frame is what a reader reads of a socket frame: the fields it acts on.
type frame struct {
	Type   string `json:"type"`
	ID     string `json:"id"`
	OK     bool   `json:"ok"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Error  string `json:"error"`
	Result struct {
		Run string `json:"run"`
	} `json:"result"`
	Event *struct {
		Seq     int64    `json:"seq"`
		Run     string   `json:"run"`
		Kind    lab.Kind `json:"kind"`
		Verdict *struct {
			Safe bool `json:"safe"`
		} `json:"verdict"`
		Error    *lab.ErrorEvent `json:"error"`
		RunState *struct {
			Info struct {
				Phase      lab.RunPhase   `json:"phase"`
				StopReason lab.StopReason `json:"stop_reason"`
				Error      *lab.Failure   `json:"error"`
			} `json:"info"`
		} `json:"run_state"`
		Session *lab.SessionEvent `json:"session"`
	} `json:"event"`
}

// follow is one reader's view of its session's socket.
type follow struct {
	since      int64     // the last seq seen
	sent       time.Time // when Run was pressed; zero until then
	run        string    // the run's id, once the reply names it
	reconnects int
}

// watch opens the session's socket, presses Run once it is live, and reads
// until the verdict. Like the page, it reconnects from the last seq it saw
// when the socket drops (backing off from 250ms to 5s), except when the
// events are no longer kept (4001) or the session has ended (4002).
func (l *loader) watch(ctx context.Context, id, token string) (time.Duration, int, error) {
	ws := "ws"
	if l.base.Scheme == "https" {
		ws = "wss"
	}
	f := &follow{}
	delay := 250 * time.Millisecond
	for {
		u := fmt.Sprintf("%s://%s/api/sessions/%s/ws?since=%d&token=%s", ws, l.base.Host, url.PathEscape(id), f.since, url.QueryEscape(token))
		conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: l.client})
		if err == nil {
			var took time.Duration
			took, err = l.read(ctx, conn, f)
			if err == nil {
				conn.Close(websocket.StatusNormalClosure, "the reader has its verdict")
				return took, f.reconnects, nil
			}
			conn.CloseNow()
			var dropped *droppedError
			if !errors.As(err, &dropped) {
				return 0, f.reconnects, err
			}
		} else if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return 0, f.reconnects, apiError("open the socket", resp)
		} else if ctx.Err() != nil {
			return 0, f.reconnects, ctx.Err()
		}
		// Dropped, or could not connect: again, as the page does.
		f.reconnects++
		select {
		case <-ctx.Done():
			return 0, f.reconnects, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(5*time.Second, 2*delay)
	}
}

// droppedError is a socket that closed in a way the page reconnects after.
type droppedError struct{ err error }

func (e *droppedError) Error() string { return "the socket dropped: " + e.err.Error() }

// read reads frames until the verdict of the run it started. It presses
// Run at the first "live" frame.
func (l *loader) read(ctx context.Context, conn *websocket.Conn, f *follow) (time.Duration, error) {
	conn.SetReadLimit(16 << 20) // a verdict carries the whole outcome
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			switch st := websocket.CloseStatus(err); st {
			case 4001:
				return 0, errors.New("the socket closed: the events it missed are no longer kept (4001)")
			case 4002:
				return 0, errors.New("the socket closed: the session has ended (4002)")
			}
			return 0, &droppedError{err}
		}
		var m frame
		if err := json.Unmarshal(b, &m); err != nil {
			return 0, fmt.Errorf("a frame is not JSON: %v", err)
		}
		switch m.Type {
		case "live":
			if f.sent.IsZero() {
				f.sent = time.Now()
				if err := conn.Write(ctx, websocket.MessageText, l.command); err != nil {
					return 0, &droppedError{err}
				}
			}
		case "reply":
			if m.ID != "1" {
				continue
			}
			if !m.OK {
				if m.Code == string(fault.Busy) || m.Status == http.StatusServiceUnavailable {
					return 0, &busyError{msg: "run: " + m.Error}
				}
				return 0, fmt.Errorf("run: %s (%s)", m.Error, m.Code)
			}
			f.run = m.Result.Run
		case "error":
			return 0, fmt.Errorf("the server could not read the command: %s", m.Error)
		case "event":
			e := m.Event
			if e == nil || e.Seq <= f.since {
				continue // never twice
			}
			f.since = e.Seq
			if f.run != "" && e.Run != "" && e.Run != f.run {
				continue // not this reader's run (the session has only one)
			}
			switch e.Kind {
			case lab.KindVerdict:
				took := time.Since(f.sent)
				if e.Verdict == nil || !e.Verdict.Safe {
					return took, errors.New("the verdict is unsafe: not a correct build's (all guards on)")
				}
				return took, nil
			case lab.KindError:
				if e.Error != nil {
					return 0, fmt.Errorf("the run failed (%s): %s", e.Error.Code, e.Error.Message)
				}
			case lab.KindRunState:
				if e.RunState == nil {
					continue
				}
				if i := e.RunState.Info; i.Phase.Ended() && i.Phase != lab.PhaseFinished {
					return 0, fmt.Errorf("the run %s (%s) before its verdict", i.Phase, i.StopReason)
				}
			case lab.KindSession:
				return 0, errors.New("the session ended before the verdict")
			}
		}
	}
}

// ---- the server's stats -----------------------------------------------------------

// serverStats are the peaks of the server's /api/stats during the load,
// and its first sample, before any reader.
type serverStats struct {
	Samples        int   `json:"samples"`
	Failed         int   `json:"failed"`
	Unsupported    bool  `json:"unsupported,omitempty"` // the server has no /api/stats
	IdleRSS        int64 `json:"idle_rss_bytes"`
	IdleDB         int   `json:"idle_db_connections"`
	PeakRSS        int64 `json:"peak_rss_bytes"`
	PeakDB         int   `json:"peak_db_connections"`
	PeakRuns       int   `json:"peak_runs"`
	PeakSessions   int   `json:"peak_sessions"`
	PeakGoroutines int   `json:"peak_goroutines"`
}

// pollStats samples /api/stats every statsEvery until ctx ends, then
// once more, and keeps the peaks.
func (l *loader) pollStats(ctx context.Context) *serverStats {
	st := &serverStats{}
	t := time.NewTicker(statsEvery)
	defer t.Stop()
	for {
		l.sample(st)
		if st.Unsupported {
			return st
		}
		select {
		case <-ctx.Done():
			l.sample(st)
			return st
		case <-t.C:
		}
	}
}

func (l *loader) sample(st *serverStats) {
	s, err := l.stats(context.Background())
	switch {
	case errors.Is(err, errNoStats):
		st.Unsupported = true
		return
	case err != nil:
		st.Failed++
		return
	}
	if st.Samples == 0 {
		st.IdleRSS, st.IdleDB = s.RSSBytes, s.DBConnections
	}
	st.Samples++
	st.PeakRSS = max(st.PeakRSS, s.RSSBytes)
	st.PeakDB = max(st.PeakDB, s.DBConnections)
	st.PeakRuns = max(st.PeakRuns, s.Runs)
	st.PeakSessions = max(st.PeakSessions, s.Sessions)
	st.PeakGoroutines = max(st.PeakGoroutines, s.Goroutines)
}

// apiStats is an answer of GET /api/stats, the fields read of it.
type apiStats struct {
	Sessions      int   `json:"sessions"`
	Runs          int   `json:"runs"`
	RSSBytes      int64 `json:"rss_bytes"`
	DBConnections int   `json:"db_connections"`
	Goroutines    int   `json:"goroutines"`
}

// errNoStats is a server that answers /api/stats 404: an older one.
var errNoStats = errors.New("the server has no /api/stats")

// stats asks /api/stats once, within 3s.
func (l *loader) stats(ctx context.Context) (apiStats, error) {
	var s apiStats
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, l.base.String()+"/api/stats", nil)
	resp, err := l.client.Do(req)
	if err != nil {
		return s, fmt.Errorf("/api/stats: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return s, errNoStats
	case resp.StatusCode != http.StatusOK:
		return s, fmt.Errorf("/api/stats: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("/api/stats: %w", err)
	}
	return s, nil
}

// ---- the report --------------------------------------------------------------------

// loadReport is what `fencelab load` prints: with --json, as is.
type loadReport struct {
	URL       string          `json:"url"`
	ServerPID int             `json:"server_pid,omitempty"` // the fencelab serve this command started
	Command   json.RawMessage `json:"command"`              // what each reader's Run sent
	Readers   int             `json:"readers"`
	RampMS    int64           `json:"ramp_ms"`
	TimeoutMS int64           `json:"timeout_ms"`
	OK        int             `json:"ok"`
	Busy      int             `json:"busy"`
	Errors    int             `json:"errors"`
	// ErrorMessages are the distinct errors, most frequent first.
	ErrorMessages []errorCount `json:"error_messages"`
	// Reconnects counts the sockets the readers had to open again.
	Reconnects int `json:"reconnects"`
	// RunToVerdictMS is from sending Run to reading the verdict, over the
	// readers that were ok.
	RunToVerdictMS struct {
		P50 int64 `json:"p50"`
		P95 int64 `json:"p95"`
		Max int64 `json:"max"`
	} `json:"run_to_verdict_ms"`
	// PeakRSSBytes and PeakDBConnections are null when the server has no
	// /api/stats or never answered it.
	PeakRSSBytes      *int64 `json:"peak_rss_bytes"`
	PeakDBConnections *int   `json:"peak_db_connections"`
	// P50Ratio is this load's p50 as a ratio to the first load's, in a
	// series (--readers A,B,...); absent from a single load's report, and
	// when either load had no reader ok.
	P50Ratio    *float64     `json:"p50_ratio,omitempty"`
	Stats       *serverStats `json:"stats"`
	ElapsedMS   int64        `json:"elapsed_ms"`
	Interrupted bool         `json:"interrupted,omitempty"`
	// ServerExit says how the server this command started did not stop
	// cleanly; empty when it did.
	ServerExit string `json:"server_exit,omitempty"`
}

type errorCount struct {
	Message string `json:"message"`
	Count   int    `json:"count"`
}

func newLoadReport(l *loader, outs []outcome, st *serverStats, elapsed time.Duration, interrupted bool) *loadReport {
	var cmd struct {
		Command json.RawMessage `json:"command"`
	}
	_ = json.Unmarshal(l.command, &cmd)
	r := &loadReport{URL: l.base.String(), Command: cmd.Command, Readers: len(outs), RampMS: l.ramp.Milliseconds(),
		TimeoutMS: l.timeout.Milliseconds(), ErrorMessages: []errorCount{}, Stats: st, ElapsedMS: elapsed.Milliseconds(), Interrupted: interrupted}
	var took []time.Duration
	byMsg := map[string]int{}
	for _, o := range outs {
		r.Reconnects += o.reconnects
		switch {
		case o.ok:
			r.OK++
			took = append(took, o.took)
		case o.busy:
			r.Busy++
		default:
			r.Errors++
			byMsg[o.err]++
		}
	}
	for m, n := range byMsg {
		r.ErrorMessages = append(r.ErrorMessages, errorCount{Message: m, Count: n})
	}
	sort.Slice(r.ErrorMessages, func(i, j int) bool {
		a, b := r.ErrorMessages[i], r.ErrorMessages[j]
		return a.Count > b.Count || (a.Count == b.Count && a.Message < b.Message)
	})
	if len(took) > 0 {
		slices.Sort(took)
		r.RunToVerdictMS.P50 = percentile(took, 50).Milliseconds()
		r.RunToVerdictMS.P95 = percentile(took, 95).Milliseconds()
		r.RunToVerdictMS.Max = took[len(took)-1].Milliseconds()
	}
	if st != nil && st.Samples > 0 {
		r.PeakRSSBytes, r.PeakDBConnections = &st.PeakRSS, &st.PeakDB
	}
	return r
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// table renders the report for a terminal.
func (r *loadReport) table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	arrive := "all at once"
	if r.RampMS > 0 {
		arrive = "arriving over " + time.Duration(r.RampMS*int64(time.Millisecond)).String()
	}
	fmt.Fprintf(tw, "server\t%s\n", r.URL)
	fmt.Fprintf(tw, "readers\t%d, %s\n", r.Readers, arrive)
	fmt.Fprintf(tw, "ok\t%d\n", r.OK)
	fmt.Fprintf(tw, "busy\t%d\n", r.Busy)
	fmt.Fprintf(tw, "errors\t%d\n", r.Errors)
	for _, e := range r.ErrorMessages {
		fmt.Fprintf(tw, "\t%d× %s\n", e.Count, e.Message)
	}
	if r.OK > 0 {
		ms := func(n int64) string { return fmt.Sprintf("%.2fs", float64(n)/1000) }
		fmt.Fprintf(tw, "Run to verdict\tp50 %s  p95 %s  max %s\n", ms(r.RunToVerdictMS.P50), ms(r.RunToVerdictMS.P95), ms(r.RunToVerdictMS.Max))
	} else {
		fmt.Fprintf(tw, "Run to verdict\t- (no reader was ok)\n")
	}
	if r.Reconnects > 0 {
		fmt.Fprintf(tw, "reconnects\t%d\n", r.Reconnects)
	}
	switch st := r.Stats; {
	case st == nil || st.Unsupported:
		fmt.Fprintf(tw, "peak RSS\t- (the server has no /api/stats)\n")
	case st.Samples == 0:
		fmt.Fprintf(tw, "peak RSS\t- (/api/stats never answered)\n")
	default:
		fmt.Fprintf(tw, "peak RSS\t%s (idle %s; the server process, not its workers)\n", mib(st.PeakRSS), mib(st.IdleRSS))
		fmt.Fprintf(tw, "peak Postgres connections\t%d (idle %d)\n", st.PeakDB, st.IdleDB)
		fmt.Fprintf(tw, "peak runs at once\t%d (goroutines %d; %d samples", st.PeakRuns, st.PeakGoroutines, st.Samples)
		if st.Failed > 0 {
			fmt.Fprintf(tw, ", %d unanswered", st.Failed)
		}
		fmt.Fprintf(tw, ")\n")
	}
	fmt.Fprintf(tw, "took\t%.1fs\n", float64(r.ElapsedMS)/1000)
	if r.Interrupted {
		fmt.Fprintf(tw, "\tinterrupted: these are the readers so far\n")
	}
	if r.ServerExit != "" {
		fmt.Fprintf(tw, "server exit\tthe server %s\n", r.ServerExit)
	}
	tw.Flush()
	return b.String()
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
