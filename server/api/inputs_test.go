package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgcluster"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/receiver"
	"github.com/fencelab/fencelab/server/run/worker"
	"github.com/fencelab/fencelab/server/servertest"
	"github.com/fencelab/fencelab/web"
	"github.com/jackc/pgx/v5/pgxpool"
)

// errorBody is the JSON of every error answer.
type errorBody struct {
	Error  string `json:"error"`
	Code   string `json:"code"`
	Status int    `json:"status"`
}

// refused checks that an answer is an error of the given status and code,
// in one sentence that contains every one of want.
func refused(t *testing.T, what string, a answer, status int, code string, want ...string) {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(a.Body, &e); err != nil || a.Status != status || e.Status != status || e.Code != code {
		t.Errorf("%s: %d %s, want %d with code %s", what, a.Status, a.Body, status, code)
		return
	}
	if e.Error == "" || strings.Contains(e.Error, "\n") {
		t.Errorf("%s: the error is not one sentence: %q", what, e.Error)
	}
	for _, w := range want {
		if !strings.Contains(e.Error, w) {
			t.Errorf("%s: the error %q does not say %q", what, e.Error, w)
		}
	}
}

// wsCommand sends one command over a driver's socket and returns its reply.
func wsCommand(t *testing.T, w *wsClient, id, command string) map[string]json.RawMessage {
	t.Helper()
	w.send(t, map[string]any{"type": "command", "id": id, "command": json.RawMessage(command)})
	for {
		m := w.next(t, "reply", 20*time.Second)
		if string(m["id"]) == strconv.Quote(id) {
			return m
		}
	}
}

// wsRefused checks that a socket's reply is a refusal with the status and
// code, whose error contains every one of want.
func wsRefused(t *testing.T, what string, m map[string]json.RawMessage, status int, code string, want ...string) {
	t.Helper()
	var r struct {
		OK     bool   `json:"ok"`
		Status int    `json:"status"`
		Code   string `json:"code"`
		Error  string `json:"error"`
	}
	b, _ := json.Marshal(m)
	_ = json.Unmarshal(b, &r)
	if r.OK || r.Status != status || r.Code != code {
		t.Errorf("%s over the socket: %s, want %d with code %s", what, b, status, code)
		return
	}
	for _, w := range want {
		if !strings.Contains(r.Error, w) {
			t.Errorf("%s over the socket: the error %q does not say %q", what, r.Error, w)
		}
	}
}

