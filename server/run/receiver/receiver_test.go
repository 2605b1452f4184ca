package receiver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/labtest"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/receiver"
	"github.com/fencelab/fencelab/server/wire"
	"github.com/labstack/echo/v4"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// quiet is a logger for the servers under test: a 5xx is logged, and the
// tests read the answer instead.
var quiet = slog.New(slog.DiscardHandler)

// newReceiver returns a receiver over a fresh schema of its own, and the
// schema's name.
func newReceiver(t *testing.T) (*engine.Receiver, string) {
	t.Helper()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	if err := engine.SetupReceiver(ctx, pgtest.Pool(t), schema); err != nil {
		t.Fatal(err)
	}
	r, err := engine.NewReceiver(pgtest.Pool(t), engine.ReceiverConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return r, schema
}

// standalone serves h as `fencelab receiver` does, on 127.0.0.1:0, and
// returns its base URL.
func standalone(t *testing.T, h *receiver.Handler) string {
	t.Helper()
	hs := httptest.NewServer(receiver.Standalone(h, quiet))
	t.Cleanup(hs.Close)
	return hs.URL
}

// answer is one HTTP answer, read whole.
type answer struct {
	Status int
	Header http.Header
	Body   []byte
}

func (a answer) String() string { return fmt.Sprintf("HTTP %d %s", a.Status, bytes.TrimSpace(a.Body)) }

// errorBody decodes an error answer's body.
func (a answer) errorBody(t *testing.T) wire.Body {
	t.Helper()
	var b wire.Body
	if err := json.Unmarshal(a.Body, &b); err != nil {
		t.Fatalf("error answer is not JSON: %v: %s", err, a)
	}
	return b
}

// answerOf decodes a delivery's answer.
func (a answer) answerOf(t *testing.T) receiver.Answer {
	t.Helper()
	var ra receiver.Answer
	if err := json.Unmarshal(a.Body, &ra); err != nil {
		t.Fatalf("delivery answer is not JSON: %v: %s", err, a)
	}
	return ra
}

// do sends one request; credential, if not empty, goes in Authorization.
func do(t *testing.T, method, url, contentType, authorization string, body []byte) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// deliver POSTs a delivery as JSON.
func deliver(t *testing.T, url, authorization string, jobID, epoch int64, owner, worker string) answer {
	t.Helper()
	body, _ := json.Marshal(engine.Delivery{JobID: jobID, Epoch: epoch, Owner: owner, Payload: labtest.Payload(worker)})
	return do(t, "POST", url, "application/json", authorization, body)
}

func mustStatus(t *testing.T, what string, a answer, want int) {
	t.Helper()
	if a.Status != want {
		t.Fatalf("%s: %s, want HTTP %d", what, a, want)
	}
}

// heldOf reads what r holds for a job straight from the receiver, not
// through HTTP.
func heldOf(t *testing.T, r *engine.Receiver, jobID int64) (engine.Held, bool) {
	t.Helper()
	h, err := r.Get(context.Background(), jobID)
	if errors.Is(err, engine.ErrJobNotFound) {
		return h, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return h, true
}

func decisionsOf(t *testing.T, r *engine.Receiver, jobID int64) []engine.DecisionRecord {
	t.Helper()
	ds, err := r.Decisions(context.Background(), jobID)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// recorder keeps the events a Handler or a Registry hands over, from the
// requests' goroutines.
type recorder struct {
	mu     sync.Mutex
	events []protocol.Event
}

func (r *recorder) onDecision(_ echo.Context, e protocol.Event) { r.emit(e) }

func (r *recorder) emit(e protocol.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) all() []protocol.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]protocol.Event(nil), r.events...)
}

func workerOf(t *testing.T, payload json.RawMessage) string {
	t.Helper()
	return protocol.ResultFrom(payload)
}

