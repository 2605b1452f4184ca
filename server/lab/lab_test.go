package lab_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab"
	"github.com/fencelab/fencelab/server/lab/labtest"
)

// These tests need no database and no process: Check, Rank and the
// verdicts work on what Postgres and the receiver recorded, and here that
// record is written by hand, change by change, as the trigger would.

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func str(s string) *string { return &s }

func i64(v int64) *int64 { return &v }

func tm(t time.Time) *time.Time { return &t }

func payload(worker string) json.RawMessage {
	b, _ := json.Marshal(lab.Result{Worker: worker})
	return b
}

// history writes a job's history as the trigger records it.
type history struct {
	recs []lab.HistoryRecord
	cur  lab.HistoryRecord
}

func newHistory() *history {
	h := &history{cur: lab.HistoryRecord{JobID: 1, NewStatus: "pending", App: "fencelab"}}
	h.push("insert", 0)
	return h
}

func (h *history) push(op string, ms int) {
	r := h.cur
	r.Seq = int64(len(h.recs) + 1)
	r.Op, r.At = op, at(ms)
	h.recs = append(h.recs, r)
}

// change moves the row on, keeping the old values as the trigger does.
func (h *history) change(op string, ms int, worker, status string, epoch int64, lease *time.Time, result json.RawMessage) {
	prev := h.cur
	h.cur.OldStatus, h.cur.OldOwner, h.cur.OldEpoch, h.cur.OldLeaseUntil = str(prev.NewStatus), prev.NewOwner, i64(prev.NewEpoch), prev.NewLeaseUntil
	h.cur.NewStatus, h.cur.NewEpoch, h.cur.NewLeaseUntil, h.cur.Result = status, epoch, lease, result
	if op == "claim" {
		h.cur.NewOwner = str("worker-" + strings.ToLower(worker))
		h.cur.Attempts++
	}
	h.cur.App = lab.AppName(worker)
	h.push(op, ms)
}

func (h *history) claim(ms int, worker string, epoch int64, leaseMS int) {
	h.change("claim", ms, worker, "running", epoch, tm(at(ms+leaseMS)), nil)
}

func (h *history) complete(ms int, worker string) {
	h.change("complete", ms, worker, "done", h.cur.NewEpoch, nil, payload(worker))
}

func decision(seq int64, worker string, epoch int64, d engine.Decision, prev *int64) engine.DecisionRecord {
	return engine.DecisionRecord{Seq: seq, JobID: 1, Epoch: epoch, Owner: "worker-" + strings.ToLower(worker), Payload: payload(worker), Decision: d, PrevEpoch: prev, At: at(int(seq))}
}

func invariants(vs []lab.Violation) []lab.Invariant {
	out := []lab.Invariant{}
	for _, v := range vs {
		out = append(out, v.Invariant)
	}
	return out
}

func TestCheck_TheFencedStoryBreaksNothing(t *testing.T) {
	h := newHistory()
	h.claim(10, "A", 1, 1000)
	h.claim(1100, "B", 2, 1000) // A's lease ran out at 1010
	h.complete(1500, "B")
	ds := []engine.DecisionRecord{decision(1, "A", 1, engine.AcceptedFirst, nil), decision(2, "B", 2, engine.AcceptedNewer, i64(1))}
	held := &engine.Held{JobID: 1, Epoch: 2, Payload: payload("B")}
	if vs := lab.Check(h.recs, ds, held); len(vs) != 0 {
		t.Fatalf("the correct build's story breaks %v", vs)
	}
}

