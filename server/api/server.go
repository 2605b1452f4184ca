// Package api is the playground's HTTP and WebSocket server: sessions,
// each with real worker processes under a supervisor, the receiver the
// workers call, and every event streamed live. Routes are in routes.go;
// errors become HTTP statuses in one place, wire.Handler.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/class"
	"github.com/fencelab/fencelab/server/classcheck"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/instances"
	"github.com/fencelab/fencelab/server/recording"
	"github.com/fencelab/fencelab/server/run/notify"
	"github.com/fencelab/fencelab/server/run/receiver"
	"github.com/fencelab/fencelab/server/run/supervisor"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/session"
	"github.com/fencelab/fencelab/server/wire"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
)

// Config configures a Server. Validate fills the defaults.
type Config struct {
	// Listener is where the server accepts connections; bind it first
	// (net.Listen) so a test can use 127.0.0.1:0 and read the address back.
	Listener    net.Listener
	Pool        *pgxpool.Pool
	DatabaseURL string // passed to the worker processes
	// Exe is the fencelab binary the workers run as. Default: this process.
	Exe string
	Log *slog.Logger
	// AllowOrigins lists the origins whose pages may open this server's
	// WebSocket, scheme and all, such as "https://blog.example.com" or
	// "https://*.example.com" (every subdomain of example.com); an entry
	// without a scheme means https. The server's own origin is always
	// allowed.
	AllowOrigins []string
	// ExternalReceiver is a standalone `fencelab receiver` to deliver to
	// instead of the built-in one.
	ExternalReceiver string
	Limits           session.Limits
	// Recordings keeps finished runs to replay when the server is busy.
	// Default: a store with the embedded seed recordings.
	Recordings *recording.Store
	// MaxBody bounds a request body; MaxMessage a WebSocket message;
	// MessageRate the messages per second a socket may send.
	MaxBody     int64
	MaxMessage  int64
	MessageRate float64
	// PagesFunc, if set, adds the page routes (the web package) to the server.
	PagesFunc func(e *echo.Echo, s *Server)
	// TapFunc, if set, sees every event of every session as it is kept,
	// encoded (the event tap; see EventTap).
	TapFunc func(encoded []byte)
	// AdvertiseURL is where other instances on the same Postgres reach this
	// one, to pass on requests for its sessions. Default: the listener's
	// address (http://127.0.0.1:PORT when it listens on every interface),
	// right for instances on one machine.
	AdvertiseURL string
	// TrustProxies lists the networks (CIDRs, such as 10.0.0.0/8) of the
	// reverse proxies in front of the server: a request from one of them is
	// counted as the client its X-Forwarded-For names. From anywhere else,
	// the header is ignored and the peer's address counts.
	TrustProxies []netip.Prefix
	// MaxSocketsPerClient bounds the WebSockets one client address (see
	// TrustProxies) holds open at once on this instance, its own sessions'
	// and those it passes on to another instance alike; one more is
	// refused before it is upgraded. Loopback clients have no cap, as with
	// the per-client caps of Limits. Default 64.
	MaxSocketsPerClient int
	// NoCustomSQL turns the check command off: readers' own statements
	// never run. With it on (the default), New hardens the database
	// (sandbox.Harden: TEMPORARY, pg_notify, advisory locks and large
	// objects no longer PUBLIC's), so the database must be fencelab's own.
	NoCustomSQL bool
}