func TestHandler_NewerEpochReplacesOlder(t *testing.T) {
	t.Parallel()
	r, _ := newReceiver(t)
	base := standalone(t, &receiver.Handler{ReceiverFunc: receiver.Fixed(r)})

	a := deliver(t, base+"/deliveries", "", 1, 1, "worker-a", "A")
	mustStatus(t, "epoch 1", a, 200)
	if got := a.answerOf(t); got.Decision != engine.AcceptedFirst || got.HeldEpoch != 1 || got.Error != "" || got.Superseded != nil {
		t.Errorf("epoch 1: answer %+v, want accepted-first holding 1", got)
	}

	a = deliver(t, base+"/deliveries", "", 1, 2, "worker-b", "B")
	mustStatus(t, "epoch 2", a, 200)
	got := a.answerOf(t)
	if got.Decision != engine.AcceptedNewer || got.HeldEpoch != 2 || got.Superseded == nil || *got.Superseded != 1 || got.SupersededOwner != "worker-a" {
		t.Errorf("epoch 2: answer %+v, want accepted-newer holding 2, superseding worker-a's 1", got)
	}
	if got.DBTime.IsZero() || got.DecisionSeq == 0 {
		t.Errorf("epoch 2: answer %+v has no database time or decision number", got)
	}

	h, ok := heldOf(t, r, 1)
	if !ok || h.Epoch != 2 || h.Owner != "worker-b" || workerOf(t, h.Payload) != "B" {
		t.Errorf("held %+v (found %v), want worker-b's epoch 2 with B's result", h, ok)
	}

	// The GET routes show the same, over HTTP.
	a = do(t, "GET", base+"/deliveries/1", "", "", nil)
	mustStatus(t, "GET held", a, 200)
	var hh engine.Held
	if err := json.Unmarshal(a.Body, &hh); err != nil || hh.Epoch != 2 || hh.Owner != "worker-b" {
		t.Errorf("GET /deliveries/1 = %s, want epoch 2 by worker-b", a)
	}
	a = do(t, "GET", base+"/decisions/1", "", "", nil)
	mustStatus(t, "GET decisions", a, 200)
	var ds []engine.DecisionRecord
	if err := json.Unmarshal(a.Body, &ds); err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].Decision != engine.AcceptedFirst || ds[1].Decision != engine.AcceptedNewer || ds[0].Seq >= ds[1].Seq {
		t.Errorf("GET /decisions/1 = %s, want accepted-first then accepted-newer", a)
	}
}

func TestHandler_OlderEpochIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	r, _ := newReceiver(t)
	rec := &recorder{}
	base := standalone(t, &receiver.Handler{ReceiverFunc: receiver.Fixed(r), OnDecisionFunc: rec.onDecision})

	mustStatus(t, "epoch 2", deliver(t, base+"/deliveries", "", 7, 2, "worker-b", "B"), 200)
	before, _ := heldOf(t, r, 7)

	a := deliver(t, base+"/deliveries", "", 7, 1, "worker-a", "A")
	mustStatus(t, "the zombie's epoch 1", a, 409)
	got := a.answerOf(t)
	if got.Decision != engine.RefusedStale || got.HeldEpoch != 2 || got.Epoch != 1 || got.JobID != 7 {
		t.Errorf("refusal %+v, want refused-stale for epoch 1 with 2 held", got)
	}
	if !strings.Contains(got.Error, "stale epoch 1") || !strings.Contains(got.Error, "holds epoch 2") {
		t.Errorf("refusal's sentence %q does not say why", got.Error)
	}

	after, _ := heldOf(t, r, 7)
	if after.Epoch != 2 || after.Owner != "worker-b" || workerOf(t, after.Payload) != "B" || after.Accepted != before.Accepted || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("after the refusal the receiver holds %+v, want what it held before: %+v", after, before)
	}
	ds := decisionsOf(t, r, 7)
	if len(ds) != 2 || ds[1].Decision != engine.RefusedStale || ds[1].HeldEpoch == nil || *ds[1].HeldEpoch != 2 {
		t.Errorf("decision log %+v, want the refusal logged with 2 held", ds)
	}
	if events := rec.all(); len(events) != 2 || events[1].Receiver == nil || events[1].Receiver.Decision != protocol.RefusedStale {
		t.Errorf("OnDecisionFunc saw %d events, want the acceptance and the refusal: %+v", len(events), events)
	}
}

