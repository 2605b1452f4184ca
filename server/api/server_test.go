package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/child"
	"github.com/fencelab/fencelab/server/run/receiver"
)

// TestAPI_TheArticlesOrderings runs both orderings through the API, auto
// and step by step, and checks the article's table.
func TestAPI_TheArticlesOrderings(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	want := map[experiments.Ordering]experiments.Call{experiments.NewOwnerFirst: experiments.CallRejected, experiments.ZombieFirst: experiments.CallAcceptedThenSuperseded}
	for _, o := range []experiments.Ordering{experiments.NewOwnerFirst, experiments.ZombieFirst} {
		for _, mode := range []string{"auto", "step"} {
			t.Run(string(o)+"/"+mode, func(t *testing.T) {
				t.Parallel()
				s := ts.newSession()
				r := s.cmd(fmt.Sprintf(`{"action":"run","ordering":%q,"mode":%q,"lease_ms":300,"pace_ms":0}`, o, mode))
				var out protocol.Outcome
				if mode == "step" {
					steps := 0
					for {
						res := s.cmd(`{"action":"step"}`)
						steps++
						if res.Done {
							out = *res.Outcome
							break
						}
						if steps > 20 {
							t.Fatal("the run never ended")
						}
					}
					if sc, _ := experiments.Script(o); steps != len(sc.Steps) {
						t.Errorf("%d steps, want %d", steps, len(sc.Steps))
					}
				} else {
					out = s.verdictOf(r.Run, 30*time.Second)
				}
				if out.ZombieReceiverCall != want[o] || out.ZombieCommit != experiments.CallRejected || !out.Safe ||
					out.Final.Epoch != 2 || out.Final.ResultFrom != "B" || out.Receiver.PayloadFrom != "B" || out.Receiver.Epoch != 2 {
					t.Fatalf("outcome = %+v", out)
				}
				snap := s.snapshot()
				if snap.Run == nil || snap.Run.Ended == nil || snap.Run.Outcome == nil || !snap.Run.Outcome.Safe {
					t.Fatalf("snapshot after the run: %+v", snap.Run)
				}
			})
		}
	}
}

// TestAPI_CrashBeforeCommit: a worker killed between its receiver call and
// its commit; the lease runs out; the next owner delivers a higher epoch.
func TestAPI_CrashBeforeCommit(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	r := s.cmd(`{"action":"run","ordering":"crash-before-commit","mode":"auto","lease_ms":300,"pace_ms":0}`)
	o := s.verdictOf(r.Run, 30*time.Second)
	if o.ZombieReceiverCall != experiments.CallAcceptedThenSuperseded || o.ZombieCommit != experiments.CallNotAttempted ||
		o.Receiver.Epoch != 2 || o.Receiver.PayloadFrom != "B" || !o.Safe {
		t.Fatalf("outcome = %+v", o)
	}
	s.waitEvent(time.Second, "A killed by SIGKILL, by the script", func(e protocol.Event) bool {
		return e.Process != nil && e.Actor == "A" && e.Process.Change == protocol.ProcExited && e.Process.Signal == "SIGKILL" &&
			e.Process.State == protocol.StateKilled && e.Process.Cause == protocol.CauseScript
	})
	s.waitEvent(time.Second, "the receiver accepting epoch 2 over 1", func(e protocol.Event) bool {
		return e.Receiver != nil && e.Receiver.Decision == protocol.AcceptedNewer && e.Receiver.Epoch == 2 &&
			e.Receiver.Superseded != nil && *e.Receiver.Superseded == 1
	})
}