func TestCheck_EachInvariant(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func() ([]lab.HistoryRecord, []engine.DecisionRecord, *engine.Held)
		want  []lab.Invariant
		// guards must be among the violation's guards (what let it happen).
		guards playground.Guard
	}{
		{"a zombie's late commit lands", func() ([]lab.HistoryRecord, []engine.DecisionRecord, *engine.Held) {
			h := newHistory()
			h.claim(10, "A", 1, 1000)
			h.claim(1100, "B", 2, 1000)
			h.complete(1200, "A")
			return h.recs, nil, nil
		}, []lab.Invariant{lab.InvStaleWrite, lab.InvRowLastOwner}, playground.EpochCheck},
		{"a holder's late commit lands after its job was ended", func() ([]lab.HistoryRecord, []engine.DecisionRecord, *engine.Held) {
			h := newHistory()
			h.claim(10, "A", 1, 1000)
			h.change("expire", 1100, "B", "failed", 2, nil, nil) // B's claim found A's last attempt spent
			h.complete(1200, "A")                                // status and epoch checks broken: it lands
			return h.recs, nil, nil
		}, []lab.Invariant{lab.InvStaleWrite}, playground.StatusCheck},
		{"a late heartbeat lands", func() ([]lab.HistoryRecord, []engine.DecisionRecord, *engine.Held) {
			h := newHistory()
			h.claim(10, "A", 1, 1000)
			h.claim(1100, "B", 2, 1000)
			h.change("renew", 1150, "A", "running", 2, tm(at(2150)), nil)
			h.complete(1500, "B")
			return h.recs, nil, nil
		}, []lab.Invariant{lab.InvStaleWrite}, playground.OwnerCheck},
		{"two claims share a token", func() ([]lab.HistoryRecord, []engine.DecisionRecord, *engine.Held) {
			h := newHistory()
			h.claim(10, "A", 0, 1000)
			h.claim(1100, "B", 0, 1000)
			h.complete(1500, "B")
			return h.recs, nil, nil
		}, []lab.Invariant{lab.InvEpochUnique}, playground.EpochIncrement},
		{"a live lease is taken", func() ([]lab.HistoryRecord, []engine.DecisionRecord, *engine.Held) {
			h := newHistory()
			h.claim(10, "A", 1, 5000)
			h.claim(100, "B", 2, 5000)
			h.complete(200, "B")
			return h.recs, nil, nil
		}, []lab.Invariant{lab.InvLeaseRespected}, playground.DBClock},
		{"the receiver goes backwards", func() ([]lab.HistoryRecord, []engine.DecisionRecord, *engine.Held) {
			h := newHistory()
			h.claim(10, "A", 1, 1000)
			h.claim(1100, "B", 2, 1000)
			h.complete(1200, "B")
			ds := []engine.DecisionRecord{decision(1, "B", 2, engine.AcceptedFirst, nil), decision(2, "A", 1, engine.AcceptedOlder, i64(2))}
			return h.recs, ds, &engine.Held{JobID: 1, Epoch: 1, Payload: payload("A")}
		}, []lab.Invariant{lab.InvReceiverLastOwner, lab.InvReceiverMonotonic}, playground.ReceiverCheck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := lab.Check(tc.build())
			if got := invariants(vs); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Check = %v, want %v (ranked)", got, tc.want)
			}
			found := false
			for _, g := range vs[0].Guards {
				found = found || g == tc.guards
			}
			if !found {
				t.Errorf("%s: guards %v lack %s", vs[0].Invariant, vs[0].Guards, tc.guards)
			}
			for _, v := range vs {
				if v.Text == "" || strings.Contains(v.Text, "%!") || v.JobID != 1 {
					t.Errorf("violation %+v: want a sentence about job 1", v)
				}
			}
		})
	}
}

func TestCheck_SaysEachViolationOnce(t *testing.T) {
	h := newHistory()
	h.claim(10, "A", 1, 1000)
	h.claim(1100, "B", 2, 1000)
	h.change("renew", 1150, "A", "running", 2, tm(at(2150)), nil)
	h.change("renew", 1160, "A", "running", 2, tm(at(2160)), nil)
	h.complete(1500, "B")
	if vs := lab.Check(h.recs, nil, nil); len(vs) != 1 {
		t.Fatalf("two late heartbeats of one worker are one violation, got %v", invariants(vs))
	}
}

