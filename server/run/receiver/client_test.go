package receiver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/labtest"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/receiver"
)

// A run's outcome is read through a judge.ReceiverView; the client is one.
var _ judge.ReceiverView = (*receiver.Client)(nil)

func body(t *testing.T, jobID, epoch int64, owner, worker string) []byte {
	t.Helper()
	b, err := json.Marshal(engine.Delivery{JobID: jobID, Epoch: epoch, Owner: owner, Payload: labtest.Payload(worker)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// closedURL is a loopback address nothing listens on any more.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// rawTCP is a loopback TCP server that hands each connection to serve,
// for a receiver that breaks HTTP itself; it returns its URL and host.
func rawTCP(t *testing.T, serve func(net.Conn)) (url, host string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return "http://" + ln.Addr().String(), ln.Addr().String()
}

// answering is a real HTTP server that answers every request with status
// and body: a receiver that misbehaves.
func answering(t *testing.T, status int, contentType, b string) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(b))
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

func TestClient_ReadsWhatTheReceiverHolds(t *testing.T) {
	t.Parallel()
	r, _ := newReceiver(t)
	base := standalone(t, &receiver.Handler{ReceiverFunc: receiver.Fixed(r)})
	mustStatus(t, "epoch 1", deliver(t, base+"/deliveries", "", 4, 1, "worker-a", "A"), 200)
	mustStatus(t, "epoch 2", deliver(t, base+"/deliveries", "", 4, 2, "worker-b", "B"), 200)
	mustStatus(t, "epoch 1 late", deliver(t, base+"/deliveries", "", 4, 1, "worker-a", "A"), 409)

	ctx := context.Background()
	for _, c := range []*receiver.Client{{BaseURL: base}, {BaseURL: base + "/", HTTP: &http.Client{Timeout: 5 * time.Second}}} {
		got, err := c.Get(ctx, 4)
		if err != nil {
			t.Fatalf("Client{%s}.Get: %v", c.BaseURL, err)
		}
		want, _ := heldOf(t, r, 4)
		if got.JobID != 4 || got.Epoch != want.Epoch || got.Owner != want.Owner || got.Accepted != want.Accepted ||
			!bytes.Equal(compact(t, got.Payload), compact(t, want.Payload)) || !got.UpdatedAt.Equal(want.UpdatedAt) {
			t.Errorf("Client{%s}.Get = %+v, the receiver holds %+v", c.BaseURL, got, want)
		}

		ds, err := c.Decisions(ctx, 4)
		if err != nil {
			t.Fatalf("Client{%s}.Decisions: %v", c.BaseURL, err)
		}
		wantDs := decisionsOf(t, r, 4)
		if len(ds) != len(wantDs) || len(ds) != 3 {
			t.Fatalf("Client{%s}.Decisions = %d records, the receiver has %d", c.BaseURL, len(ds), len(wantDs))
		}
		for i := range ds {
			g, w := ds[i], wantDs[i]
			if g.Seq != w.Seq || g.Epoch != w.Epoch || g.Owner != w.Owner || g.Decision != w.Decision || *g.HeldEpoch != *w.HeldEpoch || !g.At.Equal(w.At) {
				t.Errorf("Client{%s}.Decisions[%d] = %+v, want %+v", c.BaseURL, i, g, w)
			}
		}
	}
}

func compact(t *testing.T, raw []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestClient_UnknownJobIsErrJobNotFoundAndNoDecisions(t *testing.T) {
	t.Parallel()
	r, _ := newReceiver(t)
	c := &receiver.Client{BaseURL: standalone(t, &receiver.Handler{ReceiverFunc: receiver.Fixed(r)})}
	ctx := context.Background()
	if _, err := c.Get(ctx, 77); !errors.Is(err, engine.ErrJobNotFound) {
		t.Errorf("Get of an unknown job: %v, want ErrJobNotFound", err)
	}
	ds, err := c.Decisions(ctx, 77)
	if err != nil || len(ds) != 0 {
		t.Errorf("Decisions of an unknown job: %v, %v; want none and no error", ds, err)
	}
}

func TestClient_OtherFailuresAreNotErrJobNotFound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, base := range map[string]string{
		"unreachable":   closedURL(t),
		"a 500":         answering(t, 500, "text/plain", "boom"),
		"a 403":         answering(t, 403, "application/json", `{"error":"only the run's own workers may call its receiver"}`),
		"not JSON":      answering(t, 200, "text/html", "<html>"),
		"a wrong shape": answering(t, 200, "application/json", `{"job_id":"x"}`),
	} {
		c := &receiver.Client{BaseURL: base}
		_, err := c.Get(ctx, 1)
		if err == nil || errors.Is(err, engine.ErrJobNotFound) {
			t.Errorf("%s: Get = %v, want an error that is not ErrJobNotFound", name, err)
		}
		if _, err := c.Decisions(ctx, 1); err == nil || errors.Is(err, engine.ErrJobNotFound) {
			t.Errorf("%s: Decisions = %v, want an error that is not ErrJobNotFound", name, err)
		}
	}
}

// TestClient_ReadsARegistryRunWithItsCredential: the client reads a run
// the registry serves at BaseURL/KEY, with the run's credential, and is
// refused without it.
func TestClient_ReadsARegistryRunWithItsCredential(t *testing.T) {
	t.Parallel()
	reg := serveRegistry(t)
	ru := newRun(t, reg)
	cred := ru.served.Credential()
	mustStatus(t, "deliver", deliver(t, ru.served.URL, bearer(cred), 2, 3, "worker-a", "A"), 200)
	base := strings.TrimSuffix(ru.served.URL, "/deliveries")
	ctx := context.Background()

	c := &receiver.Client{BaseURL: base, HTTP: receiver.WithCredential(&http.Client{}, cred)}
	if h, err := c.Get(ctx, 2); err != nil || h.Epoch != 3 || h.Owner != "worker-a" {
		t.Errorf("Get with the credential = %+v, %v", h, err)
	}
	if ds, err := c.Decisions(ctx, 2); err != nil || len(ds) != 1 || ds[0].Decision != engine.AcceptedFirst {
		t.Errorf("Decisions with the credential = %+v, %v", ds, err)
	}

	anon := &receiver.Client{BaseURL: base}
	_, err := anon.Get(ctx, 2)
	if err == nil || errors.Is(err, engine.ErrJobNotFound) || !strings.Contains(err.Error(), "403") {
		t.Errorf("Get without the credential = %v, want the 403", err)
	}
}

// TestPost_ReportsTheReceiversAnswer: Post's receipt and status are the
// receiver's own; only 200 and 409 are receipts.
func TestPost_ReportsTheReceiversAnswer(t *testing.T) {
	t.Parallel()
	r, _ := newReceiver(t)
	url := standalone(t, &receiver.Handler{ReceiverFunc: receiver.Fixed(r)}) + "/deliveries"
	ctx := context.Background()
	hc := &http.Client{Timeout: 10 * time.Second}

	rc, status, err := receiver.Post(ctx, hc, url, body(t, 6, 2, "worker-b", "B"))
	if err != nil || status != 200 || rc.Decision != engine.AcceptedFirst || rc.JobID != 6 || rc.Epoch != 2 || rc.HeldEpoch != 2 || rc.DBTime.IsZero() {
		t.Errorf("Post epoch 2 = %+v, %d, %v; want 200 accepted-first", rc, status, err)
	}
	rc, status, err = receiver.Post(ctx, hc, url, body(t, 6, 1, "worker-a", "A"))
	if err != nil || status != 409 || rc.Decision != engine.RefusedStale || rc.Epoch != 1 || rc.HeldEpoch != 2 {
		t.Errorf("Post epoch 1 = %+v, %d, %v; want 409 refused-stale with 2 held and no error", rc, status, err)
	}

	rc, status, err = receiver.Post(ctx, hc, url, []byte(`{"job_id":6,"epoch":-1,"owner":"a","payload":{}}`))
	if err == nil || status != 400 || rc.Decision != "" {
		t.Errorf("Post of a bad delivery = %+v, %d, %v; want 400 and an error", rc, status, err)
	} else if want := "the receiver answered HTTP 400: epoch -1 is negative"; err.Error() != want {
		t.Errorf("Post of a bad delivery: %q, want %q", err, want)
	}

	for name, c := range map[string]struct {
		url    string
		status int
		says   string
		prefix bool // says is how the sentence starts
	}{
		"a 500 with a text body":   {answering(t, 500, "text/plain", "panic: boom"), 500, "the receiver answered HTTP 500: Internal Server Error", false},
		"a 503 with a JSON error":  {answering(t, 503, "application/json", `{"error":"the database is unavailable."}`), 503, "the receiver answered HTTP 503: the database is unavailable", false},
		"a 200 that is no receipt": {answering(t, 200, "text/html", "<html>ok</html>"), 200, "the receiver answered HTTP 200 with a body that is not a receipt", false},
		"a 409 that is no receipt": {answering(t, 409, "text/plain", "conflict"), 409, "the receiver answered HTTP 409 with a body that is not a receipt", false},
		"nobody there":             {closedURL(t) + "/deliveries", 0, "the receiver did not answer: ", true},
		"no URL at all":            {"::not a url", 0, "the receiver URL is not usable", false},
	} {
		_, status, err := receiver.Post(ctx, hc, c.url, body(t, 1, 1, "a", "A"))
		if err == nil || status != c.status || (c.prefix && !strings.HasPrefix(err.Error(), c.says)) || (!c.prefix && err.Error() != c.says) {
			t.Errorf("%s: Post = %d, %v; want %d and %q", name, status, err, c.status, c.says)
		}
	}
}

// TestPost_ErrorsNeverCarryTheURL: a run's URL holds its secret key, and
// Post's errors go into events and logs.
func TestPost_ErrorsNeverCarryTheURL(t *testing.T) {
	t.Parallel()
	const key = "s3cretKEYs3cretKEYs3cret"
	dead := closedURL(t)
	host := strings.TrimPrefix(dead, "http://")
	ctx := context.Background()
	hangs, hangsHost := rawTCP(t, func(c net.Conn) { <-t.Context().Done(); c.Close() }) // takes the request, never answers
	hangsUp, hangsUpHost := rawTCP(t, func(c net.Conn) { c.Close() })                   // hangs up at once
	for name, c := range map[string]struct{ url, host string }{
		"nobody listening":         {dead + "/receiver/" + key + "/deliveries", host},
		"a bad URL":                {"http://[" + key + "/deliveries", key},
		"no answer before timeout": {hangs + "/receiver/" + key + "/deliveries", hangsHost},
		"the connection hung up":   {hangsUp + "/receiver/" + key + "/deliveries", hangsUpHost},
	} {
		_, _, err := receiver.Post(ctx, &http.Client{Timeout: 300 * time.Millisecond}, c.url, body(t, 1, 1, "a", "A"))
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if strings.Contains(err.Error(), key) || strings.Contains(err.Error(), c.host) {
			t.Errorf("%s: the error carries the URL: %q", name, err)
		}
	}
}

// TestCall_ReportsTheDecisionFaithfully: the call event says what the
// receiver decided, and a refusal is an *engine.StaleError.
func TestCall_ReportsTheDecisionFaithfully(t *testing.T) {
	t.Parallel()
	r, _ := newReceiver(t)
	url := standalone(t, &receiver.Handler{ReceiverFunc: receiver.Fixed(r)}) + "/deliveries"
	ctx := context.Background()
	hc := &http.Client{}

	// B's epoch 2 is taken.
	ce := &protocol.CallEvent{JobID: 8, Epoch: 2, Owner: "worker-b"}
	at, err := receiver.Call(ctx, hc, url, body(t, 8, 2, "worker-b", "B"), ce)
	if err != nil || ce.Result != protocol.DeliveryAccepted || ce.Decision != protocol.AcceptedFirst || ce.HTTPStatus != 200 ||
		ce.HeldEpoch == nil || *ce.HeldEpoch != 2 || ce.Error != nil {
		t.Errorf("B's call: %v, %+v; want accepted-first holding 2", err, ce)
	}
	held, _ := heldOf(t, r, 8)
	if at.IsZero() || at.After(held.DBTime) {
		t.Errorf("B's call returned time %v, the receiver's clock reads %v after it", at, held.DBTime)
	}

	// A's late epoch 1 is refused: the event says so, the error is a *StaleError.
	ce = &protocol.CallEvent{JobID: 8, Epoch: 1, Owner: "worker-a"}
	at, err = receiver.Call(ctx, hc, url, body(t, 8, 1, "worker-a", "A"), ce)
	var se *engine.StaleError
	if !errors.As(err, &se) || !errors.Is(err, engine.ErrStale) || se.JobID != 8 || se.Epoch != 1 || se.HeldEpoch != 2 {
		t.Errorf("A's call: error %v (%T), want a *StaleError for epoch 1 with 2 held", err, err)
	}
	if ce.Result != protocol.DeliveryRefused || ce.Decision != protocol.RefusedStale || ce.HTTPStatus != 409 ||
		ce.HeldEpoch == nil || *ce.HeldEpoch != 2 || ce.Error != nil || at.IsZero() {
		t.Errorf("A's call: %+v at %v; want refused-stale with 2 held", ce, at)
	}

	// B's retry of epoch 2 is taken again.
	ce = &protocol.CallEvent{JobID: 8, Epoch: 2, Owner: "worker-b"}
	if _, err := receiver.Call(ctx, hc, url, body(t, 8, 2, "worker-b", "B"), ce); err != nil || ce.Decision != protocol.AcceptedSame || ce.Result != protocol.DeliveryAccepted {
		t.Errorf("B's retry: %v, %+v; want accepted-same", err, ce)
	}

	// Nobody there: a failed call, with no decision and no held epoch.
	ce = &protocol.CallEvent{JobID: 8, Epoch: 3, Owner: "worker-c"}
	_, err = receiver.Call(ctx, hc, closedURL(t)+"/deliveries", body(t, 8, 3, "worker-c", "C"), ce)
	if err == nil || errors.Is(err, engine.ErrStale) || ce.Result != protocol.DeliveryFailed || ce.Decision != "" || ce.HeldEpoch != nil ||
		ce.HTTPStatus != 0 || ce.Error == nil || ce.Error.Code != protocol.ErrUnreachable || ce.Error.Message != err.Error() {
		t.Errorf("call to nobody: %v, %+v; want a failure", err, ce)
	}
	if h, _ := heldOf(t, r, 8); h.Epoch != 2 || h.Owner != "worker-b" {
		t.Errorf("the receiver holds %+v, want B's epoch 2", h)
	}
}

// TestWithCredential_AddsTheBearerAndLeavesTheOriginalAlone.
func TestWithCredential_AddsTheBearerAndLeavesTheOriginalAlone(t *testing.T) {
	t.Parallel()
	reg := serveRegistry(t)
	ru := newRun(t, reg)
	cred := ru.served.Credential()

	orig := &http.Client{Timeout: 7 * time.Second}
	if got := receiver.WithCredential(orig, ""); got != orig {
		t.Errorf("an empty credential returned another client")
	}
	withCred := receiver.WithCredential(orig, cred)
	if withCred == orig || withCred.Timeout != orig.Timeout || orig.Transport != nil {
		t.Errorf("WithCredential changed the original or lost its settings: %+v -> %+v", orig, withCred)
	}
	ctx := context.Background()
	if _, status, err := receiver.Post(ctx, withCred, ru.served.URL, body(t, 1, 1, "a", "A")); status != 200 || err != nil {
		t.Errorf("Post with the credential: %d, %v", status, err)
	}
	if _, status, _ := receiver.Post(ctx, orig, ru.served.URL, body(t, 1, 1, "a", "A")); status != 403 {
		t.Errorf("Post with the original client: HTTP %d, want 403", status)
	}
	// A request that already says who it is gets the run's credential.
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+cred {
			t.Errorf("the request's Authorization: %q", got)
		}
	}))
	defer hs.Close()
	req, _ := http.NewRequest("GET", hs.URL, nil)
	req.Header.Set("Authorization", "Bearer someone-else")
	resp, err := withCred.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if req.Header.Get("Authorization") != "Bearer someone-else" {
		t.Errorf("the caller's request was changed: %q", req.Header.Get("Authorization"))
	}
}

