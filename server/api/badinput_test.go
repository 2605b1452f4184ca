package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// TestAPI_BadInputOnEveryRoute: every route answers bad input with a 4xx
// JSON error that says what was wrong — never a 5xx — and changes nothing.
func TestAPI_BadInputOnEveryRoute(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	s.cmd(`{"action":"run","ordering":"free-play"}`)
	rcvKey := "not-a-key"
	before := s.snapshot()
	id, tok := s.ID, s.Token
	sp := "/api/sessions/" + id
	const js = "application/json"
	cases := []struct {
		method, path, token, ctype, body string
		want                             int
	}{
		{"POST", "/api/sessions", "", js, `{"x":1}`, 400},
		{"POST", "/api/sessions", "", js, `[]`, 400},
		{"POST", "/api/sessions", "", "text/plain", `hi`, 415},
		{"PUT", "/api/sessions", "", js, `{}`, 405},
		{"GET", "/api/sessions/nope", "", "", "", 404},
		{"GET", "/api/sessions/" + strings.Repeat("a", 70), "", "", "", 404},
		{"GET", sp, "wrong", "", "", 403},
		{"DELETE", sp, "wrong", "", "", 403},
		{"DELETE", "/api/sessions/nope", tok, "", "", 404},
		{"POST", sp + "/commands", tok, js, ``, 400},
		{"POST", sp + "/commands", tok, js, `{`, 400},
		{"POST", sp + "/commands", tok, js, `{"action":"launch"}`, 400},
		{"POST", sp + "/commands", tok, js, `{"action":"step","extra":true}`, 400},
		{"POST", sp + "/commands", tok, js, `{"action":"run","ordering":"zombie-first","lease_ms":1}`, 400},
		{"POST", sp + "/commands", tok, js, `{"action":"run","ordering":"zombie-first","broken":["nope"]}`, 400},
		{"POST", sp + "/commands", tok, js, `{"action":"pause_worker","worker":"Q"}`, 404},
		{"POST", sp + "/commands", tok, js, `{"action":"add_job","payload":{"a":"\u0000"}}`, 400},
		{"POST", sp + "/commands", tok, js, `{"action":"add_job","payload":{"a":"\ud800"}}`, 400},
		{"POST", sp + "/commands", tok, js, `{"action":"run","ordering":"zombie-first","pace_ms":9223372036854775807}`, 400},
		{"POST", sp + "/commands", tok, js, `{"action":"run","ordering":"zombie-first","lease_ms":9223372036854775807}`, 400},
		{"POST", sp + "/commands", tok, js, `{"action":"run","ordering":"clock-skew","skew_ms":9223372036854775807}`, 400},
		{"POST", sp + "/commands", tok, js, `{"action":"pause_worker","worker":"a"}`, 400},
		{"POST", sp + "/commands", tok, js, `{"action":"step"}`, 409},
		{"POST", sp + "/commands", tok, js, `{"action":"add_job","payload":"` + strings.Repeat("x", 70000) + `"}`, 400},
		{"POST", sp + "/commands", tok, js, `{"action":"add_job","payload":"` + strings.Repeat("x", 200000) + `"}`, 413},
		{"POST", sp + "/commands", tok, "text/plain", `{"action":"step"}`, 415},
		{"POST", sp + "/commands", "", js, `{"action":"step"}`, 403},
		{"GET", sp + "/events?since=-1", "", "", "", 400},
		{"GET", sp + "/events?since=abc", "", "", "", 400},
		{"GET", sp + "/events?limit=0", "", "", "", 400},
		{"GET", sp + "/events?limit=20000", "", "", "", 400},
		{"GET", sp + "/events?run=../x", "", "", "", 400},
		{"GET", sp + "/events.ndjson?since=x", "", "", "", 400},
		{"GET", sp + "/runs/zzz", "", "", "", 400},
		{"GET", sp + "/runs/r999", "", "", "", 404},
		{"GET", sp + "/events?run=r999", "", "", "", 404},
		{"GET", sp + "/events?since=9223372036854775807", "", "", "", 400},
		{"GET", sp + "/events.ndjson?run=%00", "", "", "", 400},
		{"GET", sp + "/ws", "", "", "", 426},
		{"GET", sp + "/ws?since=-5", "", "", "", 400},
		{"POST", "/receiver/" + rcvKey + "/deliveries", "", js, `{"job_id":1,"epoch":1,"owner":"a","payload":{}}`, 404},
		{"POST", "/receiver/" + rcvKey + "/deliveries", "", js, `{"job_id":"x"}`, 400},
		{"GET", "/receiver/" + rcvKey + "/deliveries/abc", "", "", "", 400},
		{"GET", "/nowhere", "", "", "", 404},
	}
	for _, c := range cases {
		a := ts.do(c.method, c.path, c.token, c.ctype, c.body)
		if a.Status != c.want {
			t.Errorf("%s %.80s %.60q: %d %s, want %d", c.method, c.path, c.body, a.Status, a.Body, c.want)
			continue
		}
		if c.method != "HEAD" && (a.errText() == "" || strings.Contains(a.errText(), "\n")) {
			t.Errorf("%s %.80s: the error is not one sentence: %s", c.method, c.path, a.Body)
		}
	}
	after := s.snapshot()
	if after.Run.ID != before.Run.ID || len(after.Jobs) != len(before.Jobs) || len(after.Runs) != len(before.Runs) {
		t.Fatalf("bad input changed the session: before %+v, after %+v", before.Run, after.Run)
	}
	for _, e := range s.events(before.LastSeq, "") {
		if e.RunState != nil || (e.Process != nil && e.Process.Change == protocol.ProcStopped) || (e.Row != nil && e.Row.Op == protocol.RowInsert) {
			t.Fatalf("bad input led to an event: %+v", e)
		}
	}
	if a := ts.do("POST", sp+"/commands", tok, js, `{"action":"add_job"}`); a.Status != 200 {
		t.Fatalf("a good command after the bad ones: %d %s", a.Status, a.Body)
	}
}