// TestAPI_FreePlay_PauseReallyStopsKillLetsAnotherFinish pauses a worker
// and reads /proc to see it stopped, resumes it, then kills the worker
// holding a job: its lease runs out and another worker finishes the job.
func TestAPI_FreePlay_PauseReallyStopsKillLetsAnotherFinish(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	s.cmd(`{"action":"run","ordering":"free-play","lease_ms":400}`)
	snap := s.snapshot()
	if len(snap.Run.Workers) != 2 {
		t.Fatalf("free play starts with %d workers, want 2", len(snap.Run.Workers))
	}
	a := snap.Run.Workers[0]
	s.cmd(`{"action":"pause_worker","worker":"A"}`)
	if st := child.State(a.Pid); st != 'T' {
		t.Fatalf("after pause, /proc/%d says %q, want T (stopped)", a.Pid, st)
	}
	if w := s.snapshot().Run.Workers[0]; !w.Frozen || w.State != protocol.StateStopped || w.Letter != "T" {
		t.Fatalf("the API says %+v", w)
	}
	s.cmd(`{"action":"resume_worker","worker":"A"}`)
	if st := child.State(a.Pid); st == 'T' || st == 0 {
		t.Fatalf("after resume, /proc/%d says %q", a.Pid, st)
	}
	if a := s.try(`{"action":"resume_worker","worker":"A"}`); a.Status != http.StatusConflict {
		t.Fatalf("resuming a running worker: %d %s", a.Status, a.Body)
	}

	// Long work, so the holder is killed before it delivers.
	s.cmd(`{"action":"add_worker","work_ms":2500}`)
	s.cmd(`{"action":"pause_worker","worker":"A"}`)
	s.cmd(`{"action":"pause_worker","worker":"B"}`)
	s.cmd(`{"action":"add_job"}`)
	claim := s.waitEvent(10*time.Second, "C claims the job", func(e protocol.Event) bool {
		return e.SQL != nil && e.SQL.Op == protocol.OpClaim && e.SQL.Result == protocol.ResultOK && e.Actor == "C"
	})
	s.cmd(`{"action":"kill_worker","worker":"C"}`)
	s.cmd(`{"action":"resume_worker","worker":"A"}`)
	s.cmd(`{"action":"resume_worker","worker":"B"}`)
	// Any lease event of the job first, then what it says: a wrong one is
	// named with every lease and claim event the run told (a CI run once
	// saw none that matched, and said nothing more).
	// C's epoch is the one its claim returned: a frozen worker's claim
	// already sent runs in Postgres all the same, so A may have held the
	// job first (a -race run saw it), and its lease's end comes first.
	held := *claim.SQL.Epoch
	lease := s.waitEvent(10*time.Second, "of the job's lease", func(e protocol.Event) bool {
		return e.Lease != nil && e.Lease.JobID == claim.SQL.JobID && e.Lease.Epoch == held
	})
	if l := lease.Lease; l.Change != protocol.LeaseExpired || l.Holder != "C" {
		var told []string
		for _, e := range s.events(0, "") {
			if e.Lease != nil || (e.SQL != nil && e.SQL.Op == protocol.OpClaim) || e.Process != nil {
				b, _ := json.Marshal(e)
				told = append(told, string(b))
			}
		}
		t.Fatalf("the job's lease event is %+v, want it expired at epoch %d held by C; the run told:\n%s", *l, held, strings.Join(told, "\n"))
	}
	done := s.waitEvent(20*time.Second, "another worker committing at epoch 2", func(e protocol.Event) bool {
		return e.SQL != nil && e.SQL.Op == protocol.OpComplete && e.SQL.Result == protocol.ResultOK && e.SQL.JobID == claim.SQL.JobID
	})
	if *done.SQL.Epoch != held+1 || done.Actor == "C" {
		t.Fatalf("job finished by %s at epoch %d", done.Actor, *done.SQL.Epoch)
	}
	res := s.cmd(`{"action":"finish"}`)
	if res.Report == nil || !res.Report.Safe {
		t.Fatalf("report = %+v", res.Report)
	}
	var rcv string
	for _, j := range res.Report.Jobs {
		if j.JobID == claim.SQL.JobID {
			rcv = j.ReceiverFrom
		}
	}
	if rcv != done.Actor {
		t.Fatalf("the receiver holds %q's delivery, want %s's", rcv, done.Actor)
	}
}

// collect reads event frames until n events with seq > after are seen.
func collect(t *testing.T, w *wsClient, upTo int64, timeout time.Duration) []int64 {
	t.Helper()
	var seqs []int64
	deadline := time.After(timeout)
	for {
		select {
		case m, ok := <-w.frames:
			if !ok {
				return seqs
			}
			if typeOf(m) == "event" {
				e := eventOf(m)
				seqs = append(seqs, e.Seq)
				if e.Seq >= upTo {
					return seqs
				}
			}
		case <-deadline:
			t.Fatalf("timed out at %v", seqs[max(0, len(seqs)-3):])
		}
	}
}

