package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/postgres/pgcluster"
	"github.com/fencelab/fencelab/server/session"
	"github.com/fencelab/fencelab/web"
)

const serveSummary = `The playground server: sessions of real worker processes on PostgreSQL,
streamed live over WebSocket, driven through a JSON API (see REFERENCE.md).
Postgres: DATABASE_URL if set, otherwise a private throwaway cluster.
On SIGTERM, SIGHUP or Ctrl-C it stops every run, kills and reaps every worker,
drops every session schema and closes every socket within 10 seconds.`

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// prefixList is a repeatable flag of networks, such as 10.0.0.0/8 or a
// single address (a /32 or /128).
type prefixList []netip.Prefix

func (l *prefixList) String() string {
	var out []string
	for _, p := range *l {
		out = append(out, p.String())
	}
	return strings.Join(out, ",")
}

func (l *prefixList) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		p, err := netip.ParsePrefix(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil {
				return fmt.Errorf("%q is neither a network (10.0.0.0/8) nor an address", v)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		*l = append(*l, p.Masked())
	}
	return nil
}

func serveCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", serveSummary, stderr)
	// Loopback unless told otherwise: the server runs visitors' SQL, so a
	// laptop at a conference must not offer it to the room by accident.
	defAddr := "127.0.0.1:8080"
	if p := getenv("PORT"); p != "" {
		defAddr = "127.0.0.1:" + p
	}
	addr := fs.String("addr", defAddr, "address to listen on; the default is loopback only; :8080 opens it to every interface ($PORT sets the default port)")
	var origins listFlag
	fs.Var(&origins, "allow-origin", "an origin whose pages may drive an embedded playground by postMessage and open its WebSocket, e.g. https://blog.example.com or https://*.example.com (repeatable)")
	var ancestors listFlag
	advertise := fs.String("advertise-url", "", "where the other instances on the same Postgres reach this one, e.g. http://10.0.0.5:8080 (default: this listener's address, right for instances on one machine)")
	var proxies prefixList
	fs.Var(&proxies, "trust-proxy", "a reverse proxy's network (CIDR, repeatable): from it, X-Forwarded-For names the client that per-client caps count; from elsewhere the header is ignored")
	fs.Var(&ancestors, "frame-ancestor", "restrict embedding to these origins (repeatable); by default any site may embed the playground")
	receiverURL := fs.String("receiver-url", "", "a standalone `fencelab receiver` to deliver to instead of the built-in one, e.g. http://127.0.0.1:8081")
	var lim session.Limits
	lim.Fill()
	fs.IntVar(&lim.MaxSessions, "max-sessions", lim.MaxSessions, "sessions at once")
	fs.IntVar(&lim.MaxRuns, "max-runs", lim.MaxRuns, "runs at once, across all sessions (each holds 2 or more worker processes)")
	fs.IntVar(&lim.MaxRunsPerSession, "max-runs-per-session", lim.MaxRunsPerSession, "runs at once of one session: its current run and its batch's cells")
	fs.IntVar(&lim.MaxWorkers, "max-workers", lim.MaxWorkers, "live workers in one free-play run")
	fs.IntVar(&lim.MaxJobs, "max-jobs", lim.MaxJobs, "jobs in one free-play run")
	fs.DurationVar(&lim.MaxStall, "max-stall", lim.MaxStall, "a worker frozen longer than this is killed")
	fs.DurationVar(&lim.MaxRunTime, "max-run-time", lim.MaxRunTime, "a run older than this is stopped")
	fs.DurationVar(&lim.SessionIdle, "session-idle", lim.SessionIdle, "a session unused and unwatched for this long ends")
	fs.DurationVar(&lim.RunIdle, "run-idle", lim.RunIdle, "a run nobody watches or drives for this long is stopped, giving back its slot")
	fs.DurationVar(&lim.MinLease, "min-lease", lim.MinLease, "shortest lease a run may ask for")
	fs.DurationVar(&lim.MaxLease, "max-lease", lim.MaxLease, "longest lease a run may ask for")
	fs.IntVar(&lim.MaxEvents, "max-events", lim.MaxEvents, "events kept per session")
	fs.IntVar(&lim.MaxEventsTotal, "max-events-total", lim.MaxEventsTotal, "events kept by all sessions together; a session over its share drops its oldest first")
	fs.IntVar(&lim.MaxSessionMB, "max-session-mb", lim.MaxSessionMB, "MiB the events of one session may hold; its oldest are dropped first (one event is cut to 32 KiB)")
	fs.IntVar(&lim.MaxEventsTotalMB, "max-events-total-mb", lim.MaxEventsTotalMB, "MiB the events of all sessions together may hold; a session over its share drops its oldest first")
	fs.IntVar(&lim.MaxSessionsPerClient, "max-sessions-per-client", lim.MaxSessionsPerClient, "sessions of one client address (loopback: no cap); its oldest unwatched one makes way")
	fs.IntVar(&lim.MaxRunsPerClient, "max-runs-per-client", lim.MaxRunsPerClient, "runs at once of one client address (loopback: no cap)")
	fs.IntVar(&lim.MaxChecks, "max-checks", lim.MaxChecks, "checks (Build it, check it) starting at once, server-wide: a check holds its slot for its first 2 s, and at most three times this many play at once; the others wait in one fair line, one at a time per client address")
	fs.IntVar(&lim.MaxLoads, "max-loads", lim.MaxLoads, "load labs at once, server-wide (each keeps the cores busy for about half a minute)")
	fs.IntVar(&lim.MaxBatchesPerClient, "max-batches-per-client", lim.MaxBatchesPerClient, "batches (the guard matrix, Step 5) at once of one client address (loopback: no cap)")
	fs.DurationVar(&lim.GoneAfter, "gone-after", lim.GoneAfter, "another instance on the same Postgres is gone, and what it left is dropped, once its lock is free and its row unseen this long, on two sweeps this far apart")
	fs.IntVar(&lim.MaxWorkersPerClient, "max-workers-per-client", lim.MaxWorkersPerClient, "worker processes of one client address's runs together, free play's added ones too (loopback: no cap)")
	fs.IntVar(&lim.SpareRuns, "spare-runs", -1, "pairs of a run's schemas kept made in advance while the server is quiet, so a burst of readers starts at once (0: none; default: --max-runs, up to 200; never more than --max-runs)")
	fs.IntVar(&lim.PrestartedWorkers, "prestarted-workers", -1, "worker processes kept spawned in advance while the server is quiet, each waiting for a run, so a burst of readers does not wait for hundreds of spawns (0: none; default: two per spare pair, at most as many as an eighth of the machine's available memory holds at 16 MiB each; none holds a Postgres connection)")
	fs.DurationVar(&lim.FreshIdle, "fresh-idle", lim.FreshIdle, "a session nobody has used (no command, no socket) lives this long")
	maxSockets := fs.Int("max-sockets-per-client", 64, "WebSockets one client address may hold open at once (loopback: no cap); one more is refused with 503")
	maxBody := fs.Int64("max-body", 128<<10, "largest request body, in bytes")
	maxMessage := fs.Int64("max-message", 64<<10, "largest WebSocket message from a client, in bytes (a check's four statements take up to 32 KiB)")
	noCustomSQL := fs.Bool("no-custom-sql", false, "never run readers' own statements: the page's Build it and Check it are off. With them on (the default) the server hardens its database (TEMPORARY, pg_notify, advisory locks and large objects are no longer PUBLIC's): DATABASE_URL must name a database that is fencelab's own")
	rate := fs.Float64("message-rate", 20, "WebSocket messages a second a client may send")
	profiles := fs.String("pprof", "", "serve Go's profiles (net/http/pprof) on this loopback address, e.g. 127.0.0.1:6060, to measure the server (off by default; never an address other machines reach)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text or json")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := validateServeFlags(fs, lim, *maxBody, *maxMessage, *rate, *receiverURL, append(append([]string{}, origins...), ancestors...)); err != nil {
		return err
	}
	if *maxSockets < 1 || *maxSockets > 100_000 {
		return usagef("fencelab serve: --max-sockets-per-client %d must be between 1 and 100000", *maxSockets)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("fencelab serve: --log-level %q must be debug, info, warn or error", *logLevel)
	}
	var handler slog.Handler
	switch *logFormat {
	case "text":
		handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	case "json":
		handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	default:
		return usagef("fencelab serve: --log-format %q must be text or json", *logFormat)
	}
	log := slog.New(api.RedactHandler(handler, getenv("DATABASE_URL"))) // no line says where the database is

	var profLn net.Listener
	if *profiles != "" {
		l, err := profileListener(*profiles)
		if err != nil {
			return err
		}
		defer l.Close()
		profLn = l
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return usagef("fencelab serve: --addr %s: %v", *addr, err)
	}
	defer ln.Close()
	start := time.Now()
	// A cluster of our own allows the connections the caps need; a
	// database of someone else's narrows the caps to what it allows.
	maxConns := 0
	if getenv("DATABASE_URL") == "" {
		maxConns = max(pgcluster.DefaultMaxConnections, session.ConnectionsFor(lim))
	}
	dsn, pool, closeDB, err := openDBSized(ctx, getenv, log, maxConns, session.PoolSize(lim))
	if err != nil {
		return err
	}
	defer closeDB()
	fit, note, err := session.Fit(ctx, pool, lim)
	if err != nil {
		return err
	}
	log.Info(note)
	if getenv("DATABASE_URL") != "" && !*noCustomSQL {
		// The private cluster is started under these; someone else's Postgres is not.
		log.Warn("readers' statements run on a Postgres fencelab did not start: it cannot cap each backend's memory nor keep its WAL small there. " +
			"Run that Postgres with a memory limit per process (ulimit -d 524288, or systemd's LimitDATA=512M), a small max_wal_size, " +
			"and grant this server's role pg_signal_backend so that it can end a statement that outlives its timeout (REFERENCE.md: A public demo)")
	}
	lim = fit
	if lim.SpareRuns < 0 {
		lim.SpareRuns = 200
	}
	lim.SpareRuns = min(lim.SpareRuns, lim.MaxRuns) // more could never all be used at once
	if lim.PrestartedWorkers < 0 {
		lim.PrestartedWorkers = 2 * lim.SpareRuns
		if avail, ok := memAvailable(); ok {
			if fit := int(avail / 8 / prestartedFootprint); fit < lim.PrestartedWorkers {
				lim.PrestartedWorkers = fit
				log.Info("prestarted workers sized to the machine: an eighth of its available memory", "workers", fit, "available_mib", avail>>20)
			}
		}
	}
	if getenv("GOMEMLIMIT") == "" {
		limit := memoryLimit(lim)
		debug.SetMemoryLimit(limit)
		log.Info("the server's memory: Go collects harder as its heap nears this (GOMEMLIMIT sets another)", "limit_mib", limit>>20)
	}
	// An allowed origin keeps its scheme: the socket's check matches
	// scheme and host, as the page's check of postMessage does.
	var commanders, frameAncestors []string
	for _, o := range origins {
		commanders = append(commanders, strings.TrimSuffix(o, "/"))
	}
	for _, o := range ancestors {
		frameAncestors = append(frameAncestors, strings.TrimSuffix(o, "/"))
	}
	tap, closeTap, err := tapFromEnv(getenv)
	if err != nil {
		return err
	}
	defer closeTap()
	srv, err := api.New(ctx, api.Config{
		Listener: ln, Pool: pool, DatabaseURL: dsn, Log: log, AllowOrigins: commanders, TapFunc: tap,
		PagesFunc:        web.Register(web.Options{FrameAncestors: frameAncestors, CommandOrigins: commanders, NoCustomSQL: *noCustomSQL || *receiverURL != ""}),
		ExternalReceiver: *receiverURL, Limits: lim, MaxBody: *maxBody, MaxMessage: *maxMessage, MessageRate: *rate,
		TrustProxies: proxies, AdvertiseURL: *advertise, NoCustomSQL: *noCustomSQL, MaxSocketsPerClient: *maxSockets,
	})
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	log.Info("ready", "url", srv.URL(), "in", time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(stdout, "fencelab: playground at %s\n", srv.URL())
	if everywhere(ln.Addr()) {
		fmt.Fprintf(stdout, "fencelab: listening on every interface (%s): other machines reach it at this machine's address\n", ln.Addr())
	}
	if profLn != nil {
		prof := profileServer()
		go func() { _ = prof.Serve(profLn) }()
		defer prof.Close()
		fmt.Fprintf(stdout, "fencelab: Go's profiles at http://%s/debug/pprof/\n", profLn.Addr())
	}

	select {
	case err := <-errc:
		if err != nil {
			return err
		}
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	log.Info("stopped: runs ended, workers reaped, schemas dropped")
	return nil
}

// prestartedFootprint is what one prestarted worker holds of the
// machine's memory: its RSS, measured (13 MiB), rounded up.
const prestartedFootprint = 16 << 20

// memoryLimit is the soft limit of the server's Go heap: room for the
// events every session keeps together (--max-events-total-mb) twice
// over, and 64 MiB for the rest. Without it the collector lets the heap
// grow to twice what is live before it runs, so the events of sessions
// whose sockets nobody reads, filling their budget over an hour, held
// 560 MiB of resident set under a 256 MiB budget; with it, and the
// budget's default of 128 MiB, the heap stays within 320 MiB.
func memoryLimit(lim session.Limits) int64 {
	return int64(2*lim.MaxEventsTotalMB+64) << 20
}

// memAvailable is the memory the machine has for new work (Linux's
// MemAvailable), when it says.
func memAvailable() (uint64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	return parseMemAvailable(string(b))
}

// parseMemAvailable reads MemAvailable from /proc/meminfo's text.
func parseMemAvailable(meminfo string) (uint64, bool) {
	for _, line := range strings.Split(meminfo, "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) != 2 || f[1] != "kB" {
				return 0, false
			}
			kb, err := strconv.ParseUint(f[0], 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// everywhere reports whether a listener takes connections on every
// interface (":8080", "0.0.0.0:8080", "[::]:8080") rather than one address.
func everywhere(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && (t.IP == nil || t.IP.IsUnspecified())
}

func validateServeFlags(fs *flag.FlagSet, l session.Limits, maxBody, maxMessage int64, rate float64, receiverURL string, origins []string) error {
	bad := func(format string, a ...any) error { return usagef("fencelab serve: "+format, a...) }
	switch {
	case l.MaxSessions < 1 || l.MaxSessions > 100_000:
		return bad("--max-sessions %d must be between 1 and 100000", l.MaxSessions)
	case l.MaxRuns < 1 || l.MaxRuns > 1000:
		return bad("--max-runs %d must be between 1 and 1000", l.MaxRuns)
	case l.MaxWorkers < 1 || l.MaxWorkers > 26:
		return bad("--max-workers %d must be between 1 and 26", l.MaxWorkers)
	case l.MaxJobs < 1 || l.MaxJobs > 10_000:
		return bad("--max-jobs %d must be between 1 and 10000", l.MaxJobs)
	case l.MaxStall < time.Second:
		return bad("--max-stall %v must be at least 1s", l.MaxStall)
	case l.MaxRunTime < 10*time.Second:
		return bad("--max-run-time %v must be at least 10s", l.MaxRunTime)
	case l.SessionIdle < 10*time.Second:
		return bad("--session-idle %v must be at least 10s", l.SessionIdle)
	case l.RunIdle < 5*time.Second || l.RunIdle > l.SessionIdle:
		return bad("--run-idle %v must be at least 5s and at most --session-idle", l.RunIdle)
	case l.MaxRunsPerSession < 2 || l.MaxRunsPerSession > l.MaxRuns && l.MaxRuns >= 2:
		return bad("--max-runs-per-session %d must be at least 2 (its current run and one more) and at most --max-runs", l.MaxRunsPerSession)
	case !experiments.RunLease.Within(experiments.Bounds{Min: l.MinLease, Max: l.MaxLease}):
		return bad("--min-lease %v and --max-lease %v must lie within %v..%v, min first", l.MinLease, l.MaxLease, experiments.RunLease.Min, experiments.RunLease.Max)
	case l.MaxEvents < 1000 || l.MaxEvents > 10_000_000:
		return bad("--max-events %d must be between 1000 and 10000000", l.MaxEvents)
	case l.MaxEventsTotal < l.MaxEvents || l.MaxEventsTotal > 100_000_000:
		return bad("--max-events-total %d must be at least --max-events and at most 100000000", l.MaxEventsTotal)
	case l.MaxSessionMB < 4 || l.MaxSessionMB > 4096:
		return bad("--max-session-mb %d must be between 4 and 4096", l.MaxSessionMB)
	case l.MaxEventsTotalMB < l.MaxSessionMB || l.MaxEventsTotalMB > 1<<20:
		return bad("--max-events-total-mb %d must be at least --max-session-mb and at most 1048576", l.MaxEventsTotalMB)
	case l.MaxChecks < 1 || l.MaxChecks > 64:
		return bad("--max-checks %d must be between 1 and 64", l.MaxChecks)
	case l.MaxLoads < 1 || l.MaxLoads > 16:
		return bad("--max-loads must be between 1 and 16")
	case l.MaxSessionsPerClient < 1 || l.MaxRunsPerClient < 1 || l.MaxBatchesPerClient < 1:
		return bad("--max-sessions-per-client, --max-runs-per-client and --max-batches-per-client must be at least 1")
	case l.GoneAfter < 500*time.Millisecond || l.GoneAfter > time.Hour:
		return bad("--gone-after %v must be between 500ms and 1h (an instance marks itself seen every 2s)", l.GoneAfter)
	case l.MaxWorkersPerClient < 2 || l.MaxWorkersPerClient > 100000:
		return bad("--max-workers-per-client %d must be between 2 (one scripted run's) and 100000", l.MaxWorkersPerClient)
	case l.SpareRuns < -1 || l.SpareRuns > 1000:
		return bad("--spare-runs %d must be between 0 and 1000", l.SpareRuns)
	case l.PrestartedWorkers < -1 || l.PrestartedWorkers > 2000:
		return bad("--prestarted-workers %d must be between 0 and 2000", l.PrestartedWorkers)
	case l.FreshIdle < 10*time.Second || l.FreshIdle > l.SessionIdle:
		return bad("--fresh-idle %v must be at least 10s and at most --session-idle", l.FreshIdle)
	case maxBody < 1024 || maxBody > 64<<20:
		return bad("--max-body %d must be between 1024 and 67108864", maxBody)
	case maxMessage < 256 || maxMessage > 16<<20:
		return bad("--max-message %d must be between 256 and 16777216", maxMessage)
	case rate <= 0 || rate > 10_000:
		return bad("--message-rate %g must be above 0 and at most 10000", rate)
	}
	if a := fs.Lookup("advertise-url").Value.String(); a != "" {
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return bad("--advertise-url %q is not an http(s) URL of a server (no path)", a)
		}
	}
	if receiverURL != "" {
		u, err := url.Parse(receiverURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("--receiver-url %q is not an http(s) URL", receiverURL)
		}
	}
	for _, o := range origins {
		if _, err := originHost(o); err != nil {
			return bad("--allow-origin %q: %v", o, err)
		}
	}
	return nil
}

// originHost checks an origin such as https://blog.example.com or
// https://*.example.com and returns its host.
func originHost(origin string) (string, error) {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("want an origin such as https://blog.example.com")
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("an origin has no path, query or user: want scheme://host[:port]")
	}
	if strings.ContainsAny(u.Host, " '\";") {
		return "", fmt.Errorf("the host has characters an origin cannot have")
	}
	return u.Host, nil
}