// Validate checks the config and fills the defaults.
func (c *Config) Validate() error {
	if c.Listener == nil || c.Pool == nil || c.DatabaseURL == "" {
		return errors.New("server: Listener, Pool and DatabaseURL are required")
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Log.Handler() != slog.DiscardHandler {
		c.Log = slog.New(RedactHandler(c.Log.Handler(), c.DatabaseURL)) // where the database is stays out of the log
	}
	if c.MaxBody == 0 {
		c.MaxBody = 128 << 10
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = 64 << 10 // a check's four statements, 8 KiB each, escaped
	}
	if c.MessageRate == 0 {
		c.MessageRate = 20
	}
	if c.MaxSocketsPerClient == 0 {
		c.MaxSocketsPerClient = 64
	}
	if c.MaxBody < 1024 || c.MaxMessage < 256 || c.MessageRate <= 0 || c.MaxSocketsPerClient < 1 {
		return errors.New("server: max body must be at least 1KiB, max message at least 256 bytes, message rate and sockets per client positive")
	}
	c.Limits.Fill()
	if c.AdvertiseURL == "" {
		c.AdvertiseURL = loopbackURL(c.Listener.Addr())
	}
	if u, err := url.Parse(c.AdvertiseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("server: the advertise URL must be an http(s) URL")
	}
	if c.Recordings == nil {
		rs, err := recording.New(128)
		if err != nil {
			return err
		}
		c.Recordings = rs
	}
	return nil
}

// Server is the running playground. Serve runs it; Shutdown stops it and
// everything it started.
type Server struct {
	cfg      Config
	echo     *echo.Echo
	http     *http.Server
	Sessions *session.Manager
	classes  *class.Store
	guesses  *guesses // wrong class codes, by address
	// stopOverruns ends the watch for readers' statements that outlive
	// their timeout (sandbox.WatchOverruns); nil without custom SQL.
	stopOverruns func()
	line         *class.Line        // the classes' checks, in line in Postgres
	lineStop     context.CancelFunc // stops this instance's share of the line
	lineDone     chan struct{}
	sup          *supervisor.Supervisor
	notify       *notify.Notifier
	receivers    *receiver.Registry
	started      time.Time

	mu      sync.Mutex
	sockets map[*websocket.Conn]struct{}
	perAddr map[string]int       // sockets held per client key, own and passed on
	fwd     *instances.Forwarder // requests passed on to other instances
	closing bool
	sweep   chan struct{}
	swept   chan struct{}
}

// New builds a server on cfg.Listener: a worker supervisor, the session
// manager (which drops the schemas of servers that are gone) and the routes.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	customSQL := !cfg.NoCustomSQL && cfg.ExternalReceiver == ""
	if customSQL {
		if err := sandbox.Harden(ctx, cfg.Pool); err != nil {
			return nil, fmt.Errorf("readers' own SQL needs a database fencelab may harden (or --no-custom-sql): %w", err)
		}
	}
	sup, err := supervisor.New(supervisor.Config{Exe: cfg.Exe, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	receivers := receiver.NewRegistry(loopbackURL(cfg.Listener.Addr()) + "/receiver")
	nt := notify.New(notify.Connector(cfg.DatabaseURL, "fencelab serve listener"), cfg.Log)
	classes, err := class.Open(ctx, class.Config{Pool: cfg.Pool})
	if err != nil {
		nt.Close()
		_ = sup.Close()
		return nil, err
	}
	mgr, err := session.NewManager(ctx, session.Config{
		Pool: cfg.Pool, DatabaseURL: cfg.DatabaseURL, Supervisor: sup, Notify: nt, Log: cfg.Log,
		Receivers: receivers, ExternalReceiver: strings.TrimSuffix(cfg.ExternalReceiver, "/"),
		Limits: cfg.Limits, Recordings: cfg.Recordings, TapFunc: cfg.TapFunc, AdvertiseURL: cfg.AdvertiseURL, CustomSQL: customSQL,
	})
	if err != nil {
		nt.Close()
		_ = sup.Close()
		return nil, err
	}
	s := &Server{cfg: cfg, Sessions: mgr, classes: classes, guesses: newGuesses(), sup: sup, notify: nt, receivers: receivers, started: time.Now(), sockets: map[*websocket.Conn]struct{}{}, perAddr: map[string]int{},
		sweep: make(chan struct{}), swept: make(chan struct{})}
	if s.line, err = classes.OpenLine(ctx, class.LineConfig{Owner: engine.UniqueOwner("fencelab-line"), Play: classcheck.Play(classes, mgr),
		Concurrency: cfg.Limits.MaxChecks, Log: cfg.Log}); err != nil {
		mgr.Close()
		nt.Close()
		_ = sup.Close()
		return nil, err
	}
	lctx, lcancel := context.WithCancel(context.WithoutCancel(ctx))
	s.lineStop, s.lineDone = lcancel, make(chan struct{})
	go func() {
		defer close(s.lineDone)
		if err := s.line.Run(lctx); err != nil && lctx.Err() == nil {
			cfg.Log.Error("the class line stopped", "err", err)
		}
	}()
	s.echo = wire.NewEcho(cfg.Log)
	s.echo.IPExtractor = clientIP(cfg.TrustProxies)
	s.fwd = instances.NewForwarder(mgr.Instances(), s)
	s.echo.Pre(s.fwd.Middleware)
	s.routes(s.echo)
	if cfg.PagesFunc != nil {
		cfg.PagesFunc(s.echo, s)
	}
	s.http = &http.Server{Handler: s.echo, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(cfg.Log.Handler(), slog.LevelWarn)}
	go s.sweeper()
	if customSQL {
		s.stopOverruns = sandbox.WatchOverruns(cfg.Pool, cfg.Log)
	}
	return s, nil
}

// clientIP is how a request's client address is read: the peer's own, or,
// from a trusted proxy, the nearest untrusted address of X-Forwarded-For.
// Echo's default would believe the header from anyone.
func clientIP(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// loopbackURL is how the workers on this machine reach the listener.
func loopbackURL(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return "http://" + a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// URL returns the server's address for people, such as http://127.0.0.1:8080.
func (s *Server) URL() string { return loopbackURL(s.cfg.Listener.Addr()) }

// Config returns the server's configuration.
func (s *Server) Config() Config { return s.cfg }

// Serve accepts connections until Shutdown. It returns nil after Shutdown.
func (s *Server) Serve() error {
	err := s.http.Serve(s.cfg.Listener)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (s *Server) sweeper() {
	defer close(s.swept)
	t := time.NewTicker(s.Sessions.SweepEvery())
	defer t.Stop()
	for {
		select {
		case <-s.sweep:
			return
		case <-t.C:
			s.Sessions.Sweep()
			s.sweepClasses()
		}
	}
}

// sweepClasses ends the classes nobody used and forgets the long ended,
// then tells each student's page here whose class has ended by then (on
// its own, or by its teacher through another instance), as End class
// tells those on the instance it came to.
func (s *Server) sweepClasses() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := s.classes.Sweep(ctx); err != nil {
		s.cfg.Log.Warn("could not sweep the classes", "err", err)
	} else if n > 0 {
		s.cfg.Log.Info("idle classes ended", "classes", n)
	}
	seated := s.Sessions.Seated()
	if len(seated) == 0 {
		return
	}
	ids := make([]string, 0, len(seated))
	for id := range seated {
		ids = append(ids, id)
	}
	ended, err := s.classes.Ended(ctx, ids)
	if err != nil {
		s.cfg.Log.Warn("could not read which classes ended", "err", err)
		return
	}
	for _, id := range ended {
		for _, sess := range seated[id] {
			_ = sess.EndClass() // a session that ended meanwhile has no page to tell
		}
	}
}

// Shutdown stops the server: no new connections, every run stopped and
// its workers killed and reaped, every session schema dropped, every socket
// closed by the server itself (http.Server.Shutdown does not close
// hijacked connections). It returns when all that is done or ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	s.mu.Unlock()
	close(s.sweep)
	<-s.swept
	if s.stopOverruns != nil {
		s.stopOverruns()
	}
	s.lineStop() // the checks this instance plays go back in line, for the next instance to take
	<-s.lineDone

	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Sessions.Close() // ends runs, kills workers, drops schemas, closes the logs and so the sockets
		s.notify.Close()
		_ = s.sup.Close()
		s.closeSockets(websocket.StatusGoingAway, "the server is shutting down")
		s.fwd.Close()
	}()
	// http.Server.Shutdown waits up to 5 s for a connection a browser opened
	// ahead of need and never used; a server that has ended every session
	// has nothing left to answer on it, so such stragglers are closed.
	hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
	herr := s.http.Shutdown(hctx)
	hcancel()
	if errors.Is(herr, context.DeadlineExceeded) && ctx.Err() == nil {
		herr = s.http.Close()
	}
	select {
	case <-done:
	case <-ctx.Done():
		s.closeSockets(websocket.StatusGoingAway, "the server is shutting down")
		return fmt.Errorf("shutdown: %w", ctx.Err())
	}
	return herr
}

func (s *Server) track(c *websocket.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.sockets[c] = struct{}{}
	return true
}

// holdSocket counts one more socket for the client at addr (c.RealIP()),
// or refuses it when the client holds as many as it may. The caller calls
// release when the socket is closed. Loopback clients are not counted.
func (s *Server) holdSocket(addr string) (release func(), err error) {
	key := session.ClientKey(addr)
	if key == "" {
		return func() {}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.perAddr[key]; n >= s.cfg.MaxSocketsPerClient {
		return nil, fault.Errorf(fault.Busy, "this address has %d live connections to this server open, its limit; close a tab or two and try again", n)
	}
	s.perAddr[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.perAddr[key]--; s.perAddr[key] <= 0 {
				delete(s.perAddr, key)
			}
		})
	}, nil
}

func (s *Server) untrack(c *websocket.Conn) {
	s.mu.Lock()
	delete(s.sockets, c)
	s.mu.Unlock()
}

func (s *Server) closeSockets(code websocket.StatusCode, why string) {
	s.mu.Lock()
	conns := make([]*websocket.Conn, 0, len(s.sockets))
	for c := range s.sockets {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close(code, why)
	}
}
