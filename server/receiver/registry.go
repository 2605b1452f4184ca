package receiver

import (
	"crypto/rand"
	"encoding/base64"
	"sync"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/lab"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/labstack/echo/v4"
)

// Registry serves the receivers of live runs, each under a secret key of
// its own: a run's workers deliver to BaseURL/KEY/deliveries, and nobody
// who does not know the key can deliver to that run. The playground server
// mounts it under /receiver; `fencelab run` on a loopback listener of its
// own. Safe for concurrent use.
type Registry struct {
	// BaseURL is where the registry's routes are reached by the workers,
	// such as http://127.0.0.1:8080/receiver.
	BaseURL string

	mu      sync.Mutex
	entries map[string]entry
}

type entry struct {
	r    *engine.Receiver
	emit func(lab.Event)
}

// NewRegistry returns an empty registry reached at baseURL.
func NewRegistry(baseURL string) *Registry {
	return &Registry{BaseURL: baseURL, entries: map[string]entry{}}
}

// Serve makes r reachable under a new key and returns the URL its workers
// deliver to, and the function that stops serving it. Each decision is
// handed to emit as an event.
func (g *Registry) Serve(r *engine.Receiver, emit func(lab.Event)) (url string, stop func()) {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	key := base64.RawURLEncoding.EncodeToString(b)
	g.mu.Lock()
	g.entries[key] = entry{r: r, emit: emit}
	g.mu.Unlock()
	var once sync.Once
	return g.BaseURL + "/" + key + "/deliveries", func() {
		once.Do(func() {
			g.mu.Lock()
			delete(g.entries, key)
			g.mu.Unlock()
		})
	}
}

func (g *Registry) lookup(c echo.Context) (entry, error) {
	g.mu.Lock()
	e, ok := g.entries[c.Param("key")]
	g.mu.Unlock()
	if !ok {
		return entry{}, fault.Errorf(fault.NotFound, "no live run has this receiver")
	}
	return e, nil
}

// Register adds the routes of every served receiver to g, under /:key.
func (g *Registry) Register(grp *echo.Group) {
	h := &Handler{
		ReceiverFunc: func(c echo.Context) (*engine.Receiver, error) {
			e, err := g.lookup(c)
			return e.r, err
		},
		OnDecisionFunc: func(c echo.Context, ev lab.Event) {
			if e, err := g.lookup(c); err == nil && e.emit != nil {
				e.emit(ev)
			}
		},
	}
	h.Register(grp.Group("/:key"))
}