// TestWS_DroppedSocketResumesWithNoGapAndNoDuplicate drops the socket in
// the middle of a run and reconnects from the last seq seen.
func TestWS_DroppedSocketResumesWithNoGapAndNoDuplicate(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	ctx := context.Background()
	w, _, err := s.dial(ctx, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	w.next(t, "hello", 5*time.Second)
	w.next(t, "live", 5*time.Second)
	r := s.cmd(`{"action":"run","ordering":"zombie-first","mode":"auto","lease_ms":400,"pace_ms":50}`)
	var seen []int64
	for len(seen) < 12 {
		m := w.next(t, "event", 10*time.Second)
		seen = append(seen, eventOf(m).Seq)
	}
	w.c.CloseNow() // drop it mid-run
	time.Sleep(300 * time.Millisecond)
	w2, _, err := s.dial(ctx, seen[len(seen)-1], "")
	if err != nil {
		t.Fatal(err)
	}
	defer w2.c.CloseNow()
	s.verdictOf(r.Run, 30*time.Second)
	last := s.snapshot().LastSeq
	seen = append(seen, collect(t, w2, last, 10*time.Second)...)
	for i, seq := range seen {
		if seq != int64(i+1) {
			t.Fatalf("after the reconnect, seq %d at position %d: a gap or a duplicate (%v)", seq, i, seen)
		}
	}
	// The log may have grown since (the run's end is announced after its
	// verdict); what the socket saw must be the log's first events, all of them.
	all := s.events(0, "")
	if int64(len(seen)) != last || len(all) < len(seen) {
		t.Fatalf("socket saw %d events up to seq %d; the log has %d", len(seen), last, len(all))
	}
	for i := range seen {
		if all[i].Seq != seen[i] {
			t.Fatalf("socket saw seq %d where the log has %d", seen[i], all[i].Seq)
		}
	}
}

// TestWS_SlowReaderIsCutOffOthersKeepPace floods a session's log while one
// client reads nothing: it is closed with 1008 and can resume; a reading
// client sees every event meanwhile.
func TestWS_SlowReaderIsCutOffOthersKeepPace(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) {
		c.Limits.SocketBuffer = 32
		c.Limits.MaxSessionMB = 64 // 20,000 events of 1 KB, all kept: the resume below reads them
	})
	s := ts.newSession()
	ctx := context.Background()
	u := strings.Replace(ts.base, "http", "ws", 1) + "/api/sessions/" + s.ID + "/ws?since=0"
	slow, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.CloseNow()
	fast, _, err := s.dial(ctx, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer fast.c.CloseNow()
	fast.next(t, "live", 5*time.Second)
	sess, _ := ts.Sessions.Get(s.ID)
	const n, batch = 20000, 16
	big := strings.Repeat("x", 400)
	var seqs []int64
	for i := 0; i < n; i += batch {
		// Appends come in batches the reading client keeps up with, as a
		// run's events do; the slow one reads nothing at all.
		for j := range batch {
			sess.Log.Append(protocol.Event{V: protocol.ProtocolVersion, Kind: protocol.KindNote, Actor: protocol.ActorRunner, Text: fmt.Sprint(i+j, big),
				Note: &protocol.NoteEvent{Code: protocol.NoteLog, Line: big}})
		}
		seqs = append(seqs, collect(t, fast, int64(i+batch), 10*time.Second)...)
	}
	if len(seqs) != n {
		t.Fatalf("the reading client saw %d of %d events", len(seqs), n)
	}
	// The slow client: read until the server closes it.
	var got int64
	var closeErr error
	for {
		_, b, err := slow.Read(ctx)
		if err != nil {
			closeErr = err
			break
		}
		var m map[string]json.RawMessage
		_ = json.Unmarshal(b, &m)
		if typeOf(m) == "event" {
			got = eventOf(m).Seq
		}
	}
	// 1008 when the close frame gets through; when the slow client has
	// read nothing for longer than the server's write timeout, its TCP
	// buffer is full and nothing more can reach it: the connection is then
	// closed without a frame. Either way it was cut off, and resumes below.
	if code := websocket.CloseStatus(closeErr); code != websocket.StatusPolicyViolation && code != -1 {
		t.Fatalf("slow client closed with %v, want 1008 or an abrupt close", closeErr)
	}
	if got >= n {
		t.Fatalf("the slow client was never cut off (saw %d)", got)
	}
	// And it resumes where it was.
	again, _, err := s.dial(ctx, got, "")
	if err != nil {
		t.Fatal(err)
	}
	defer again.c.CloseNow()
	rest := collect(t, again, n, 30*time.Second)
	if len(rest) == 0 {
		t.Fatalf("resumed from %d and saw nothing", got)
	}
	if rest[0] != got+1 || rest[len(rest)-1] != n {
		t.Fatalf("resumed from %d and saw %d..%d", got, rest[0], rest[len(rest)-1])
	}
}