func TestHandler_SameEpochAgainIsARetry(t *testing.T) {
	t.Parallel()
	r, _ := newReceiver(t)
	base := standalone(t, &receiver.Handler{ReceiverFunc: receiver.Fixed(r)})

	mustStatus(t, "first", deliver(t, base+"/deliveries", "", 3, 4, "worker-a", "A"), 200)
	a := deliver(t, base+"/deliveries", "", 3, 4, "worker-a", "A")
	mustStatus(t, "the retry", a, 200)
	got := a.answerOf(t)
	if got.Decision != engine.AcceptedSame || got.HeldEpoch != 4 || got.Accepted != 2 || got.Error != "" {
		t.Errorf("retry answered %+v, want accepted-same holding 4, taken twice", got)
	}
	if h, _ := heldOf(t, r, 3); h.Epoch != 4 || h.Accepted != 2 {
		t.Errorf("held %+v after a retry, want epoch 4 taken twice", h)
	}
}

// TestHandler_BadInputIsA4xxAndChangesNothing: each body below gets its
// 4xx with a code and one sentence, and none of them reaches the receiver.
func TestHandler_BadInputIsA4xxAndChangesNothing(t *testing.T) {
	t.Parallel()
	r, _ := newReceiver(t)
	rec := &recorder{}
	base := standalone(t, &receiver.Handler{ReceiverFunc: receiver.Fixed(r), OnDecisionFunc: rec.onDecision})

	huge := `"` + strings.Repeat("x", engine.MaxPayloadBytes) + `"` // a payload just over the limit
	cases := []struct {
		name, contentType, body string
		status                  int
		code                    string
		says                    string // a piece of the sentence
	}{
		{"empty body", "application/json", ``, 400, "invalid", "empty"},
		{"malformed JSON", "application/json", `{"job_id":1,"epoch":1,`, 400, "invalid", "not valid JSON"},
		{"not an object", "application/json", `[1,2]`, 400, "invalid", "not valid JSON"},
		{"data after the object", "application/json", `{"job_id":1,"epoch":1,"owner":"a","payload":{}} {}`, 400, "invalid", "after the JSON object"},
		{"unknown field", "application/json", `{"job_id":1,"epoch":1,"owner":"a","payload":{},"lease":5}`, 400, "invalid", "lease"},
		{"job id as a string", "application/json", `{"job_id":"1","epoch":1,"owner":"a","payload":{}}`, 400, "invalid", "job_id"},
		{"job id overflows int64", "application/json", `{"job_id":9223372036854775808,"epoch":1,"owner":"a","payload":{}}`, 400, "invalid", "job_id"},
		{"epoch overflows int64", "application/json", `{"job_id":1,"epoch":99999999999999999999,"owner":"a","payload":{}}`, 400, "invalid", "epoch"},
		{"epoch as a float", "application/json", `{"job_id":1,"epoch":1e30,"owner":"a","payload":{}}`, 400, "invalid", "epoch"},
		{"epoch with a fraction", "application/json", `{"job_id":1,"epoch":1.5,"owner":"a","payload":{}}`, 400, "invalid", "epoch"},
		{"negative epoch", "application/json", `{"job_id":1,"epoch":-1,"owner":"a","payload":{}}`, 400, "invalid", "negative"},
		{"job id zero", "application/json", `{"job_id":0,"epoch":1,"owner":"a","payload":{}}`, 400, "invalid", "job id"},
		{"negative job id", "application/json", `{"job_id":-5,"epoch":1,"owner":"a","payload":{}}`, 400, "invalid", "job id"},
		{"no owner", "application/json", `{"job_id":1,"epoch":1,"payload":{}}`, 400, "invalid", "owner"},
		{"no payload", "application/json", `{"job_id":1,"epoch":1,"owner":"a"}`, 400, "invalid", "payload"},
		{"null payload", "application/json", `{"job_id":1,"epoch":1,"owner":"a","payload":null}`, 400, "invalid", "payload"},
		{"NUL in the owner", "application/json", `{"job_id":1,"epoch":1,"owner":"mal\u0000lory","payload":{}}`, 400, "invalid", "owner"},
		{"NUL in the payload", "application/json", `{"job_id":1,"epoch":1,"owner":"a","payload":{"x":"a\u0000b"}}`, 400, "invalid", "payload"},
		{"NUL in a payload key", "application/json", `{"job_id":1,"epoch":1,"owner":"a","payload":{"a\u0000":1}}`, 400, "invalid", "payload"},
		{"lone surrogate in the owner", "application/json", `{"job_id":1,"epoch":1,"owner":"mal\ud800lory","payload":{}}`, 400, "invalid", "owner"},
		{"lone surrogate in the payload", "application/json", `{"job_id":1,"epoch":1,"owner":"a","payload":["\udc00"]}`, 400, "invalid", "payload"},
		{"raw bytes that are not UTF-8", "application/json", "{\"job_id\":1,\"epoch\":1,\"owner\":\"a\xff\",\"payload\":{}}", 400, "invalid", ""},
		{"payload over the limit, body under it", "application/json", `{"job_id":1,"epoch":1,"owner":"a","payload":` + huge + `}`, 400, "invalid", "limit"},
		{"body over the limit", "application/json", `{"job_id":1,"epoch":1,"owner":"a","payload":"` + strings.Repeat("x", engine.MaxPayloadBytes+8<<10) + `"}`, 413, "too_large", "larger than"},
		{"not JSON's content type", "text/plain", `{"job_id":1,"epoch":1,"owner":"a","payload":{}}`, 415, "unsupported", "Content-Type"},
	}
	for _, c := range cases {
		a := do(t, "POST", base+"/deliveries", c.contentType, "", []byte(c.body))
		if a.Status != c.status {
			t.Errorf("%s: %s, want HTTP %d", c.name, a, c.status)
			continue
		}
		b := a.errorBody(t)
		if string(b.Code) != c.code || b.Status != c.status || b.Error == "" || !strings.Contains(b.Error, c.says) {
			t.Errorf("%s: answered %+v, want code %s and a sentence with %q", c.name, b, c.code, c.says)
		}
	}

	// The GET routes' job id is checked too.
	for _, id := range []string{"0", "-1", "abc", "1.0", "9223372036854775808", "%00", strings.Repeat("9", 5000)} {
		for _, route := range []string{"/deliveries/", "/decisions/"} {
			a := do(t, "GET", base+route+id, "", "", nil)
			if a.Status != 400 {
				t.Errorf("GET %s%.20s: %s, want 400", route, id, a)
				continue
			}
			if b := a.errorBody(t); b.Code != "invalid" || !strings.Contains(b.Error, "not a positive integer") || len(b.Error) > 120 {
				t.Errorf("GET %s%.20s: answered %+v, want one short sentence", route, id, b)
			}
		}
	}

	if h, ok := heldOf(t, r, 1); ok {
		t.Errorf("bad input reached the receiver: it holds %+v", h)
	}
	if ds := decisionsOf(t, r, 1); len(ds) != 0 {
		t.Errorf("bad input reached the receiver's decision log: %+v", ds)
	}
	if n := len(rec.all()); n != 0 {
		t.Errorf("OnDecisionFunc was called %d times for bad input", n)
	}
	// And the receiver still works.
	mustStatus(t, "a good delivery after the bad ones", deliver(t, base+"/deliveries", "", 1, 1, "a", "A"), 200)
}