func TestRank_PlainestFirst(t *testing.T) {
	vs := []lab.Violation{
		{Invariant: lab.InvFinished},
		{Invariant: lab.InvStaleWrite, Op: "renew"},
		{Invariant: lab.InvEpochUnique},
		{Invariant: lab.InvLeaseRespected},
		{Invariant: lab.InvReceiverMonotonic},
		{Invariant: lab.InvReceiverLastOwner},
		{Invariant: lab.InvRowLastOwner},
		{Invariant: lab.InvStaleWrite, Op: "complete"},
	}
	lab.Rank(vs)
	var got []string
	for _, v := range vs {
		got = append(got, string(v.Invariant)+"/"+v.Op)
	}
	want := []string{"stale-write/complete", "row-last-owner/", "receiver-last-owner/", "receiver-monotonic/",
		"lease-respected/", "epoch-unique/", "stale-write/renew", "finished/"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Rank = %v\nwant   %v", got, want)
	}
}

func TestExpectedOutcome_IsTheArticlesTable(t *testing.T) {
	for o, want := range map[lab.Ordering][3]string{
		lab.NewOwnerFirst: {"rejected", "rejected", "epoch 2, the new owner's result in the row and at the receiver"},
		lab.ZombieFirst:   {"accepted, then superseded", "rejected", "epoch 2, the new owner's result in the row and at the receiver"},
	} {
		x, ok := lab.ExpectedOutcome(o)
		if !ok || x.Epoch != 2 || x.ResultFrom != lab.NewOwner || x.ReceiverFrom != lab.NewOwner {
			t.Errorf("%s: %+v", o, x)
		}
		if got := [3]string{x.Words.Call, x.Words.Commit, x.Words.Final}; got != want {
			t.Errorf("%s: the correct build's row says %q, the article %q", o, got, want)
		}
	}
	if _, ok := lab.ExpectedOutcome(lab.FreePlay); ok {
		t.Error("free play has no expected outcome")
	}
}

