package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/receiver"
)

// maxBody bounds a delivery: the payload limit plus room for the envelope.
const maxBody = engine.MaxPayloadBytes + 4<<10

// gate is the receiver the workers call, served by the harness itself so
// that it can hold each call: a delivery that arrives waits until the
// script lets the receiver decide it (process), and the decision's answer
// waits until the script lets it go back (answer). That is how the check
// plays an ordering on a worker it did not write: the order in which the
// receiver decides, and in which each worker learns the decision, is the
// script's, whatever the workers do.
//
// Each worker has a URL of its own, with a secret path: with one owner
// name for both (same-identity), the URL is what tells A's call from B's.
// Once the script has done with a worker, its gate is opened and its
// later calls (a retry) go straight through.
type gate struct {
	recv   *engine.Receiver
	ctx    context.Context // the case's: a decision is never cut short by a worker hanging up
	tokens map[string]string
	done   chan struct{}  // closed by close: every held call is let go
	calls  sync.WaitGroup // Add under mu while not closed, so close's Wait never races an Add

	mu      sync.Mutex
	open    map[string]bool
	pending map[string][]*call
	arrived map[string]chan struct{} // signalled on each new pending call
	broken  map[string]string        // a call that broke the contract, in words
	count   map[string]int
	infra   error // a decision that failed for the database's sake
	closed  bool  // set by close: a call arriving after it is answered 503 at once
}

// call is one delivery held at the gate.
type call struct {
	label     string
	d         engine.Delivery
	process   chan struct{} // closed: decide it
	processed chan struct{} // closed once decided
	answer    chan struct{} // closed: send the answer back
	rc        engine.Receipt
	err       error
	// handlerFails, set before the answer is let go, answers the call
	// HandlerFailedStatus whatever the receiver decided: the contract's
	// way to tell a worker its handler errored, so that it runs its fail.
	handlerFails bool
	once         sync.Once
	answered     sync.Once
}

func newGate(ctx context.Context, recv *engine.Receiver, labels ...string) (*gate, error) {
	g := &gate{recv: recv, ctx: ctx, tokens: map[string]string{}, done: make(chan struct{}),
		open: map[string]bool{}, pending: map[string][]*call{}, arrived: map[string]chan struct{}{},
		broken: map[string]string{}, count: map[string]int{}}
	for _, l := range labels {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("receiver credential: %w", err)
		}
		g.tokens[hex.EncodeToString(b[:])] = l
		g.arrived[l] = make(chan struct{}, 1)
	}
	return g, nil
}

// url returns the deliveries URL of a worker, on the listener's address.
func (g *gate) url(addr net.Addr, label string) string {
	for tok, l := range g.tokens {
		if l == label {
			return fmt.Sprintf("http://%s/%s/deliveries", addr, tok)
		}
	}
	return ""
}