// envOf reads a process's environment (as it started) into a map. Only
// Linux shows it (/proc); elsewhere the test skips, and on Linux a missing
// one is a failure.
func envOf(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil && runtime.GOOS != "linux" {
		t.Skipf("no /proc/%d/environ here: %v", pid, err)
	}
	if err != nil {
		t.Fatalf("read worker %d's environment: %v", pid, err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// post sends a JSON body to a URL, with a bearer credential if there is one.
func post(t *testing.T, url, credential, body string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if credential != "" {
		req.Header.Set("Authorization", "Bearer "+credential)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return answer{Status: resp.StatusCode, Body: buf.Bytes(), Header: resp.Header}
}

// unstorable are JSON payloads with text Postgres cannot keep in jsonb — a
// NUL, or half of a UTF-16 surrogate pair — and where in the payload it is.
var unstorable = []struct{ payload, where string }{
	{`{"a":"\u0000"}`, "payload.a"},
	{`{"a":"x\ud800y"}`, "payload.a"},
	{`{"a":["ok",{"b":"\udc00"}]}`, "payload.a[1].b"},
	{`{"\u0000":1}`, "a key of payload"},
	{`"\ud800"`, "payload"},
	{`{"a":"\ud800\u0041"}`, "payload.a"},
	{`{"a b":"\u0000"}`, `payload["a b"]`},
}

// storable are payloads that look close to those but are fine.
var storable = []string{`{"a":"\\u0000"}`, `{"a":"\ud83d\ude00"}`, `{"a":"caf\u00e9 ☕"}`, `{"a":"\\ud800"}`}

// TestInputs_TextPostgresCannotStoreIsRefusedUpFront: a NUL or a lone
// surrogate in a free-play job's payload, over HTTP and over the socket, or
// in a delivery to a run's receiver or the standalone one, is refused with
// a 400 that names where it is, and changes nothing. Text that only looks
// like it is taken.
func TestInputs_TextPostgresCannotStoreIsRefusedUpFront(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	s.cmd(`{"action":"run","ordering":"free-play"}`)
	jobs := len(s.snapshot().Jobs)
	w, _, err := s.dial(context.Background(), 0, s.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer w.c.CloseNow()
	w.next(t, "live", 5*time.Second)
	for i, c := range unstorable {
		cmd := `{"action":"add_job","payload":` + c.payload + `}`
		refused(t, cmd, s.try(cmd), 400, "invalid", c.where)
		wsRefused(t, cmd, wsCommand(t, w, fmt.Sprint("bad", i), cmd), 400, "invalid", c.where)
		if i%4 == 3 {
			time.Sleep(300 * time.Millisecond) // stay under the socket's message rate
		}
	}
	if n := len(s.snapshot().Jobs); n != jobs {
		t.Fatalf("refused payloads changed the jobs: %d, then %d", jobs, n)
	}
	for _, p := range storable {
		s.cmd(`{"action":"add_job","payload":` + p + `}`)
	}
	if n := len(s.snapshot().Jobs); n != jobs+len(storable) {
		t.Fatalf("storable payloads: %d jobs, want %d", n, jobs+len(storable))
	}

	// The run's receiver, with a worker's own URL and credential.
	var url, cred string
	for _, wk := range s.snapshot().Run.Workers {
		env := envOf(t, wk.Pid)
		url, cred = env[worker.EnvReceiverURL], env[worker.EnvReceiverCredential]
	}
	if url == "" {
		t.Fatal("no worker has a receiver URL")
	}
	deliveries := func(name, base, cred string) {
		for _, c := range unstorable {
			d := `{"job_id":1,"epoch":1,"owner":"mallory","payload":` + c.payload + `}`
			refused(t, name+" "+d, post(t, base, cred, d), 400, "invalid", c.where)
		}
		for _, d := range []string{`{"job_id":1,"epoch":1,"owner":"mal\ud800lory","payload":{}}`, `{"job_id":1,"epoch":1,"owner":"mal\u0000lory","payload":{}}`} {
			refused(t, name+" "+d, post(t, base, cred, d), 400, "invalid", "owner")
		}
	}
	deliveries("the run's receiver", url, cred)
	for _, e := range s.events(0, "") {
		if e.Receiver != nil && strings.HasPrefix(e.Receiver.Owner, "mal") {
			t.Errorf("a refused delivery reached the run's receiver: %+v", e.Receiver)
		}
	}

	// The standalone receiver, in a schema of its own.
	ctx := context.Background()
	schema := pgtest.Schema(t)
	if err := engine.SetupReceiver(ctx, pgtest.Pool(t), schema); err != nil {
		t.Fatal(err)
	}
	rcv, err := engine.NewReceiver(pgtest.Pool(t), engine.ReceiverConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(receiver.Standalone(&receiver.Handler{ReceiverFunc: receiver.Fixed(rcv)}, nil))
	defer hs.Close()
	deliveries("the standalone receiver", hs.URL+"/deliveries", "")
	if a := ts.doURL("GET", hs.URL+"/decisions/1"); a.Status != 200 || string(bytes.TrimSpace(a.Body)) != "[]" {
		t.Fatalf("after refused deliveries the standalone receiver decided: %d %s", a.Status, a.Body)
	}
	for _, p := range storable {
		if a := post(t, hs.URL+"/deliveries", "", `{"job_id":2,"epoch":1,"owner":"b","payload":`+p+`}`); a.Status != 200 {
			t.Errorf("storable delivery %s: %d %s", p, a.Status, a.Body)
		}
	}
}

// doURL is a GET of an absolute URL.
func (ts *testServer) doURL(method, url string) answer {
	ts.t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return answer{Status: resp.StatusCode, Body: buf.Bytes(), Header: resp.Header}
}

// cleanHeaders fails if any header of an answer carries a control byte.
func cleanHeaders(t *testing.T, what string, a answer) {
	t.Helper()
	for k, vs := range a.Header {
		for _, v := range vs {
			if strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f || r > 0x7e }) >= 0 {
				t.Errorf("%s: header %s carries %q", what, k, v)
			}
		}
	}
}

// TestInputs_RunIDsAreCheckedEverywhere: wherever a run id is read — a
// query's run or a path's — one that is not of the form r1, r2, … is a 400,
// an unknown one a 404, and no header ever carries what the client sent.
func TestInputs_RunIDsAreCheckedEverywhere(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) { c.PagesFunc = web.Register(web.Options{}) })
	s := ts.newSession()
	s.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
	s.cmd(`{"action":"step"}`)
	s.cmd(`{"action":"reset"}`)
	sp := "/api/sessions/" + s.ID
	bad := []string{"%00", "R1", "r1%0d%0aX-Evil:%201", "r1.x", "..%2Fr1", "r", "r-1", "r%C3%A9", "r1234567890abc", "%22r1%22"}
	for _, r := range bad {
		for _, path := range []string{sp + "/events?run=" + r, sp + "/events.ndjson?run=" + r, sp + "/runs/" + r, sp + "/runs/" + r + "/transcript.sql", "/s/" + s.ID + "/runs/" + r + "/replay.html"} {
			a := ts.do("GET", path, "", "", "")
			if a.Status == 404 && strings.Contains(path, "%2F") && !strings.Contains(path, "run=") {
				continue // a slash in a path segment routes elsewhere: no such page
			}
			refused(t, path, a, 400, "invalid", "not a run id")
			cleanHeaders(t, path, a)
			if a.Header.Get("Content-Disposition") != "" {
				t.Errorf("%s: refused, yet a download: %q", path, a.Header.Get("Content-Disposition"))
			}
		}
	}
	for _, path := range []string{sp + "/events?run=r999", sp + "/events.ndjson?run=r999", sp + "/runs/r999", sp + "/runs/r999/transcript.sql", "/s/" + s.ID + "/runs/r999/replay.html"} {
		a := ts.do("GET", path, "", "", "")
		refused(t, path, a, 404, "not_found", "r999")
		cleanHeaders(t, path, a)
	}
	for path, file := range map[string]string{
		sp + "/events.ndjson?run=r1":                     "fencelab-" + s.ID[:8] + "-r1.ndjson",
		sp + "/events.ndjson":                            "fencelab-" + s.ID[:8] + ".ndjson",
		sp + "/runs/r1/transcript.sql":                   "fencelab-" + s.ID[:8] + "-r1.sql",
		"/s/" + s.ID + "/runs/r1/replay.html":            "fencelab-" + s.ID[:8] + "-r1.html",
		sp + "/events?run=r1&since=0":                    "",
		sp + "/runs/r1":                                  "",
		sp + "/events?run=r1&since=0&limit=1":            "",
		sp + "/events.ndjson?run=r1&since=1":             "fencelab-" + s.ID[:8] + "-r1.ndjson",
		sp + "/runs/r1/transcript.sql?run=whatever%00it": "fencelab-" + s.ID[:8] + "-r1.sql",
	} {
		a := ts.do("GET", path, "", "", "")
		if a.Status != 200 {
			t.Errorf("%s: %d %s", path, a.Status, a.Body)
			continue
		}
		cleanHeaders(t, path, a)
		if got := a.Header.Get("Content-Disposition"); file != "" && got != `attachment; filename="`+file+`"` {
			t.Errorf("%s: Content-Disposition %q, want the file %s", path, got, file)
		}
	}
}

// msCase is one millisecond field given a value, and what the error says.
type msCase struct{ cmd, want string }

// msCases gives every millisecond field of every command a value that is
// too big for a time.Duration, one beyond int64, one below its least, a
// fraction, an exponent and a string. The server's lease runs from 100 ms
// to 2000 ms, its pace to 10000 ms.
func msCases() []msCase {
	var cs []msCase
	type field struct {
		prefix, name string
		least, most  int64
	}
	for _, f := range []field{
		{`"action":"run","ordering":"zombie-first",`, "pace_ms", 0, 10000},
		{`"action":"pace",`, "pace_ms", 0, 10000},
		{`"action":"run","ordering":"zombie-first",`, "lease_ms", 100, 2000},
		{`"action":"run","ordering":"free-play",`, "lease_ms", 100, 2000},
		{`"action":"matrix",`, "lease_ms", 100, 2000},
		{`"action":"batch","name":"epoch-check",`, "lease_ms", 100, 2000},
		{`"action":"run","ordering":"clock-skew",`, "skew_ms", 0, 3600000},
		{`"action":"add_worker",`, "skew_ms", -3600000, 3600000},
		{`"action":"add_worker",`, "work_ms", 0, 60000},
	} {
		c := func(v string) string { return "{" + f.prefix + `"` + f.name + `":` + v + "}" }
		most := fmt.Sprintf("is more than the most, %d", f.most)
		least := fmt.Sprintf("is less than the least, %d", f.least)
		cs = append(cs,
			msCase{c("9223372036854775807"), f.name + " 9223372036854775807 " + most},
			msCase{c("9223372036854775808"), f.name + " 9223372036854775808 " + most},
			msCase{c("99999999999999999999999"), f.name + " 99999999999999999999999 " + most},
			msCase{c(strconv.FormatInt(f.most+1, 10)), fmt.Sprintf("%s %d %s", f.name, f.most+1, most)},
			msCase{c("-9223372036854775808"), f.name + " -9223372036854775808 " + least},
			msCase{c("-99999999999999999999999"), f.name + " -99999999999999999999999 " + least},
			msCase{c("1.5"), f.name + " 1.5 is not a whole number of milliseconds"},
			msCase{c("1e400"), f.name + " 1e400 is not a whole number of milliseconds"},
			msCase{c("-0.0"), f.name + " -0.0 is not a whole number of milliseconds"},
			msCase{c(`"100"`), f.name + " must be a whole number of milliseconds, not a string"},
			msCase{c(`true`), f.name + " must be a whole number of milliseconds, not a boolean"},
		)
		if f.least >= 0 {
			cs = append(cs, msCase{c("-1"), f.name + " -1 " + least})
		}
		if f.least > 1 {
			cs = append(cs, msCase{c("1"), f.name + " 1 " + least})
		}
	}
	return cs
}

// TestInputs_MillisecondsAreCheckedAgainstTheirLimits: every millisecond
// field of every command, over HTTP and the socket, refuses a value that
// would overflow a time.Duration, is beyond the server's limit, is
// negative where it cannot be, or is not a whole number, in a sentence that
// gives the limit in ms; nothing starts. The limits themselves are taken.
func TestInputs_MillisecondsAreCheckedAgainstTheirLimits(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) { c.Limits.MaxLease = 2 * time.Second })
	s := ts.newSession()
	w, _, err := s.dial(context.Background(), 0, s.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer w.c.CloseNow()
	w.next(t, "live", 5*time.Second)
	for i, c := range msCases() {
		refused(t, c.cmd, s.try(c.cmd), 400, "invalid", c.want)
		if i%7 == 0 { // the socket takes the same commands; a few of them, under its message rate
			wsRefused(t, c.cmd, wsCommand(t, w, fmt.Sprint("ms", i), c.cmd), 400, "invalid", c.want)
		}
	}
	if snap := s.snapshot(); snap.Run != nil || len(snap.Runs) != 0 {
		t.Fatalf("refused commands started a run: %+v", snap.Run)
	}
	s.cmd(`{"action":"run","ordering":"zombie-first","mode":"auto","lease_ms":2000,"pace_ms":10000}`)
	s.cmd(`{"action":"pace","pace_ms":0}`)
	s.cmd(`{"action":"pace","pace_ms":10000}`)
	s.cmd(`{"action":"run","ordering":"clock-skew","mode":"step","lease_ms":100,"skew_ms":3600000}`)
	s.cmd(`{"action":"run","ordering":"free-play","lease_ms":2000}`)
	s.cmd(`{"action":"add_worker","skew_ms":-3600000,"work_ms":60000}`)
	s.cmd(`{"action":"reset"}`)
}

// TestInputs_OriginsKeepTheirScheme: an allowed origin is a scheme and a
// host; a page of the same host under the other scheme may not open the
// socket, a wildcard keeps its scheme and matches subdomains only, and a
// refusal is the API's JSON error.
func TestInputs_OriginsKeepTheirScheme(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) {
		c.AllowOrigins = []string{"https://blog.example.com", "https://*.example.com", "http://localhost:3000", "shop.example.org"}
	})
	s := ts.newSession()
	u := strings.Replace(ts.base, "http", "ws", 1) + "/api/sessions/" + s.ID + "/ws"
	for origin, ok := range map[string]bool{
		"https://blog.example.com":          true,
		"HTTPS://Blog.Example.COM":          true,
		"http://blog.example.com":           false,
		"https://a.example.com":             true,
		"https://a.b.example.com":           true,
		"http://a.example.com":              false,
		"wss://a.example.com":               false,
		"https://example.com":               false,
		"https://evil-example.com":          false,
		"https://example.com.evil.net":      false,
		"https://blog.example.com.evil.net": false,
		"https://blog.example.com:8443":     false,
		"https://evil.net/.example.com":     false,
		"http://localhost:3000":             true,
		"https://localhost:3000":            false,
		"http://localhost:3001":             false,
		"https://shop.example.org":          true, // an entry without a scheme means https
		"http://shop.example.org":           false,
		"null":                              false,
		"https://evil.example.net":          false,
		ts.base:                             true,
		"":                                  true, // not a browser
	} {
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		c, resp, err := websocket.Dial(context.Background(), u, &websocket.DialOptions{HTTPHeader: h})
		if ok != (err == nil) {
			t.Errorf("origin %q: err %v, want allowed=%v", origin, err, ok)
		}
		if c != nil {
			c.CloseNow()
		}
		if !ok && err != nil && resp != nil && resp.Body != nil {
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(resp.Body)
			refused(t, "origin "+origin, answer{Status: resp.StatusCode, Body: buf.Bytes(), Header: resp.Header}, 403, "forbidden", "--allow-origin")
		}
	}
}