func TestHandler_UnknownJobIsNotFoundAndItsDecisionsEmpty(t *testing.T) {
	t.Parallel()
	r, _ := newReceiver(t)
	base := standalone(t, &receiver.Handler{ReceiverFunc: receiver.Fixed(r)})
	a := do(t, "GET", base+"/deliveries/42", "", "", nil)
	mustStatus(t, "GET held of an unknown job", a, 404)
	if b := a.errorBody(t); b.Code != "not_found" || !strings.Contains(b.Error, "42") {
		t.Errorf("unknown job: %+v", b)
	}
	a = do(t, "GET", base+"/decisions/42", "", "", nil)
	mustStatus(t, "GET decisions of an unknown job", a, 200)
	if s := string(bytes.TrimSpace(a.Body)); s != "[]" {
		t.Errorf("decisions of an unknown job = %s, want []", s)
	}
}

// TestHandler_SixConcurrentDeliveriesHoldOneRow: the same delivery sent
// six times at once (a worker's retries racing) ends as one held row that
// took all six, one accepted-first and five retries in the log.
func TestHandler_SixConcurrentDeliveriesHoldOneRow(t *testing.T) {
	t.Parallel()
	r, schema := newReceiver(t)
	base := standalone(t, &receiver.Handler{ReceiverFunc: receiver.Fixed(r)})
	body, _ := json.Marshal(engine.Delivery{JobID: 9, Epoch: 3, Owner: "worker-a", Payload: labtest.Payload("A")})

	const n = 6
	start := make(chan struct{})
	statuses := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			resp, err := http.Post(base+"/deliveries", "application/json", bytes.NewReader(body))
			if err != nil {
				errs[i] = err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || statuses[i] != 200 {
			t.Errorf("delivery %d: HTTP %d, %v", i, statuses[i], errs[i])
		}
	}

	var rows int
	if err := pgtest.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".deliveries").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Errorf("%d held rows, want 1", rows)
	}
	if h, _ := heldOf(t, r, 9); h.Epoch != 3 || h.Accepted != n {
		t.Errorf("held %+v, want epoch 3 taken %d times", h, n)
	}
	count := map[engine.Decision]int{}
	for _, d := range decisionsOf(t, r, 9) {
		count[d.Decision]++
	}
	if count[engine.AcceptedFirst] != 1 || count[engine.AcceptedSame] != n-1 || len(count) != 2 {
		t.Errorf("decisions %v, want 1 accepted-first and %d accepted-same", count, n-1)
	}
}

