package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/receiver"
	"github.com/fencelab/fencelab/server/sandbox"
)

// This file turns what a worker does into events: every statement it runs
// and every call it makes to the receiver, each with the typed fields of
// its kind. The words come from protocol.Narrate.

// emit writes one event on stdout. Safe for concurrent use.
func (w *Worker) emit(e protocol.Event) {
	e.V, e.Actor = protocol.ProtocolVersion, w.cfg.Label
	protocol.Narrate(&e)
	w.outMu.Lock()
	defer w.outMu.Unlock()
	_ = w.out.Encode(e) // stdout gone means the supervisor is gone; nothing to tell
}

// call is one engine call a worker makes, and what it learned.
type call struct {
	op     protocol.Op
	held   *engine.Claim // what the worker holds; filled by a claim
	lease  time.Time     // a renewal's new lease end
	status engine.Status // a failure report: the status the job took
	err    error         // what the engine call returned
	// quietNoJob keeps an empty claim out of the events: an idle worker
	// polls, and one "found no job" says all there is to say.
	quietNoJob bool
}

// run makes an engine call on a Queue that records the statements it runs,
// then reports each statement as an event that carries what the worker
// holds and what the database answered.
func (w *Worker) run(c *call, fn func(q *engine.Queue) error) error {
	var traces []playground.Trace
	q, err := playground.NewQueue(w.pool, engine.QueueConfig{Schema: w.cfg.Schema}, playground.QueueHooks{Broken: w.cfg.Broken, Now: w.now, Trace: func(t playground.Trace) { traces = append(traces, t) }})
	if err != nil {
		return err
	}
	c.err = fn(q)
	if c.quietNoJob && errors.Is(c.err, engine.ErrNoJob) {
		return c.err
	}
	for _, t := range traces {
		w.emit(protocol.Event{Kind: protocol.KindSQL, At: t.DBTime, SQL: w.statement(c, t)})
	}
	return c.err
}

// statement says what one statement of a call came to.
func (w *Worker) statement(c *call, t playground.Trace) *protocol.SQLEvent {
	s := &protocol.SQLEvent{Op: c.op, Result: protocol.ResultOK, Stmt: protocol.StmtOf(t), Owner: w.cfg.Name}
	if h := c.held; h != nil && h.JobID != 0 {
		s.JobID, s.Epoch = h.JobID, protocol.Int64(h.Epoch)
	}
	var fe *engine.FencedError
	switch {
	case t.Err != nil || (t.Rows == 0 && c.err != nil && !errors.Is(c.err, engine.ErrNoJob) && !errors.As(c.err, &fe)):
		s.Result, s.Error = protocol.ResultFailed, failure(c.err)
	case c.op == protocol.OpClaim && t.Rows == 0:
		s.Result = protocol.ResultNoJob
	case c.op == protocol.OpClaim:
		s.LeaseUntil = protocol.Time(c.held.LeaseUntil)
	case t.Rows == 0 && fe != nil:
		s.Result = protocol.ResultFenced
		s.Fenced = &protocol.Fence{RowStatus: protocol.StatusOf(fe.RowStatus), RowOwner: fe.RowOwner, RowEpoch: fe.RowEpoch, Reasons: protocol.FenceReasonsOf(fe.Reasons)}
	case c.op == protocol.OpRenew:
		s.LeaseUntil = protocol.Time(c.lease)
	case c.op == protocol.OpFail:
		s.Status = protocol.StatusOf(c.status)
	}
	return s
}

// failure describes an error for an event as protocol.FailureOf does,
// with the error's own message even when it is an internal one: the
// engine keeps it free of connection strings, and the timeline is where
// the reader sees why a statement failed.
func failure(err error) *protocol.Failure {
	if err == nil {
		return &protocol.Failure{Code: protocol.ErrInternal, Message: "the statement failed"}
	}
	f := protocol.FailureOf(err)
	f.Message = err.Error()
	// A reader's statement refused by Postgres keeps its SQLSTATE: the run
	// reads a statement timeout from it, never from the words.
	var refused *sandbox.Error
	if errors.As(err, &refused) && f.SQLState == "" {
		f.SQLState = refused.SQLState
	}
	return f
}

// deferDelivery says that the delivery is not sent now: it will be written
// to the outbox by the commit, and sent by the relay after it.
func (w *Worker) deferDelivery(d engine.Delivery) {
	body, _ := json.Marshal(d) // a Delivery always encodes
	w.emit(protocol.Event{Kind: protocol.KindCall, Call: &protocol.CallEvent{Result: protocol.DeliveryDeferred, JobID: d.JobID, Epoch: d.Epoch, Owner: d.Owner,
		URL: redactURL(w.cfg.ReceiverURL), Body: string(body)}})
}

// deliver calls the receiver over HTTP with the job id, the epoch held and
// the result, and reports its answer. A refusal is engine.ErrStale. In the
// keyed mode it first looks the job's key up, and does not call when the
// receiver has it already.
func (w *Worker) deliver(ctx context.Context, d engine.Delivery) error {
	body, err := json.Marshal(d)
	if err != nil {
		return err
	}
	ce := &protocol.CallEvent{JobID: d.JobID, Epoch: d.Epoch, Owner: d.Owner, URL: redactURL(w.cfg.ReceiverURL), Body: string(body)}
	if w.cfg.Delivery == experiments.DeliverKeyed {
		held, status, err := w.lookup(ctx, d.JobID)
		if err == nil && status == http.StatusOK {
			ce.Result, ce.HTTPStatus, ce.HeldEpoch = protocol.DeliverySkipped, status, protocol.Int64(held.Epoch)
			w.emit(protocol.Event{Kind: protocol.KindCall, At: held.DBTime, Call: ce})
			return nil
		}
	}
	at, err := receiver.Call(ctx, w.http, w.cfg.ReceiverURL, body, ce)
	w.emit(protocol.Event{Kind: protocol.KindCall, At: at, Call: ce})
	return err
}

// lookup asks the receiver what it holds for a job's key: GET
// <deliveries URL>/<job id>. 404 means nothing yet.
func (w *Worker) lookup(ctx context.Context, jobID int64) (engine.Held, int, error) {
	var h engine.Held
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/%d", w.cfg.ReceiverURL, jobID), nil)
	if err != nil {
		return h, 0, errors.New("the receiver URL is not usable")
	}
	resp, err := w.http.Do(req)
	if err != nil {
		return h, 0, errors.New("the receiver did not answer")
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return h, resp.StatusCode, err
	}
	return h, resp.StatusCode, json.Unmarshal(b, &h)
}

// redactURL keeps a receiver URL's last path element only: the path may
// carry a secret key (the playground's per-run receiver), and events are
// shown to everyone who watches.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the receiver"
	}
	return ".../" + path.Base(u.Path)
}