// TestAPI_ViewerCannotDrive: no token and a wrong token are refused, over
// HTTP and over the socket, and nothing happens.
func TestAPI_ViewerCannotDrive(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	other := ts.newSession()
	path := "/api/sessions/" + s.ID + "/commands"
	body := `{"action":"run","ordering":"zombie-first"}`
	for _, tok := range []string{"", "wrong", other.Token, s.Token + "x"} {
		a := ts.do("POST", path, tok, "application/json", body)
		if a.Status != http.StatusForbidden || a.errText() == "" {
			t.Errorf("token %q: %d %s, want 403 with a reason", tok, a.Status, a.Body)
		}
	}
	if a := ts.do("DELETE", "/api/sessions/"+s.ID, "", "", ""); a.Status != http.StatusForbidden {
		t.Errorf("delete without a token: %d", a.Status)
	}
	if a := ts.do("GET", "/api/sessions/"+s.ID, "nope", "", ""); a.Status != http.StatusForbidden {
		t.Errorf("snapshot with a wrong token: %d", a.Status)
	}
	if snap := s.snapshot(); snap.Run != nil {
		t.Fatalf("a refused command started a run: %+v", snap.Run)
	}
	// A watcher's socket gets a refusal for a command, and the run does not start.
	ctx := context.Background()
	w, _, err := s.dial(ctx, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.c.CloseNow()
	w.next(t, "live", 5*time.Second)
	w.send(t, map[string]any{"type": "command", "id": "x", "command": map[string]any{"action": "run", "ordering": "zombie-first"}})
	m := w.next(t, "reply", 5*time.Second)
	var reply struct {
		OK     bool
		Status int
		Error  string
	}
	b, _ := json.Marshal(m)
	_ = json.Unmarshal(b, &reply)
	if reply.OK || reply.Status != 403 || reply.Error == "" {
		t.Fatalf("viewer's command reply: %s", b)
	}
	if _, resp, err := s.dial(ctx, 0, "wrong-token"); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("socket with a wrong token: %v %v", err, resp)
	}
	if snap := s.snapshot(); snap.Run != nil {
		t.Fatalf("a viewer started a run: %+v", snap.Run)
	}
	// The driver's socket can drive.
	d, _, err := s.dial(ctx, 0, s.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer d.c.CloseNow()
	hello := d.next(t, "hello", 5*time.Second)
	if string(hello["role"]) != `"driver"` {
		t.Fatalf("driver hello: %v", hello)
	}
	d.send(t, map[string]any{"type": "command", "id": "go", "command": map[string]any{"action": "run", "ordering": "free-play"}})
	if m := d.next(t, "reply", 20*time.Second); string(m["ok"]) != "true" {
		t.Fatalf("driver's command: %v", m)
	}
}

func TestWS_CrossOriginIsRefusedUnlessAllowed(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) { c.AllowOrigins = []string{"blog.example.com"} })
	s := ts.newSession()
	u := strings.Replace(ts.base, "http", "ws", 1) + "/api/sessions/" + s.ID + "/ws"
	for origin, ok := range map[string]bool{"https://evil.example.net": false, "https://blog.example.com": true, ts.base: true} {
		h := http.Header{}
		h.Set("Origin", origin)
		c, resp, err := websocket.Dial(context.Background(), u, &websocket.DialOptions{HTTPHeader: h})
		if ok != (err == nil) {
			t.Errorf("origin %s: err %v (resp %v), want allowed=%v", origin, err, resp, ok)
		}
		if c != nil {
			c.CloseNow()
		}
	}
}