// TestClient_ErrorsNeverCarryTheKey: a run's receiver URL holds its secret
// key, and the client's errors say what failed without it, whether the
// receiver is gone, refuses, or answers a job it does not hold.
func TestClient_ErrorsNeverCarryTheKey(t *testing.T) {
	t.Parallel()
	reg := serveRegistry(t)
	ru := newRun(t, reg)
	key := keyOf(t, reg, ru.served)
	ctx := context.Background()
	base := strings.TrimSuffix(ru.served.URL, "/deliveries")
	gone := closedURL(t) + "/receiver/" + key
	for name, c := range map[string]*receiver.Client{
		"without the credential": {BaseURL: base},
		"a job it does not hold": {BaseURL: base, HTTP: receiver.WithCredential(&http.Client{}, ru.served.Credential())},
		"nobody there":           {BaseURL: gone},
		"a URL that is no URL":   {BaseURL: "http://127.0.0.1:1/\x7f" + key},
	} {
		for _, err := range []error{
			func() error { _, err := c.Get(ctx, 404404); return err }(),
			func() error { _, err := c.Decisions(ctx, 404404); return err }(),
		} {
			if err == nil { // the decisions of a job it does not hold are none, no error
				continue
			}
			if strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "127.0.0.1") {
				t.Errorf("%s: the error %q carries the URL", name, err)
			}
		}
	}
}