// sampleEvents returns one event of every kind, and of most codes, filled
// as their emitters fill them.
func sampleEvents() []lab.Event {
	o := lab.Outcome{Ordering: lab.ZombieFirst, Broken: []string{}, Violations: []lab.Violation{}, Because: []string{}, Safe: true,
		ZombieReceiverCall: lab.CallAcceptedThenSuperseded, ZombieCommit: lab.CallRejected, Answer: lab.AnswerRejected, Verdict: "Safe: …",
		Delivery: lab.DeliverDirect, ZombieFence: []engine.FenceReason{engine.ReasonEpochChanged}, Reveal: []string{"A's commit was refused."},
		Effects: []lab.Effect{{From: "A", Epoch: 1, Decision: engine.AcceptedFirst, At: "2026-12-01T10:00:00Z"}},
		Final:   lab.FinalRow{Status: engine.StatusDone, Owner: "worker-b", Epoch: 2, ResultFrom: "B"}, Receiver: lab.FinalReceiver{Epoch: 2, PayloadFrom: "B"},
		Headline: "Safe: …", Table: []lab.Cell{{Column: lab.ColumnCall, Words: "accepted, then superseded", Expected: "accepted, then superseded", AsCorrect: true}}}
	stmt := lab.Stmt{Name: "JobComplete", SQL: "UPDATE …", Args: []string{"1"}, Rows: 0}
	fence := &lab.Fence{RowStatus: engine.StatusRunning, RowOwner: "worker-b", RowEpoch: 2, Reasons: []engine.FenceReason{engine.ReasonOwnerChanged, engine.ReasonEpochChanged}}
	exit := 0
	step := 3
	info := lab.RunInfo{ID: "r1", Ordering: lab.ZombieFirst, Mode: lab.ModeAuto, Phase: lab.PhasePlaying, Broken: []string{}, LeaseMS: 1000, PaceMS: 900, Delivery: lab.DeliverDirect,
		Steps: []lab.Step{{Action: lab.ActClaim, Worker: "A", Say: "A claims."}}, Started: at(0),
		Workers: []lab.Worker{{Label: "A", Owner: "worker-a", Pid: 42, State: lab.StateStopped, Letter: "T", Frozen: true}}}
	return []lab.Event{
		{Actor: "A", Kind: lab.KindSQL, SQL: &lab.SQLEvent{Op: lab.OpClaim, Result: lab.ResultOK, Stmt: stmt, JobID: 1, Owner: "worker-a", Epoch: i64(1), LeaseUntil: tm(at(1000))}},
		{Actor: "A", Kind: lab.KindSQL, SQL: &lab.SQLEvent{Op: lab.OpComplete, Result: lab.ResultFenced, Stmt: stmt, JobID: 1, Owner: "worker-a", Epoch: i64(1), Fenced: fence}},
		{Actor: "A", Kind: lab.KindSQL, SQL: &lab.SQLEvent{Op: lab.OpFail, Result: lab.ResultOK, Stmt: stmt, JobID: 1, Owner: "worker-a", Epoch: i64(1), Status: engine.StatusPending}},
		{Actor: "A", Kind: lab.KindSQL, SQL: &lab.SQLEvent{Op: lab.OpRenew, Result: lab.ResultFailed, Stmt: stmt, JobID: 1, Owner: "worker-a", Error: &lab.Failure{Code: "57P01", Message: "the database is unavailable"}}},
		{Actor: "A", Kind: lab.KindCheckpoint, Checkpoint: &lab.CheckpointEvent{Name: lab.CheckpointDeliver, JobID: 1, Epoch: i64(1), Owner: "worker-a"}},
		{Actor: "B", Kind: lab.KindProcess, Process: &lab.ProcessEvent{Change: lab.ProcSpawned, Pid: 43, State: lab.StateRunning, Owner: "worker-b", SkewMS: 2000}},
		{Actor: "A", Kind: lab.KindProcess, Process: &lab.ProcessEvent{Change: lab.ProcStopped, Pid: 42, State: lab.StateStopped, Letter: "T", Signal: "SIGSTOP", Cause: lab.CauseScript}},
		{Actor: "A", Kind: lab.KindProcess, Process: &lab.ProcessEvent{Change: lab.ProcExited, Pid: 42, State: lab.StateExited, ExitCode: &exit}},
		{Actor: "A", Kind: lab.KindCall, Call: &lab.CallEvent{Result: lab.DeliveryRefused, JobID: 1, Epoch: 1, Owner: "worker-a", URL: ".../deliveries", Body: "{}", HTTPStatus: 409, Decision: engine.RefusedStale, HeldEpoch: i64(2)}},
		{Actor: "A", Kind: lab.KindCall, Call: &lab.CallEvent{Result: lab.DeliveryFailed, JobID: 1, Epoch: 1, Owner: "worker-a", URL: ".../deliveries", Body: "{}", Error: &lab.Failure{Code: "unreachable", Message: "connection refused"}}},
		{Actor: lab.ActorPostgres, Kind: lab.KindRow, Row: &lab.RowEvent{HistorySeq: 2, JobID: 1, Op: lab.RowClaim, Writer: "B", App: lab.AppName("B"),
			Old: &lab.RowImage{Status: engine.StatusRunning, Owner: "worker-a", Epoch: 1, LeaseUntil: tm(at(1000))}, New: lab.RowImage{Status: engine.StatusRunning, Owner: "worker-b", Epoch: 2, LeaseUntil: tm(at(2000))}}},
		{Actor: lab.ActorPostgres, Kind: lab.KindRow, Row: &lab.RowEvent{HistorySeq: 1, JobID: 1, Op: lab.RowInsert, App: "fencelab", New: lab.RowImage{Status: engine.StatusPending}}},
		{Actor: lab.ActorReceiver, Kind: lab.KindReceiver, Receiver: &lab.ReceiverEvent{Decision: engine.AcceptedNewer, JobID: 1, Epoch: 2, Owner: "worker-b", From: "B", HeldEpoch: 2, Superseded: i64(1), SupersededOwner: "worker-a", Stmt: &stmt}},
		{Actor: lab.ActorPostgres, Kind: lab.KindLease, Lease: &lab.LeaseEvent{Change: lab.LeaseExpired, JobID: 1, Epoch: 1, Owner: "worker-a", Holder: "A", LeaseUntil: at(1000), DBNow: at(1001), Clock: lab.ClockDatabase}},
		{Actor: lab.ActorPostgres, Kind: lab.KindLease, Lease: &lab.LeaseEvent{Change: lab.LeaseTakenLive, JobID: 1, Epoch: 1, Owner: "worker-a", Holder: "A", LeaseUntil: at(1000), DBNow: at(300), Clock: lab.ClockWorker, ClockOf: "B", SkewMS: 2000, LiveMS: 700}},
		{Actor: lab.ActorRunner, Kind: lab.KindStep, Text: "Step 1 of 8: A claims.", Step: &lab.StepEvent{Index: 0, Total: 8, Action: lab.ActClaim, Worker: "A"}},
		{Actor: lab.ActorRunner, Kind: lab.KindVerdict, Verdict: &lab.VerdictEvent{Safe: true, Outcome: &o}},
		{Actor: lab.ActorRunner, Kind: lab.KindVerdict, Verdict: &lab.VerdictEvent{Safe: true, Report: &lab.Report{Jobs: []lab.JobReport{}, Violations: []lab.Violation{}, Safe: true, Headline: "Safe so far", Verdict: "Safe so far"}}},
		{Actor: lab.ActorRunner, Kind: lab.KindRunState, RunState: &lab.RunStateEvent{Info: info}},
		{Actor: lab.ActorRunner, Kind: lab.KindBatch, Batch: &lab.BatchEvent{Name: lab.BatchMatrix, Phase: lab.BatchStarted, LeaseMS: 300, Cells: []lab.MatrixCell{{Run: "r2", Ordering: lab.ZombieFirst, Broken: "epoch-check"}}}},
		{Actor: lab.ActorRunner, Kind: lab.KindBatch, Batch: &lab.BatchEvent{Name: lab.BatchEpochCheck, Phase: lab.BatchFinished, LeaseMS: 300, Cells: []lab.MatrixCell{{Run: "r2", Ordering: lab.ZombieFirst, Broken: "epoch-check"}}, Answer: "Neither ordering failed.", Unsafe: []string{}}},
		{Actor: lab.ActorRelay, Kind: lab.KindCall, Call: &lab.CallEvent{Result: lab.DeliveryAccepted, JobID: 1, Epoch: 2, Owner: "worker-b", URL: ".../deliveries", Body: "{}", HTTPStatus: 200, Decision: engine.AcceptedFirst, HeldEpoch: i64(2)}},
		{Actor: "A", Kind: lab.KindCall, Call: &lab.CallEvent{Result: lab.DeliveryDeferred, JobID: 1, Epoch: 1, Owner: "worker-a", URL: ".../deliveries", Body: "{}"}},
		{Actor: "A", Kind: lab.KindNote, Note: &lab.NoteEvent{Code: lab.NoteSkip, Worker: "A"}},
		{Actor: lab.ActorRunner, Kind: lab.KindNote, Note: &lab.NoteEvent{Code: lab.NoteStopped, Reason: lab.StopReplaced}},
		{Actor: lab.ActorRunner, Kind: lab.KindError, Error: &lab.ErrorEvent{Code: lab.ErrStepFailed, Message: "worker A has exited", Step: &step}},
		{Actor: lab.ActorServer, Kind: lab.KindSession, Session: &lab.SessionEvent{Reason: lab.SessionIdle}},
		{Actor: lab.ActorRunner, Kind: lab.KindLoad, Load: &lab.LoadEvent{Phase: lab.LoadStarted, Config: lab.DefaultLoad()}},
		{Actor: lab.ActorRunner, Kind: lab.KindLoad, Load: &lab.LoadEvent{Phase: lab.LoadTick, Config: lab.DefaultLoad(), Style: "state-only",
			Tally: &lab.LoadTally{Style: "state-only", ElapsedMS: 1500, Jobs: 1000, Done: 300, PerSecond: 200, Stalls: 9, LateRow: 2, LateReceiver: 1}}},
		{Actor: lab.ActorRunner, Kind: lab.KindLoad, Load: &lab.LoadEvent{Phase: lab.LoadRoundDone, Config: lab.DefaultLoad(), Style: "state-only", Round: 2, Position: 4,
			Result: &lab.LoadStyleResult{Style: "state-only", Tally: lab.LoadTally{Style: "state-only", Jobs: 200, Done: 200}, Check: lab.LoadCheck{Jobs: 200, Broken: 4, ZombieResult: 2}, PerSecond: 190, Agrees: true,
				Rounds: []lab.LoadRound{{Round: 1, Position: 2, Jobs: 100, SpanMS: 500, PerSecond: 200, Agrees: true}}, Throughput: &lab.LoadSpread{Median: 200, Min: 200, Max: 200, N: 1}}}},
		{Actor: lab.ActorRunner, Kind: lab.KindLoad, Load: &lab.LoadEvent{Phase: lab.LoadStyleDone, Config: lab.DefaultLoad(), Style: "state-only",
			Result: &lab.LoadStyleResult{Style: "state-only", Tally: lab.LoadTally{Style: "state-only", Jobs: 1000, Done: 1000}, Check: lab.LoadCheck{Jobs: 1000, Broken: 4, ZombieResult: 2}, PerSecond: 190, Agrees: true}}},
		{Actor: lab.ActorRunner, Kind: lab.KindLoad, Load: &lab.LoadEvent{Phase: lab.LoadFinished, Config: lab.DefaultLoad(), Verdict: "State only: 2 of 1,000 jobs ended with a zombie's result; fencelab: 0, at the same throughput: 0.98× theirs, from 0.91× to 1.05× over 5 rounds.",
			Throughput: &lab.LoadComparison{Ratio: lab.LoadSpread{Median: 0.98, Min: 0.91, Max: 1.05, N: 5}, Same: true},
			Results:    []lab.LoadStyleResult{{Style: "fencelab", Agrees: true}}}},
		{Actor: lab.ActorRunner, Kind: lab.KindLoad, Load: &lab.LoadEvent{Phase: lab.LoadStopped, Config: lab.DefaultLoad(), Reason: lab.StopReset}},
	}
}