// TestInputs_SinceAheadOfTheLogIsBadInput: a since beyond the session's
// last seq is a 400 that says so, on /events, /events.ndjson and the
// socket; a since past 0 the log no longer keeps is still 410, and 4001 on
// the socket (since=0 is every event kept: see TestExports_…).
func TestInputs_SinceAheadOfTheLogIsBadInput(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) { c.Limits.MaxEvents = 60 })
	s := ts.newSession()
	last := s.snapshot().LastSeq
	sp := "/api/sessions/" + s.ID
	for _, since := range []string{strconv.FormatInt(last+1, 10), "9223372036854775807", "4611686018427387904"} {
		want := fmt.Sprintf("since %s is ahead of the log, whose last seq is %d", since, last)
		refused(t, "events since "+since, ts.do("GET", sp+"/events?since="+since, "", "", ""), 400, "invalid", want)
		refused(t, "ndjson since "+since, ts.do("GET", sp+"/events.ndjson?since="+since, "", "", ""), 400, "invalid", want)
		u := strings.Replace(ts.base, "http", "ws", 1) + sp + "/ws?since=" + since
		c, resp, err := websocket.Dial(context.Background(), u, nil)
		if err == nil {
			c.CloseNow()
			t.Errorf("socket since %s: opened, want a 400", since)
			continue
		}
		if resp == nil || resp.Body == nil {
			t.Errorf("socket since %s: %v, with no answer", since, err)
			continue
		}
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		refused(t, "socket since "+since, answer{Status: resp.StatusCode, Body: buf.Bytes()}, 400, "invalid", want)
	}
	for _, since := range []string{"-1", "x", "1.5", "9223372036854775808", "1e3", " 1"} {
		a := ts.do("GET", sp+"/events?since="+strings.ReplaceAll(since, " ", "%20"), "", "", "")
		refused(t, "events since "+since, a, 400, "invalid", "since")
	}
	if a := ts.do("GET", fmt.Sprintf("%s/events?since=%d", sp, last), "", "", ""); a.Status != 200 {
		t.Fatalf("since the last seq: %d %s", a.Status, a.Body)
	}

	// Fill the log past what it keeps: free play with many jobs.
	s.cmd(`{"action":"run","ordering":"free-play","lease_ms":200}`)
	deadline := time.Now().Add(60 * time.Second)
	for a := ts.do("GET", sp+"/events?since=0", "", "", ""); a.Header.Get("X-Fencelab-Dropped-Before") == ""; a = ts.do("GET", sp+"/events?since=0", "", "", "") {
		if time.Now().After(deadline) {
			t.Fatalf("the log still keeps its first events after a minute: %d", a.Status)
		}
		s.try(`{"action":"add_job"}`)
		time.Sleep(20 * time.Millisecond)
	}
	s.cmd(`{"action":"reset"}`)
	refused(t, "events since 1 of a trimmed log", ts.do("GET", sp+"/events?since=1", "", "", ""), 410, "gone")
	refused(t, "ndjson since 1 of a trimmed log", ts.do("GET", sp+"/events.ndjson?since=1", "", "", ""), 410, "gone")
	w, _, err := s.dial(context.Background(), 1, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.c.CloseNow()
	if code := w.closeStatus(t, 5*time.Second); code != 4001 {
		t.Fatalf("socket since 1 of a trimmed log: closed with %v, want 4001", code)
	}
}