// TestShutdown_ReapsWorkersAndDropsSchemas shuts an in-process server down
// in the middle of a run (the black-box SIGTERM and SIGKILL cases are in
// cmd/fencelab): no worker survives, no schema of this server is left.
func TestShutdown_ReapsWorkersAndDropsSchemas(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	s.cmd(`{"action":"run","ordering":"free-play"}`)
	s.cmd(`{"action":"pause_worker","worker":"A"}`)
	other := ts.newSession()
	other.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":5000}`)
	other.cmd(`{"action":"step"}`)
	other.cmd(`{"action":"step"}`) // A is frozen now
	w, _, err := s.dial(context.Background(), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	w.next(t, "live", 5*time.Second)
	var pids []int
	for _, x := range []*sess{s, other} {
		for _, w := range x.snapshot().Run.Workers {
			pids = append(pids, w.Pid)
		}
	}
	prefix := "fl_" + ts.Sessions.Instance() + "_"
	count := func() int {
		var n int
		if err := pgtest.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)", prefix).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 4 {
		t.Fatalf("%d schemas of this server before shutdown, want 4 (two runs)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if st := child.State(pid); st != 0 && st != 'Z' {
			t.Errorf("worker pid %d is still there (%c) after Shutdown", pid, st)
		}
	}
	if n := count(); n != 0 {
		t.Errorf("%d schemas of this server are left after Shutdown", n)
	}
	if code := w.closeStatus(t, 5*time.Second); code != websocket.StatusGoingAway {
		t.Errorf("the socket was closed with %v, want 1001 going away", code)
	}
}

// TestExternalReceiver points the server at a standalone receiver (another
// service with its own schema) instead of its built-in one: the workers
// deliver there, and the outcome is read from it over HTTP.
func TestExternalReceiver(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	rs := judge.Schemas{Jobs: pgtest.Schema(t), Receiver: pgtest.Schema(t)}
	if err := judge.Setup(ctx, pool, rs); err != nil {
		t.Fatal(err)
	}
	rcv, _ := engine.NewReceiver(pool, engine.ReceiverConfig{Schema: rs.Receiver})
	ext := httptest.NewServer(receiver.Standalone(&receiver.Handler{ReceiverFunc: receiver.Fixed(rcv)}, slog.New(slog.DiscardHandler)))
	defer ext.Close()
	ts := startServer(t, func(c *api.Config) { c.ExternalReceiver = ext.URL })
	s := ts.newSession()
	r := s.cmd(`{"action":"run","ordering":"zombie-first","mode":"auto","lease_ms":300,"pace_ms":0}`)
	o := s.verdictOf(r.Run, 30*time.Second)
	if !o.Safe || o.ZombieReceiverCall != experiments.CallAcceptedThenSuperseded || o.Receiver.PayloadFrom != "B" || o.Receiver.Epoch != 2 {
		t.Fatalf("outcome via the standalone receiver: %+v", o)
	}
	// The deliveries are in the standalone receiver's own table.
	held, err := rcv.Get(ctx, o.JobID)
	if err != nil || held.Epoch != 2 || protocol.ResultFrom(held.Payload) != "B" {
		t.Fatalf("the standalone receiver holds %+v, %v", held, err)
	}
}

// TestSession_IdleExpiryEndsItsRuns: a session nobody uses or watches ends:
// its run's workers are killed, its schemas dropped.
func TestSession_IdleExpiryEndsItsRuns(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) { c.Limits.SessionIdle = 200 * time.Millisecond })
	s := ts.newSession()
	s.cmd(`{"action":"run","ordering":"free-play"}`)
	pids := []int{}
	for _, w := range s.snapshot().Run.Workers {
		pids = append(pids, w.Pid)
	}
	time.Sleep(400 * time.Millisecond) // idle, and nobody watching
	ts.Sessions.Sweep()
	if a := ts.do("GET", "/api/sessions/"+s.ID, "", "", ""); a.Status != http.StatusNotFound {
		t.Fatalf("an idle session is still there: %d", a.Status)
	}
	for _, pid := range pids {
		if st := child.State(pid); st != 0 && st != 'Z' {
			t.Errorf("worker %d of the expired session is alive (%c)", pid, st)
		}
	}
	var n int
	_ = pgtest.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)", "fl_"+ts.Sessions.Instance()+"_").Scan(&n)
	if n != 0 {
		t.Errorf("%d schemas of the expired session are left", n)
	}
	// A watched session does not expire.
	w := ts.newSession()
	c, _, err := w.dial(context.Background(), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.c.CloseNow()
	c.next(t, "live", 5*time.Second)
	time.Sleep(400 * time.Millisecond)
	ts.Sessions.Sweep()
	if a := ts.do("GET", "/api/sessions/"+w.ID, "", "", ""); a.Status != http.StatusOK {
		t.Fatalf("a watched session expired: %d", a.Status)
	}
}