func TestLoadVerdict_SaysEachStyleAndFencelabsThroughput(t *testing.T) {
	rs := []lab.LoadStyleResult{
		{Style: "fencelab", PerSecond: 200, Check: lab.LoadCheck{Jobs: 10000}, Agrees: true},
		{Style: "state-only", PerSecond: 205, Check: lab.LoadCheck{Jobs: 10000, ZombieResult: 37}, Agrees: true},
		{Style: "id-only", PerSecond: 195, Check: lab.LoadCheck{Jobs: 10000, ZombieResult: 120}, Agrees: true},
	}
	want := "State only: 37 of 10,000 jobs ended with a zombie's result; job id only: 120; fencelab: 0, at 1.00× their throughput, in one round: no spread to judge by."
	if got := lab.LoadVerdict(rs); got != want {
		t.Errorf("verdict\n got %q\nwant %q", got, want)
	}
	rs[0].PerSecond, rs[1].Agrees = 100, false
	got := lab.LoadVerdict(rs)
	for _, w := range []string{"at 0.50× their throughput", "disagree for state only"} {
		if !strings.Contains(got, w) {
			t.Errorf("verdict %q does not say %q", got, w)
		}
	}
}

func TestLoadConfig_Bounds(t *testing.T) {
	for _, c := range []lab.LoadConfig{
		{Workers: 1}, {Workers: 17}, {Jobs: 9}, {Jobs: 5001}, {LeaseMS: 199}, {LeaseMS: 2001},
		{Styles: []string{"bespoke"}}, {Styles: []string{"fencelab", "fencelab"}},
	} {
		c.Fill()
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := lab.DefaultLoad().Validate(); err != nil {
		t.Errorf("the default: %v", err)
	}
}

func TestNarrate_EveryKindSaysASentenceAndMatchesTheSchema(t *testing.T) {
	kinds := map[lab.Kind]bool{}
	for _, e := range sampleEvents() {
		e.V, e.Run, e.At = lab.ProtocolVersion, "r1", at(5)
		lab.Narrate(&e)
		kinds[e.Kind] = true
		if e.Text == "" || e.Text == string(e.Kind) || strings.Contains(e.Text, "%!") || strings.Contains(e.Text, "<nil>") {
			t.Errorf("%s event narrated as %q", e.Kind, e.Text)
		}
		if err := labtest.CheckEvent(e); err != nil {
			b, _ := json.Marshal(e)
			t.Errorf("%s event breaks the schema: %v\n%s", e.Kind, err, b)
		}
	}
	for _, k := range lab.Kinds() {
		if !kinds[k] {
			t.Errorf("no sample of kind %s", k)
		}
	}
}

// TestSchema_RefusesWhatTheProtocolDoesNot shows the schema is not a
// rubber stamp: a wrong payload, an unknown code, a stray field and a
// missing one are each refused.
func TestSchema_RefusesWhatTheProtocolDoesNot(t *testing.T) {
	good := lab.Event{V: lab.ProtocolVersion, At: at(1), Actor: "A", Kind: lab.KindSQL, Text: "x",
		SQL: &lab.SQLEvent{Op: lab.OpClaim, Result: lab.ResultOK, Stmt: lab.Stmt{Name: "JobClaim", SQL: "UPDATE", Args: []string{}}, Owner: "worker-a"}}
	raw, _ := json.Marshal(good)
	if err := labtest.Check(raw); err != nil {
		t.Fatalf("a good event is refused: %v", err)
	}
	for name, edit := range map[string]func(m map[string]any){
		"payload of another kind": func(m map[string]any) { m["kind"] = "row" },
		"unknown result code":     func(m map[string]any) { m["sql"].(map[string]any)["result"] = "maybe" },
		"a stray field":           func(m map[string]any) { m["sql"].(map[string]any)["why"] = "because" },
		"a missing field":         func(m map[string]any) { delete(m["sql"].(map[string]any), "owner") },
		"two payloads":            func(m map[string]any) { m["note"] = map[string]any{"code": "skip"} },
		"an old version":          func(m map[string]any) { m["v"] = 1 },
		"a time that is no time":  func(m map[string]any) { m["at"] = "yesterday" },
	} {
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		edit(m)
		b, _ := json.Marshal(m)
		if err := labtest.Check(b); err == nil {
			t.Errorf("%s: the schema accepts %s", name, b)
		}
	}
}

func TestVerdict_WordsFromTheCodes(t *testing.T) {
	h := newHistory()
	h.claim(10, "A", 1, 1000)
	h.claim(1100, "A", 2, 1000) // the same name: a restarted pod
	vs := lab.Check(h.recs, nil, nil)
	if len(vs) != 0 {
		t.Fatalf("a reclaim alone breaks %v", vs)
	}
	for _, tc := range []struct {
		name string
		out  string
		want []string
	}{
		{"safe", lab.ExplainForTest(lab.Outcome{Safe: true, ZombieCommit: lab.CallRejected, Final: lab.FinalRow{Epoch: 2, ResultFrom: "B"}}),
			[]string{"Safe: the job ended done at epoch 2 with worker B's result in the row and at the receiver; the zombie's late commit was fenced."}},
		{"unsafe, same name", lab.ExplainForTest(lab.Outcome{SameIdentity: true, Broken: []string{"epoch-check"}, Because: []string{"epoch-check"},
			Violations: []lab.Violation{{Invariant: lab.InvStaleWrite, Text: "Worker A's late commit landed."}, {Invariant: lab.InvRowLastOwner, Text: "The row ends with worker A's result."}}}),
			[]string{"Unsafe: worker A's late commit landed, because the epoch-check guard was off and both workers had the same name", "Also: The row ends with worker A's result."}},
		{"unsafe, two guards", lab.ExplainForTest(lab.Outcome{Because: []string{"status-check", "owner-check"},
			Violations: []lab.Violation{{Invariant: lab.InvRowLastOwner, Text: "The row ends with worker A's result."}}}),
			[]string{"Unsafe: the row ends with worker A's result, because the status-check and owner-check guards were off."}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(tc.out, w) {
				t.Errorf("%s: verdict %q lacks %q", tc.name, tc.out, w)
			}
		}
	}
}

func TestRunConfig_ValidatesAndFillsDefaults(t *testing.T) {
	for _, tc := range []struct {
		cfg lab.RunConfig
		ok  bool
	}{
		{lab.RunConfig{Ordering: lab.ZombieFirst}, true},
		{lab.RunConfig{Ordering: lab.ClockSkew}, true},
		{lab.RunConfig{}, false},
		{lab.RunConfig{Ordering: "sideways"}, false},
		{lab.RunConfig{Ordering: lab.ZombieFirst, Lease: time.Millisecond}, false},
		{lab.RunConfig{Ordering: lab.ZombieFirst, Skew: time.Second}, false},
		{lab.RunConfig{Ordering: lab.ClockSkew, Skew: -time.Second}, false},
		{lab.RunConfig{Ordering: lab.ZombieFirst, Broken: 1 << 12}, false},
	} {
		c := tc.cfg
		err := c.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%+v: Validate = %v, want ok=%v", tc.cfg, err, tc.ok)
		}
		if err != nil && !strings.Contains(fmt.Sprint(err), " ") {
			t.Errorf("%+v: %q is no sentence", tc.cfg, err)
		}
		if tc.ok && (c.Lease != lab.DefaultRunLease || (c.Ordering == lab.ClockSkew && c.Skew != 2*c.Lease)) {
			t.Errorf("%+v: defaults not filled: %+v", tc.cfg, c)
		}
	}
}