// TestCall_AnAnswerThatIsNoReceiptSaysWhyInItsCode: a receiver that
// answers, but not with a receipt, was reached: the call's failure names
// the answer's status in the closed set of codes, not "unreachable".
func TestCall_AnAnswerThatIsNoReceiptSaysWhyInItsCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for status, want := range map[int]protocol.ErrorCode{
		http.StatusForbidden:             protocol.ErrForbidden,
		http.StatusBadRequest:            protocol.ErrInvalid,
		http.StatusRequestEntityTooLarge: protocol.ErrTooLarge,
		http.StatusServiceUnavailable:    protocol.ErrUnavailable,
		http.StatusBadGateway:            protocol.ErrUnavailable,
		http.StatusTeapot:                protocol.ErrInvalid,
		http.StatusInternalServerError:   protocol.ErrInternal,
	} {
		url := answering(t, status, "application/json", `{"error":"no."}`)
		ce := &protocol.CallEvent{JobID: 1, Epoch: 1, Owner: "a"}
		_, err := receiver.Call(ctx, &http.Client{}, url, body(t, 1, 1, "a", "A"), ce)
		if err == nil || ce.Result != protocol.DeliveryFailed || ce.HTTPStatus != status || ce.Error == nil || ce.Error.Code != want {
			t.Errorf("HTTP %d: %v, %+v (error %+v); want a failure coded %s", status, err, ce, ce.Error, want)
		}
	}
	// A 200 that is no receipt is no error status: nothing of ours failed
	// (not internal), the receiver's answer was unusable.
	ce := &protocol.CallEvent{JobID: 1, Epoch: 1, Owner: "a"}
	_, err := receiver.Call(ctx, &http.Client{}, answering(t, 200, "text/html", "<html>"), body(t, 1, 1, "a", "A"), ce)
	if err == nil || ce.HTTPStatus != 200 || ce.Error == nil || ce.Error.Code != protocol.ErrUnreachable {
		t.Errorf("a 200 that is no receipt: %v, %+v (error %+v); want a failure coded unreachable", err, ce, ce.Error)
	}
}