// TestInputs_DatabaseDownSaysNoMore: with its database stopped, /readyz is
// 503 {"status":"unavailable"} and nothing else, a run command is 503
// unavailable, and neither an answer nor the server's log carries the
// database's socket path, user or database name.
func TestInputs_DatabaseDownSaysNoMore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl, err := pgcluster.Start(ctx, pgcluster.Options{})
	if errors.Is(err, pgcluster.ErrNoBinaries) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	pcfg, err := pgxpool.ParseConfig(cl.DSN())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	logs := &servertest.LogBuffer{}
	ts := startServer(t, func(c *api.Config) {
		c.Pool, c.DatabaseURL = pool, cl.DSN()
		c.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	if a := ts.do("GET", "/readyz", "", "", ""); a.Status != 200 {
		t.Fatalf("readyz with the database up: %d %s", a.Status, a.Body)
	}
	s := ts.newSession()
	if err := cl.Stop(); err != nil {
		t.Fatal(err)
	}
	// Answers name none of the connection's details; the log may say where
	// the database is, but not who connects to it.
	secrets := []string{"user=", "database=", "dbname=", "password", cl.DSN(), cl.Dir(), ".s.PGSQL", pcfg.ConnConfig.Host}
	credentials := []string{"user=", "database=", "dbname=", "password", cl.DSN(),
		"user " + strconv.Quote(pcfg.ConnConfig.User), "database " + strconv.Quote(pcfg.ConnConfig.Database)}
	leaks := func(what, text string, secrets []string) {
		t.Helper()
		for _, sec := range secrets {
			if sec != "" && strings.Contains(text, sec) {
				t.Errorf("%s carries %q: %s", what, sec, text)
			}
		}
	}
	var a answer
	for range 2 { // a pooled connection that breaks, then a new one that cannot connect
		a = ts.do("GET", "/readyz", "", "", "")
		leaks("readyz's answer", string(a.Body), secrets)
		if a.Status != 503 || string(bytes.TrimSpace(a.Body)) != `{"status":"unavailable"}` {
			t.Errorf("readyz with the database down: %d %s, want 503 {\"status\":\"unavailable\"}", a.Status, a.Body)
		}
	}
	for _, cmd := range []string{`{"action":"run","ordering":"free-play"}`, `{"action":"run","ordering":"zombie-first","mode":"step"}`} {
		a := s.try(cmd)
		refused(t, cmd+" with the database down", a, 503, "unavailable")
		leaks(cmd+"'s answer", string(a.Body), secrets)
	}
	a = ts.do("GET", "/api/sessions/"+s.ID, "", "", "")
	leaks("the session's answer", string(a.Body), secrets)
	for _, e := range s.events(0, "") {
		b, _ := json.Marshal(e)
		if e.Kind == protocol.KindError {
			leaks("an error event", string(b), secrets)
		}
	}
	if !strings.Contains(logs.String(), "readyz") {
		t.Errorf("the log does not say why readyz failed:\n%s", logs.String())
	}
	leaks("the server's log", logs.String(), credentials)
}