// TestWS_BadMessages: every bad socket message gets an error frame and
// changes nothing; an oversized one closes the socket with 1009, a flood
// with 1008.
func TestWS_BadMessages(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) { c.MaxMessage = 1024; c.MessageRate = 5 })
	s := ts.newSession()
	ctx := context.Background()
	w, _, err := s.dial(ctx, 0, s.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer w.c.CloseNow()
	w.next(t, "live", 5*time.Second)
	for i, msg := range []string{`hello`, `{}`, `[]`, `{"type":"dance"}`, `{"type":"ping","command":{}}`, `{"type":"command"}`,
		`{"type":"command","id":"1","command":{"action":"nope"}}`, `{"type":"command","command":{"action":"step"}} {}`} {
		if i%4 == 3 {
			time.Sleep(time.Second) // stay under the rate limit
		}
		if err := w.c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		m := <-w.frames
		typ := typeOf(m)
		b, _ := json.Marshal(m)
		if (typ != "error" && typ != "reply") || !strings.Contains(string(b), `"error"`) {
			t.Errorf("message %q: answer %s, want an error", msg, b)
		}
		if typ == "reply" && !strings.Contains(string(b), `"status":400`) {
			t.Errorf("message %q: %s, want status 400", msg, b)
		}
	}
	if err := w.c.Write(ctx, websocket.MessageBinary, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if m := <-w.frames; typeOf(m) != "error" {
		t.Errorf("binary message: %v", m)
	}
	if snap := s.snapshot(); snap.Run != nil {
		t.Fatalf("bad messages started a run: %+v", snap.Run)
	}
	time.Sleep(time.Second)
	w.send(t, map[string]any{"type": "ping", "id": strings.Repeat("p", 2000)})
	if code := w.closeStatus(t, 5*time.Second); code != websocket.StatusMessageTooBig {
		t.Errorf("oversized message: closed with %v, want 1009", code)
	}

	flood, _, err := s.dial(ctx, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer flood.c.CloseNow()
	flood.next(t, "live", 5*time.Second)
	for range 30 {
		if flood.c.Write(ctx, websocket.MessageText, []byte(`{"type":"ping","id":"x"}`)) != nil {
			break
		}
	}
	if code := flood.closeStatus(t, 5*time.Second); code != websocket.StatusPolicyViolation {
		t.Errorf("flood: closed with %v, want 1008", code)
	}
}

// TestAPI_Caps: hitting each cap gives its clear error and nothing else
// breaks.
func TestAPI_Caps(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) {
		c.Limits.MaxSessions = 2
		c.Limits.MaxRuns = 1
		c.Limits.MaxWorkers = 3
		c.Limits.MaxJobs = 2
		c.Limits.MaxStall = time.Second
		c.Limits.MaxLease = 2 * time.Second
	})
	s := ts.newSession()
	other := ts.newSession()
	// Both are used (a command each): neither makes way for a third.
	s.cmd(`{"action":"reset"}`)
	other.cmd(`{"action":"reset"}`)
	a := ts.do("POST", "/api/sessions", "", "", "")
	if a.Status != http.StatusServiceUnavailable || a.Header.Get("Retry-After") == "" || !strings.Contains(a.errText(), "2 sessions") {
		t.Fatalf("third session: %d %s (Retry-After %q)", a.Status, a.Body, a.Header.Get("Retry-After"))
	}
	s.cmd(`{"action":"run","ordering":"free-play","lease_ms":500}`)
	if a := other.try(`{"action":"run","ordering":"zombie-first"}`); a.Status != http.StatusServiceUnavailable || !strings.Contains(a.errText(), "1 runs") {
		t.Fatalf("a second run past max-runs: %d %s", a.Status, a.Body)
	}
	if a := s.try(`{"action":"run","ordering":"zombie-first","lease_ms":5000}`); a.Status != http.StatusBadRequest || !strings.Contains(a.errText(), "lease") {
		t.Fatalf("lease over the server's max: %d %s", a.Status, a.Body)
	}
	if snap := s.snapshot(); snap.Run == nil || snap.Run.Ended != nil {
		t.Fatalf("a refused run ended the live one: %+v", snap.Run)
	}
	s.cmd(`{"action":"add_worker"}`)
	if a := s.try(`{"action":"add_worker"}`); a.Status != http.StatusConflict || !strings.Contains(a.errText(), "3 live workers") {
		t.Fatalf("a fourth worker: %d %s", a.Status, a.Body)
	}
	s.cmd(`{"action":"add_job"}`)
	s.cmd(`{"action":"add_job"}`)
	if a := s.try(`{"action":"add_job"}`); a.Status != http.StatusConflict || !strings.Contains(a.errText(), "2 jobs") {
		t.Fatalf("a third job: %d %s", a.Status, a.Body)
	}
	// The stall cap: a worker frozen past it is killed.
	s.cmd(`{"action":"pause_worker","worker":"C"}`)
	s.waitEvent(5*time.Second, "C killed for stalling too long", func(e protocol.Event) bool {
		return e.Process != nil && e.Actor == "C" && e.Process.Change == protocol.ProcExited && e.Process.Cause == protocol.CauseStallLimit
	})
	// And the run still works.
	rep := s.cmd(`{"action":"verdict"}`)
	if rep.Report == nil || len(rep.Report.Jobs) != 2 {
		t.Fatalf("after the caps, the run's report: %+v", rep.Report)
	}
	// Ending the run frees the slot for the other session.
	s.cmd(`{"action":"reset"}`)
	other.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
}
