package receiver

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/wire"
	"github.com/labstack/echo/v4"
)

// Registry serves the receivers of live runs, each under a secret key of
// its own: a run's workers deliver to BaseURL/KEY/deliveries. The key only
// routes; what lets a request in is a credential the run issued to one of
// its own senders (Served.Credential), sent as "Authorization: Bearer …":
// a well-formed delivery without one is refused (403) even with the key.
// (The body is read and held to its shape first, so a malformed one is a
// 4xx of its own whoever sends it, and changes nothing.) The playground
// server mounts it under /receiver; `fencelab run` on a loopback listener
// of its own. Safe for concurrent use.
type Registry struct {
	// BaseURL is where the registry's routes are reached by the workers,
	// such as http://127.0.0.1:8080/receiver.
	BaseURL string

	mu      sync.Mutex
	entries map[string]*entry
}

type entry struct {
	r     *engine.Receiver
	emit  func(protocol.Event)
	mu    sync.Mutex
	creds map[string]bool
}

// NewRegistry returns an empty registry reached at baseURL.
func NewRegistry(baseURL string) *Registry {
	return &Registry{BaseURL: baseURL, entries: map[string]*entry{}}
}

func secret(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Served is one run's receiver as the registry serves it.
type Served struct {
	// URL is where its senders deliver: BaseURL/KEY/deliveries.
	URL  string
	e    *entry
	stop func()
}

// Credential issues a new credential for one sender of the run (a worker,
// the outbox's relay): it goes in the sender's environment, never on a
// command line, and in its requests' Authorization header.
func (s *Served) Credential() string {
	c := secret(24)
	s.e.mu.Lock()
	s.e.creds[c] = true
	s.e.mu.Unlock()
	return c
}

// Stop stops serving the run's receiver: its URL and credentials answer
// 404 from now on. Safe to call more than once.
func (s *Served) Stop() { s.stop() }

// Serve makes r reachable under a new key. Each decision is handed to emit
// as an event.
func (g *Registry) Serve(r *engine.Receiver, emit func(protocol.Event)) *Served {
	key := secret(18)
	e := &entry{r: r, emit: emit, creds: map[string]bool{}}
	g.mu.Lock()
	g.entries[key] = e
	g.mu.Unlock()
	var once sync.Once
	return &Served{URL: g.BaseURL + "/" + key + "/deliveries", e: e, stop: func() {
		once.Do(func() {
			g.mu.Lock()
			delete(g.entries, key)
			g.mu.Unlock()
		})
	}}
}

// lookup finds the receiver of the request's key, if the request carries
// one of that run's credentials.
func (g *Registry) lookup(c echo.Context) (*entry, error) {
	g.mu.Lock()
	e, ok := g.entries[c.Param("key")]
	g.mu.Unlock()
	if !ok {
		return nil, fault.Errorf(fault.NotFound, "no live run has this receiver")
	}
	cred, found := strings.CutPrefix(c.Request().Header.Get(echo.HeaderAuthorization), "Bearer ")
	e.mu.Lock()
	known := found && cred != "" && e.creds[cred]
	e.mu.Unlock()
	if !known {
		return nil, fault.Errorf(fault.Forbidden, "only the run's own workers may call its receiver")
	}
	return e, nil
}

// Register adds the routes of every served receiver to g, under /:key.
func (g *Registry) Register(grp *echo.Group) {
	h := &Handler{
		ReceiverFunc: func(c echo.Context) (*engine.Receiver, error) {
			e, err := g.lookup(c)
			if err != nil {
				return nil, err
			}
			return e.r, nil
		},
		OnDecisionFunc: func(c echo.Context, ev protocol.Event) {
			if e, err := g.lookup(c); err == nil && e.emit != nil {
				e.emit(ev)
			}
		},
	}
	h.Register(grp.Group("/:key"))
}

// Serve starts a loopback HTTP server for a registry of its own, under
// /receiver, for a program with no server of its own (fencelab run, the
// check): the registry, and the function that shuts the server down.
func Serve(log *slog.Logger) (*Registry, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	reg := NewRegistry("http://" + ln.Addr().String() + "/receiver")
	e := wire.NewEcho(log)
	reg.Register(e.Group("/receiver"))
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return reg, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