// TestCheck_AnEpochNoClaimHeld: a delivery at an epoch no claim of the job
// ever held — one that did not come from its workers — is a violation of
// its own, whatever the guards.
func TestCheck_AnEpochNoClaimHeld(t *testing.T) {
	h := newHistory()
	h.claim(10, "A", 1, 1000)
	h.claim(1100, "B", 2, 1000)
	h.complete(1200, "B")
	ds := []engine.DecisionRecord{decision(1, "B", 2, engine.AcceptedFirst, nil), decision(2, "B", 99, engine.AcceptedNewer, i64(2))}
	vs := lab.Check(h.recs, ds, &engine.Held{JobID: 1, Epoch: 99, Payload: payload("B")})
	if got := invariants(vs); !reflect.DeepEqual(got, []lab.Invariant{lab.InvReceiverKnown}) {
		t.Fatalf("Check = %v, want receiver-known", got)
	}
	if !strings.Contains(vs[0].Text, "epoch 99") || len(vs[0].Guards) != 0 {
		t.Fatalf("the violation: %+v", vs[0])
	}
	// A refusal of an unknown epoch changes nothing: no violation.
	ds[1] = decision(2, "B", 99, engine.RefusedStale, i64(2))
	if vs := lab.Check(h.recs, ds[:2], &engine.Held{JobID: 1, Epoch: 2, Payload: payload("B")}); len(vs) != 0 {
		t.Fatalf("a refused unknown epoch: %v", vs)
	}
}