// TestSession_NotIdleWhileACommandRuns: idle counts from a command's end.
// A run that takes longer to start than SessionIdle (a busy machine) is not
// swept away under the command starting it.
func TestSession_NotIdleWhileACommandRuns(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) { c.Limits.SessionIdle = time.Millisecond })
	s := ts.newSession()
	live, err := ts.Sessions.Get(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	before := live.Log.LastSeq()
	done := make(chan answer, 1)
	go func() { done <- s.try(`{"action":"run","ordering":"free-play"}`) }()
	// Sweep only once the command is being carried out (its run has said
	// something): before that, the session is idle as anyone's would be.
	for live.Log.LastSeq() == before {
		time.Sleep(100 * time.Microsecond)
	}
	sweeps := 0
	for {
		select {
		case a := <-done:
			if a.Status != http.StatusOK {
				t.Fatalf("the run's own command failed under %d sweeps: %d %s", sweeps, a.Status, a.Body)
			}
			if sweeps == 0 {
				t.Fatalf("only %d sweeps while the command ran: the test did not test", sweeps)
			}
			return
		default:
			ts.Sessions.Sweep()
			sweeps++
			time.Sleep(time.Millisecond)
		}
	}
}

// TestSecrets_StayOutOfEventsAndCommandLines: the per-run receiver key is
// in no event (watchers see every event), and the database URL is on no
// worker's command line (every local user sees those).
func TestSecrets_StayOutOfEventsAndCommandLines(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	s := ts.newSession()
	s.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
	for !s.cmd(`{"action":"step"}`).Done {
		if snap := s.snapshot(); snap.Run != nil && len(snap.Run.Workers) > 0 && snap.Run.StepIndex == 1 {
			for _, w := range snap.Run.Workers {
				cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", w.Pid))
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(cmdline), pgtest.DSN(t)) || strings.Contains(string(cmdline), "database-url") {
					t.Errorf("worker %s's command line carries the database URL: %q", w.Label, cmdline)
				}
			}
		}
	}
	b, _ := json.Marshal(s.events(0, ""))
	if strings.Contains(string(b), "/receiver/") {
		t.Fatalf("an event carries the run's receiver URL, key and all")
	}
	if !strings.Contains(string(b), `"url":".../deliveries"`) {
		t.Fatalf("the receiver call is not shown at all")
	}
}

// TestAPI_LimitsSayMillisecondsWhereTheySayMS: every limit named _ms is a
// number of milliseconds, as the page reads it.
func TestAPI_LimitsSayMillisecondsWhereTheySayMS(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) {
		c.Limits.MaxStall = 90 * time.Second
		c.Limits.MinLease = 250 * time.Millisecond
	})
	s := ts.newSession()
	a := ts.do("GET", "/api/sessions/"+s.ID, "", "", "")
	var snap struct{ Limits map[string]float64 }
	a.json(t, &snap)
	for k, want := range map[string]float64{"max_stall_ms": 90000, "min_lease_ms": 250, "max_lease_ms": 60000, "max_run_time_ms": 1800000, "session_idle_ms": 900000, "max_pace_ms": 10000} {
		if got, ok := snap.Limits[k]; !ok || got != want {
			t.Errorf("limits.%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	for k := range snap.Limits {
		if strings.HasSuffix(k, "_ms") && snap.Limits[k] > 1e12 {
			t.Errorf("limits.%s = %v: nanoseconds under a millisecond name", k, snap.Limits[k])
		}
	}
}
