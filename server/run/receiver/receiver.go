// Package receiver serves the external receiver over HTTP: the system a
// worker calls with its job id and epoch before it commits. The rules live
// in engine.Receiver; this package is only their HTTP face:
//
//   - Handler and Standalone: one receiver's routes (POST /deliveries, GET
//     /deliveries/:job_id, GET /decisions/:job_id), and the standalone
//     service of `fencelab receiver`.
//   - Registry: the receivers of live runs in one server, each under a
//     secret key that routes and let in only by a credential the run gave
//     its own senders. The playground server mounts one under /receiver;
//     Serve starts one on a loopback listener for `fencelab run` and the
//     check.
//   - Client, Post and Call: the other side, reading and delivering over
//     HTTP. None of their errors carries a URL, which may hold a run's key.
package receiver

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/wire"
	"github.com/labstack/echo/v4"
)

// maxBody bounds a delivery: the payload limit plus room for the envelope.
const maxBody = engine.MaxPayloadBytes + 4<<10

// Answer is the JSON body of a delivery's answer: the receipt, and for a
// refusal (HTTP 409) the sentence that says why.
type Answer struct {
	engine.Receipt
	Error string `json:"error,omitempty"`
}

// Handler answers deliveries with a Receiver. OnDecisionFunc, if set, is
// called after every decision (from the request's goroutine; it must not
// block), so a server can put the receiver's decisions in its event log.
type Handler struct {
	ReceiverFunc   func(c echo.Context) (*engine.Receiver, error)
	OnDecisionFunc func(c echo.Context, e protocol.Event)
}

// Register adds the receiver's routes to g:
//
//	POST /deliveries          deliver {job_id, epoch, owner, payload}: 200 accepted, 409 stale
//	GET  /deliveries/:job_id  what the receiver holds for a job
//	GET  /decisions/:job_id   every decision it made for a job, in order
func (h *Handler) Register(g *echo.Group) {
	g.POST("/deliveries", h.deliver)
	g.GET("/deliveries/:job_id", h.held)
	g.GET("/decisions/:job_id", h.decisions)
}

func (h *Handler) deliver(c echo.Context) error {
	body, err := wire.ReadBody(c, maxBody)
	if err != nil {
		return err
	}
	var d engine.Delivery
	if err := wire.DecodeBytes(body, &d); err != nil {
		return err
	}
	// The body is checked as it was sent: decoded, a lone surrogate in the
	// owner is U+FFFD already, and one in the payload reaches Postgres,
	// which refuses it as a data exception that names no field.
	if err := wire.ValidateText("", body); err != nil {
		return err
	}
	if err := d.Validate(); err != nil {
		return err
	}
	r, err := h.ReceiverFunc(c)
	if err != nil {
		return err
	}
	var traces []playground.Trace
	r = playground.WithTrace(r, func(t playground.Trace) { traces = append(traces, t) })
	rc, err := r.Deliver(c.Request().Context(), d)
	if err != nil && !errors.Is(err, engine.ErrStale) {
		return err
	}
	if h.OnDecisionFunc != nil {
		h.OnDecisionFunc(c, DecisionEvent(d, rc, traces))
	}
	if err != nil {
		return c.JSON(http.StatusConflict, Answer{Receipt: rc, Error: err.Error()})
	}
	return c.JSON(http.StatusOK, Answer{Receipt: rc})
}

// target reads the job id of a GET route and finds the receiver.
func (h *Handler) target(c echo.Context) (*engine.Receiver, int64, error) {
	id, err := strconv.ParseInt(c.Param("job_id"), 10, 64)
	if err != nil || id <= 0 {
		return nil, 0, fault.Errorf(fault.Invalid, "job id %s is not a positive integer", strconv.QuoteToASCII(shorten(c.Param("job_id"))))
	}
	r, err := h.ReceiverFunc(c)
	return r, id, err
}

func (h *Handler) held(c echo.Context) error {
	r, id, err := h.target(c)
	if err != nil {
		return err
	}
	held, err := r.Get(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, held)
}

func (h *Handler) decisions(c echo.Context) error {
	r, id, err := h.target(c)
	if err != nil {
		return err
	}
	ds, err := r.Decisions(c.Request().Context(), id)
	if err != nil {
		return err
	}
	if ds == nil {
		ds = []engine.DecisionRecord{}
	}
	return c.JSON(http.StatusOK, ds)
}

// Fixed returns a ReceiverFunc that always answers with r.
func Fixed(r *engine.Receiver) func(echo.Context) (*engine.Receiver, error) {
	return func(echo.Context) (*engine.Receiver, error) { return r, nil }
}

// Standalone returns the standalone receiver service: h's routes at the
// root, plus GET /healthz.
func Standalone(h *Handler, log *slog.Logger) *echo.Echo {
	e := wire.NewEcho(log)
	h.Register(e.Group(""))
	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	return e
}

// DecisionEvent says what the receiver decided, with the upsert it ran,
// as an event of the run whose receiver it is.
func DecisionEvent(d engine.Delivery, rc engine.Receipt, traces []playground.Trace) protocol.Event {
	re := &protocol.ReceiverEvent{Decision: protocol.DecisionOf(rc.Decision), JobID: d.JobID, Epoch: d.Epoch, Owner: d.Owner, From: protocol.ResultFrom(d.Payload),
		HeldEpoch: rc.HeldEpoch, Superseded: rc.Superseded, SupersededOwner: rc.SupersededOwner}
	for _, t := range traces {
		if t.Name == "ReceiverDeliver" || t.Name == "ReaderReceiver" {
			st := protocol.StmtOf(t)
			re.Stmt = &st
		}
	}
	e := protocol.Event{V: protocol.ProtocolVersion, Kind: protocol.KindReceiver, Actor: protocol.ActorReceiver, At: rc.DBTime, Receiver: re}
	protocol.Narrate(&e)
	return e
}

func shorten(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
