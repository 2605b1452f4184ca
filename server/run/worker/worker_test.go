package worker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/labtest"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/receiver"
	"github.com/fencelab/fencelab/server/run/worker"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestParseCommand(t *testing.T) {
	t.Parallel()
	good := map[string]worker.Command{
		`{"cmd":"proceed"}`:                          {Cmd: "proceed"},
		`{"cmd":"proceed","checkpoint":"deliver"}`:   {Cmd: "proceed", Checkpoint: "deliver"},
		`{"cmd":"fail","checkpoint":"commit"}`:       {Cmd: "fail", Checkpoint: "commit"},
		`{"cmd":"stop"}`:                             {Cmd: "stop"},
		` {"checkpoint":"claim", "cmd":"proceed"}  `: {Cmd: "proceed", Checkpoint: "claim"},
	}
	for in, want := range good {
		got, err := worker.ParseCommand([]byte(in))
		if err != nil || got != want {
			t.Errorf("ParseCommand(%s) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{``, `{}`, `null`, `[]`, `"proceed"`, `{"cmd":"dance"}`, `{"cmd":"proceed","checkpoint":"lunch"}`,
		`{"cmd":"fail","checkpoint":"claim"}`, `{"cmd":"proceed","extra":1}`, `{"cmd":"proceed"} {"cmd":"stop"}`, `{"cmd":1}`,
		`{"cmd":"proceed"` + strings.Repeat(" ", 5000) + `}`} {
		if c, err := worker.ParseCommand([]byte(in)); err == nil {
			t.Errorf("ParseCommand(%.40q) = %+v, want an error", in, c)
		}
	}
}

// FuzzParseCommand: any line either parses into a command that says the
// same thing when encoded again, or is refused with an error; never a panic.
func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{`{"cmd":"proceed"}`, `{"cmd":"fail","checkpoint":"commit"}`, `{"cmd":"stop"}`, `{`, `{"cmd":"proceed","checkpoint":"x"}`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		c, err := worker.ParseCommand(line)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error with no words")
			}
			return
		}
		switch c.Cmd {
		case "proceed", "fail", "stop":
		default:
			t.Fatalf("accepted unknown command %q", c.Cmd)
		}
		b, _ := json.Marshal(c)
		again, err := worker.ParseCommand(b)
		if err != nil || again != c {
			t.Fatalf("round trip of %+v: %+v, %v", c, again, err)
		}
	})
}

// TestWorker_StepModeObeysCommandsAndIgnoresBadOnes drives a worker in
// process through one job: bad commands are reported and change nothing,
// a command for the wrong checkpoint is refused, proceed moves it on.
// oneJob sets up a lab's two schemas with one job in its queue.
func oneJob(ctx context.Context, t *testing.T) (*pgxpool.Pool, judge.Schemas, *engine.Queue, int64) {
	t.Helper()
	pool := pgtest.Pool(t)
	s := judge.Schemas{Jobs: pgtest.Schema(t), Receiver: pgtest.Schema(t)}
	if err := judge.Setup(ctx, pool, s); err != nil {
		t.Fatal(err)
	}
	q, _ := engine.NewQueue(pool, engine.QueueConfig{Schema: s.Jobs})
	id, err := q.Insert(ctx, []byte(`{"x":1}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	return pool, s, q, id
}

func TestWorker_StepModeObeysCommandsAndIgnoresBadOnes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, s, q, id := oneJob(ctx, t)
	rcv, _ := engine.NewReceiver(pool, engine.ReceiverConfig{Schema: s.Receiver})
	srv := httptest.NewServer(receiver.Standalone(&receiver.Handler{ReceiverFunc: receiver.Fixed(rcv)}, slog.New(slog.DiscardHandler)))
	defer srv.Close()

	cfg, err := worker.ParseFlags([]string{"--database-url", pgtest.DSN(t), "--schema", s.Jobs, "--receiver", srv.URL + "/deliveries",
		"--name", "worker-t", "--label", "T", "--lease", "30s", "--step", "--max-jobs", "1"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- worker.Run(ctx, cfg, inR, outW); outW.Close() }()
	events := make(chan protocol.Event, 100)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			var e protocol.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Errorf("a line that is not an event: %s", sc.Text())
				continue
			}
			if err := labtest.Validate(sc.Bytes()); err != nil {
				t.Errorf("the worker printed an event that breaks the protocol schema: %v\n%s", err, sc.Bytes())
			}
			events <- e
		}
		close(events)
	}()
	next := func(match func(protocol.Event) bool, what string) protocol.Event {
		t.Helper()
		for {
			select {
			case e, ok := <-events:
				if !ok {
					t.Fatalf("worker exited before %s", what)
				}
				if match(e) {
					return e
				}
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	send := func(line string) {
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	waiting := func(cp protocol.Checkpoint) func(protocol.Event) bool {
		return func(e protocol.Event) bool { return e.Checkpoint != nil && e.Checkpoint.Name == cp }
	}
	badCommand := func(e protocol.Event) bool { return e.Error != nil && e.Error.Code == protocol.ErrBadCommand }

	next(waiting("claim"), "the claim checkpoint")
	for _, bad := range []string{`nonsense`, `{"cmd":"dance"}`, `{"cmd":"proceed","checkpoint":"commit"}`, `{"cmd":"fail"}`} {
		send(bad)
		e := next(badCommand, "a bad-command event for "+bad)
		if e.Text == "" || e.Actor != "T" {
			t.Errorf("bad command %s: event %+v", bad, e)
		}
	}
	if j, _ := q.Get(ctx, id); j.Status != engine.StatusPending {
		t.Fatalf("bad commands changed the job: %+v", j)
	}
	send(`{"cmd":"proceed","checkpoint":"claim"}`)
	claim := next(func(e protocol.Event) bool { return e.SQL != nil && e.SQL.Op == protocol.OpClaim }, "the claim")
	if c := claim.SQL; c.Stmt.Rows != 1 || c.Result != protocol.ResultOK || *c.Epoch != 1 || c.JobID != id || claim.At.IsZero() ||
		c.LeaseUntil == nil || !strings.Contains(c.Stmt.SQL, "FOR UPDATE SKIP LOCKED") || c.Owner != "worker-t" {
		t.Fatalf("claim event = %+v", claim.SQL)
	}
	next(waiting("deliver"), "the deliver checkpoint")
	send(`{"cmd":"proceed"}`)
	call := next(func(e protocol.Event) bool { return e.Call != nil }, "the receiver call")
	if c := call.Call; c.Result != protocol.DeliveryAccepted || c.Decision != protocol.AcceptedFirst || c.HTTPStatus != 200 || c.Epoch != 1 || *c.HeldEpoch != 1 {
		t.Fatalf("receiver call = %+v", call.Call)
	}
	next(waiting("commit"), "the commit checkpoint")
	send(`{"cmd":"proceed","checkpoint":"commit"}`)
	commit := next(func(e protocol.Event) bool { return e.SQL != nil && e.SQL.Op == protocol.OpComplete }, "the commit")
	if commit.SQL.Result != protocol.ResultOK || commit.SQL.Stmt.Rows != 1 || commit.SQL.Stmt.Name != "JobComplete" {
		t.Fatalf("commit = %+v", commit.SQL)
	}
	if err := <-done; err != nil {
		t.Fatalf("worker: %v", err)
	}
	if j, _ := q.Get(ctx, id); j.Status != engine.StatusDone || protocol.ResultFrom(j.Result) != "T" {
		t.Fatalf("job after the run: %+v", j)
	}
}