func TestHandler_DecisionEventSaysWhatTheReceiverDidAndTheSQL(t *testing.T) {
	t.Parallel()
	r, _ := newReceiver(t)
	rec := &recorder{}
	base := standalone(t, &receiver.Handler{ReceiverFunc: receiver.Fixed(r), OnDecisionFunc: rec.onDecision})

	mustStatus(t, "A's epoch 1", deliver(t, base+"/deliveries", "", 5, 1, "worker-a", "A"), 200)
	a := deliver(t, base+"/deliveries", "", 5, 2, "worker-b", "B")
	mustStatus(t, "B's epoch 2", a, 200)
	rc := a.answerOf(t)

	events := rec.all()
	if len(events) != 2 {
		t.Fatalf("%d events, want 2", len(events))
	}
	labtest.Events(t, events)
	e := events[1]
	if e.Kind != protocol.KindReceiver || e.Actor != protocol.ActorReceiver || e.Receiver == nil {
		t.Fatalf("event %+v is not the receiver's", e)
	}
	re := e.Receiver
	if re.Decision != protocol.AcceptedNewer || re.JobID != 5 || re.Epoch != 2 || re.Owner != "worker-b" || re.From != "B" ||
		re.HeldEpoch != 2 || re.Superseded == nil || *re.Superseded != 1 || re.SupersededOwner != "worker-a" {
		t.Errorf("receiver event %+v, want B's accepted-newer over A's 1", re)
	}
	if !e.At.Equal(rc.DBTime) {
		t.Errorf("event at %v, the answer's database time %v", e.At, rc.DBTime)
	}
	if re.Stmt == nil || re.Stmt.Name != "ReceiverDeliver" || !strings.Contains(re.Stmt.SQL, "ON CONFLICT") {
		t.Errorf("event's statement %+v, want the upsert that ran", re.Stmt)
	}
}

// TestHandler_AReceiverFuncsRefusalIsAnswered: whatever ReceiverFunc
// refuses with is the answer, and nothing is delivered.
func TestHandler_AReceiverFuncsRefusalIsAnswered(t *testing.T) {
	t.Parallel()
	base := standalone(t, &receiver.Handler{ReceiverFunc: func(echo.Context) (*engine.Receiver, error) {
		return nil, engine.ErrUnavailable
	}})
	a := deliver(t, base+"/deliveries", "", 1, 1, "a", "A")
	mustStatus(t, "delivery to an unavailable receiver", a, 503)
	if a.Header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	mustStatus(t, "GET held", do(t, "GET", base+"/deliveries/1", "", "", nil), 503)
	mustStatus(t, "GET decisions", do(t, "GET", base+"/decisions/1", "", "", nil), 503)
}

func TestStandalone_Healthz(t *testing.T) {
	t.Parallel()
	r, _ := newReceiver(t)
	base := standalone(t, &receiver.Handler{ReceiverFunc: receiver.Fixed(r)})
	a := do(t, "GET", base+"/healthz", "", "", nil)
	mustStatus(t, "healthz", a, 200)
	if s := string(bytes.TrimSpace(a.Body)); s != `{"status":"ok"}` {
		t.Errorf("healthz = %s", s)
	}
	a = do(t, "GET", base+"/nowhere", "", "", nil)
	mustStatus(t, "an unknown route", a, 404)
	if b := a.errorBody(t); b.Code != "not_found" {
		t.Errorf("unknown route answered %+v", b)
	}
}