// TestBatchRuns_TheMatrixsClockSkewCellsHoldALeaseThatLasts: the matrix
// runs every cell with the lease it is given, but its clock-skew cells
// with at least MinSkewLease, whose meaning hangs on worker A's lease being
// live when B claims.
func TestBatchRuns_TheMatrixsClockSkewCellsHoldALeaseThatLasts(t *testing.T) {
	for _, lease := range []time.Duration{300 * time.Millisecond, 5 * time.Second} {
		rcs, err := lab.BatchRuns(lab.BatchMatrix, lease)
		if err != nil {
			t.Fatal(err)
		}
		skew := 0
		for _, rc := range rcs {
			want := lease
			if rc.Ordering == lab.ClockSkew {
				skew++
				want = max(lease, lab.MinSkewLease)
				if rc.Skew != 2*want {
					t.Errorf("lease %v: a clock-skew cell's skew is %v, want %v", lease, rc.Skew, 2*want)
				}
			}
			if rc.Lease != want {
				t.Errorf("lease %v: the %s cell (broken %v, same %v) holds %v, want %v", lease, rc.Ordering, rc.Broken.Names(), rc.SameIdentity, rc.Lease, want)
			}
		}
		if skew != 16 {
			t.Errorf("lease %v: %d clock-skew cells, want 16", lease, skew)
		}
	}
}