// ServeHTTP answers POST /<token>/deliveries as server/run/receiver does:
// 200 with the receipt when accepted, 409 with the receipt and a sentence
// when refused as stale, 400 for a delivery that breaks the contract.
func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "the case has ended")
		return
	}
	g.calls.Add(1)
	g.mu.Unlock()
	defer g.calls.Done()
	tok, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	label, ok := g.tokens[tok]
	if !ok || rest != "deliveries" {
		writeError(w, http.StatusNotFound, "not found: POST to FENCELAB_RECEIVER_URL as given")
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "the receiver takes POST only")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return // the worker hung up
	}
	var d engine.Delivery
	switch {
	case len(body) > maxBody:
		err = fmt.Errorf("the delivery is larger than %d bytes", maxBody)
	case json.Unmarshal(body, &d) != nil:
		err = errors.New(`the delivery is not a JSON object {"job_id", "epoch", "owner", "payload"}`)
	default:
		err = d.Validate()
	}
	if err == nil {
		if from := protocol.ResultFrom(d.Payload); from != label {
			err = fmt.Errorf("the delivery's payload names worker %q where the contract wants FENCELAB_WORKER, %q, in its \"worker\" field", from, label)
		}
	}
	if err != nil {
		g.mu.Lock()
		if g.broken[label] == "" {
			g.broken[label] = strings.TrimSuffix(err.Error(), ".")
		}
		g.mu.Unlock()
		g.signal(label)
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}

	c := &call{label: label, d: d, process: make(chan struct{}), processed: make(chan struct{}), answer: make(chan struct{})}
	g.mu.Lock()
	g.count[label]++
	if g.open[label] {
		c.letProcess()
		c.letAnswer()
	} else {
		g.pending[label] = append(g.pending[label], c)
	}
	g.mu.Unlock()
	g.signal(label)

	select {
	case <-c.process:
	case <-g.done:
		writeError(w, http.StatusServiceUnavailable, "the check is over")
		return
	}
	c.rc, c.err = g.recv.Deliver(g.ctx, d)
	if c.err != nil && !errors.Is(c.err, engine.ErrStale) && g.ctx.Err() == nil {
		g.mu.Lock()
		if g.infra == nil {
			g.infra = c.err
		}
		g.mu.Unlock()
	}
	close(c.processed)
	select {
	case <-c.answer:
	case <-g.done:
	case <-r.Context().Done():
		return
	}
	switch {
	case c.handlerFails:
		writeJSON(w, HandlerFailedStatus, handlerFailed{Receipt: c.rc, Error: HandlerFailedError, HandlerFailed: true})
	case errors.Is(c.err, engine.ErrStale):
		writeJSON(w, http.StatusConflict, receiver.Answer{Receipt: c.rc, Error: c.err.Error()})
	case c.err != nil:
		writeError(w, http.StatusInternalServerError, "the receiver could not decide the delivery")
	default:
		writeJSON(w, http.StatusOK, receiver.Answer{Receipt: c.rc})
	}
}

// HandlerFailedStatus is the receiver's answer that tells a worker its
// handler failed (WORKERS.md): it must fail the job, not complete it.
const HandlerFailedStatus = http.StatusInternalServerError

// HandlerFailedError is the answer's error, which a worker may record as
// the job's error.
const HandlerFailedError = "the handler failed: fail the job"

// handlerFailed is the answer that tells a worker its handler failed.
type handlerFailed struct {
	engine.Receipt
	Error         string `json:"error"`
	HandlerFailed bool   `json:"handler_failed"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers with {"error": msg}: no receipt, since nothing was
// decided.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, struct {
		Error string `json:"error"`
	}{msg})
}

func (g *gate) signal(label string) {
	select {
	case g.arrived[label] <- struct{}{}:
	default:
	}
}

func (c *call) letProcess() { c.once.Do(func() { close(c.process) }) }
func (c *call) letAnswer()  { c.answered.Do(func() { close(c.answer) }) }

// failHandler lets the call's answer go back as a failed handler's.
func (c *call) failHandler() {
	c.answered.Do(func() {
		c.handlerFails = true
		close(c.answer)
	})
}

// decide lets the receiver decide the call, and waits until it has.
func (c *call) decide(ctx context.Context) error {
	c.letProcess()
	select {
	case <-c.processed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next takes the worker's next held call, without waiting: nil if none
// has arrived. A call that broke the contract is reported as an error.
func (g *gate) next(label string) (*call, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if b := g.broken[label]; b != "" {
		return nil, &caseError{code: protocol.ErrWorkerContract, msg: fmt.Sprintf("worker %s called the receiver with a delivery it refused: %s", label, b)}
	}
	if q := g.pending[label]; len(q) > 0 {
		c := q[0]
		g.pending[label] = q[1:]
		return c, nil
	}
	return nil, nil
}

// openFor lets every call of the worker through from now on, and the ones
// it holds.
func (g *gate) openFor(label string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open[label] = true
	for _, c := range g.pending[label] {
		c.letProcess()
		c.letAnswer()
	}
	g.pending[label] = nil
}

// deliveries counts the worker's calls that kept the contract.
func (g *gate) deliveries(label string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.count[label]
}

func (g *gate) infraErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.infra
}

// close lets every held call go (answered 503 if never decided) and waits,
// a bounded time, for their handlers to return.
func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	close(g.done)
	waited := make(chan struct{})
	go func() {
		g.calls.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
	}
}
