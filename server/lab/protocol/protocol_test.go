package protocol_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/labtest"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

var at = labtest.At

func i64(v int64) *int64 { return &v }

func tm(t time.Time) *time.Time { return &t }

func sampleEvents() []protocol.Event {
	o := protocol.Outcome{Ordering: experiments.ZombieFirst, Broken: []string{}, Violations: []protocol.Violation{}, Because: []string{}, Safe: true,
		ZombieReceiverCall: experiments.CallAcceptedThenSuperseded, ZombieCommit: experiments.CallRejected, Answer: experiments.AnswerRejected, Verdict: "Safe: …",
		Delivery: experiments.DeliverDirect, ZombieFence: []protocol.FenceReason{protocol.ReasonEpochChanged}, Reveal: []string{"A's commit was refused."},
		Effects: []protocol.Effect{{From: "A", Epoch: 1, Decision: protocol.AcceptedFirst, At: "2026-12-01T10:00:00Z"}},
		Final:   protocol.FinalRow{Status: protocol.StatusDone, Owner: "worker-b", Epoch: 2, ResultFrom: "B"}, Receiver: protocol.FinalReceiver{Epoch: 2, PayloadFrom: "B"},
		Headline: "Safe: …", Table: []protocol.Cell{{Column: protocol.ColumnCall, Words: "accepted, then superseded", Expected: "accepted, then superseded", AsCorrect: true}}}
	stmt := protocol.Stmt{Name: "JobComplete", SQL: "UPDATE …", Args: []string{"1"}, Rows: 0}
	fence := &protocol.Fence{RowStatus: protocol.StatusRunning, RowOwner: "worker-b", RowEpoch: 2, Reasons: []protocol.FenceReason{protocol.ReasonOwnerChanged, protocol.ReasonEpochChanged}}
	exit := 0
	step := 3
	info := protocol.RunInfo{ID: "r1", Ordering: experiments.ZombieFirst, Mode: protocol.ModeAuto, Phase: protocol.PhasePlaying, Broken: []string{}, LeaseMS: 1000, PaceMS: 900, Delivery: experiments.DeliverDirect,
		Steps: []experiments.Step{{Action: experiments.ActClaim, Worker: "A", Say: "A claims."}}, Started: at(0),
		Workers: []protocol.Worker{{Label: "A", Owner: "worker-a", Pid: 42, State: protocol.StateStopped, Letter: "T", Frozen: true}}}
	return []protocol.Event{
		{Actor: "A", Kind: protocol.KindSQL, SQL: &protocol.SQLEvent{Op: protocol.OpClaim, Result: protocol.ResultOK, Stmt: stmt, JobID: 1, Owner: "worker-a", Epoch: i64(1), LeaseUntil: tm(at(1000))}},
		{Actor: "A", Kind: protocol.KindSQL, SQL: &protocol.SQLEvent{Op: protocol.OpComplete, Result: protocol.ResultFenced, Stmt: stmt, JobID: 1, Owner: "worker-a", Epoch: i64(1), Fenced: fence}},
		{Actor: "A", Kind: protocol.KindSQL, SQL: &protocol.SQLEvent{Op: protocol.OpFail, Result: protocol.ResultOK, Stmt: stmt, JobID: 1, Owner: "worker-a", Epoch: i64(1), Status: protocol.StatusPending}},
		{Actor: "A", Kind: protocol.KindSQL, SQL: &protocol.SQLEvent{Op: protocol.OpRenew, Result: protocol.ResultFailed, Stmt: stmt, JobID: 1, Owner: "worker-a", Error: &protocol.Failure{Code: protocol.ErrSQL, SQLState: "57P01", Message: "the database is unavailable"}}},
		{Actor: "A", Kind: protocol.KindCheckpoint, Checkpoint: &protocol.CheckpointEvent{Name: protocol.CheckpointDeliver, JobID: 1, Epoch: i64(1), Owner: "worker-a"}},
		{Actor: "B", Kind: protocol.KindProcess, Process: &protocol.ProcessEvent{Change: protocol.ProcSpawned, Pid: 43, State: protocol.StateRunning, Owner: "worker-b", SkewMS: 2000}},
		{Actor: "A", Kind: protocol.KindProcess, Process: &protocol.ProcessEvent{Change: protocol.ProcStopped, Pid: 42, State: protocol.StateStopped, Letter: "T", Signal: "SIGSTOP", Cause: protocol.CauseScript}},
		{Actor: "A", Kind: protocol.KindProcess, Process: &protocol.ProcessEvent{Change: protocol.ProcExited, Pid: 42, State: protocol.StateExited, ExitCode: &exit}},
		{Actor: "A", Kind: protocol.KindCall, Call: &protocol.CallEvent{Result: protocol.DeliveryRefused, JobID: 1, Epoch: 1, Owner: "worker-a", URL: ".../deliveries", Body: "{}", HTTPStatus: 409, Decision: protocol.RefusedStale, HeldEpoch: i64(2)}},
		{Actor: "A", Kind: protocol.KindCall, Call: &protocol.CallEvent{Result: protocol.DeliveryFailed, JobID: 1, Epoch: 1, Owner: "worker-a", URL: ".../deliveries", Body: "{}", Error: &protocol.Failure{Code: protocol.ErrUnreachable, Message: "connection refused"}}},
		{Actor: protocol.ActorPostgres, Kind: protocol.KindRow, Row: &protocol.RowEvent{HistorySeq: 2, JobID: 1, Op: protocol.RowClaim, Writer: "B", App: protocol.AppName("B"),
			Old: &protocol.RowImage{Status: protocol.StatusRunning, Owner: "worker-a", Epoch: 1, LeaseUntil: tm(at(1000))}, New: protocol.RowImage{Status: protocol.StatusRunning, Owner: "worker-b", Epoch: 2, LeaseUntil: tm(at(2000))}}},
		{Actor: protocol.ActorPostgres, Kind: protocol.KindRow, Row: &protocol.RowEvent{HistorySeq: 1, JobID: 1, Op: protocol.RowInsert, App: "fencelab", New: protocol.RowImage{Status: protocol.StatusPending}}},
		{Actor: protocol.ActorReceiver, Kind: protocol.KindReceiver, Receiver: &protocol.ReceiverEvent{Decision: protocol.AcceptedNewer, JobID: 1, Epoch: 2, Owner: "worker-b", From: "B", HeldEpoch: 2, Superseded: i64(1), SupersededOwner: "worker-a", Stmt: &stmt}},
		{Actor: protocol.ActorPostgres, Kind: protocol.KindLease, Lease: &protocol.LeaseEvent{Change: protocol.LeaseExpired, JobID: 1, Epoch: 1, Owner: "worker-a", Holder: "A", LeaseUntil: at(1000), DBNow: at(1001), Clock: protocol.ClockDatabase}},
		{Actor: protocol.ActorPostgres, Kind: protocol.KindLease, Lease: &protocol.LeaseEvent{Change: protocol.LeaseTakenLive, JobID: 1, Epoch: 1, Owner: "worker-a", Holder: "A", LeaseUntil: at(1000), DBNow: at(300), Clock: protocol.ClockWorker, ClockOf: "B", SkewMS: 2000, LiveMS: 700}},
		{Actor: protocol.ActorRunner, Kind: protocol.KindStep, Text: "Step 1 of 8: A claims.", Step: &protocol.StepEvent{Index: 0, Total: 8, Action: experiments.ActClaim, Worker: "A"}},
		{Actor: protocol.ActorRunner, Kind: protocol.KindVerdict, Verdict: &protocol.VerdictEvent{Safe: true, Outcome: &o}},
		{Actor: protocol.ActorRunner, Kind: protocol.KindVerdict, Verdict: &protocol.VerdictEvent{Safe: true, Report: &protocol.Report{Jobs: []protocol.JobReport{}, Violations: []protocol.Violation{}, Safe: true, Headline: "Safe so far", Verdict: "Safe so far"}}},
		{Actor: protocol.ActorRunner, Kind: protocol.KindRunState, RunState: &protocol.RunStateEvent{Info: info}},
		{Actor: protocol.ActorRunner, Kind: protocol.KindBatch, Batch: &protocol.BatchEvent{Name: experiments.BatchMatrix, Phase: protocol.BatchStarted, LeaseMS: 300, Cells: []protocol.MatrixCell{{Run: "r2", Ordering: experiments.ZombieFirst, Broken: "epoch-check"}}}},
		{Actor: protocol.ActorRunner, Kind: protocol.KindBatch, Batch: &protocol.BatchEvent{Name: experiments.BatchEpochCheck, Phase: protocol.BatchFinished, LeaseMS: 300, Cells: []protocol.MatrixCell{{Run: "r2", Ordering: experiments.ZombieFirst, Broken: "epoch-check"}}, Answer: "Neither ordering failed.", Unsafe: []string{}}},
		{Actor: protocol.ActorRelay, Kind: protocol.KindCall, Call: &protocol.CallEvent{Result: protocol.DeliveryAccepted, JobID: 1, Epoch: 2, Owner: "worker-b", URL: ".../deliveries", Body: "{}", HTTPStatus: 200, Decision: protocol.AcceptedFirst, HeldEpoch: i64(2)}},
		{Actor: "A", Kind: protocol.KindCall, Call: &protocol.CallEvent{Result: protocol.DeliveryDeferred, JobID: 1, Epoch: 1, Owner: "worker-a", URL: ".../deliveries", Body: "{}"}},
		{Actor: "A", Kind: protocol.KindNote, Note: &protocol.NoteEvent{Code: protocol.NoteSkip, Worker: "A"}},
		{Actor: protocol.ActorRunner, Kind: protocol.KindNote, Note: &protocol.NoteEvent{Code: protocol.NoteStopped, Reason: protocol.StopReplaced}},
		{Actor: protocol.ActorServer, Kind: protocol.KindNote, Note: &protocol.NoteEvent{Code: protocol.NoteChapter, Chapter: experiments.ChapterBuildUp}},
		{Actor: protocol.ActorRunner, Kind: protocol.KindError, Error: &protocol.ErrorEvent{Code: protocol.ErrStepFailed, Message: "worker A has exited", Step: &step}},
		{Actor: protocol.ActorServer, Kind: protocol.KindSession, Session: &protocol.SessionEvent{Reason: protocol.SessionIdle}},
		{Actor: protocol.ActorRunner, Kind: protocol.KindLoad, Load: &protocol.LoadEvent{Phase: experiments.LoadStarted, Config: experiments.DefaultLoad()}},
		{Actor: protocol.ActorRunner, Kind: protocol.KindLoad, Load: &protocol.LoadEvent{Phase: experiments.LoadTick, Config: experiments.DefaultLoad(), Style: "state-only",
			Tally: &experiments.LoadTally{Style: "state-only", ElapsedMS: 1500, Jobs: 1000, Done: 300, PerSecond: 200, Stalls: 9, LateRow: 2, LateReceiver: 1}}},
		{Actor: protocol.ActorRunner, Kind: protocol.KindLoad, Load: &protocol.LoadEvent{Phase: experiments.LoadRoundDone, Config: experiments.DefaultLoad(), Style: "state-only", Round: 2, Position: 4,
			Result: &experiments.LoadStyleResult{Style: "state-only", Tally: experiments.LoadTally{Style: "state-only", Jobs: 200, Done: 200}, Check: experiments.LoadCheck{Jobs: 200, Broken: 4, ZombieResult: 2}, PerSecond: 190, Agrees: true,
				Rounds: []experiments.LoadRound{{Round: 1, Position: 2, Jobs: 100, SpanMS: 500, PerSecond: 200, Agrees: true}}, Throughput: &experiments.LoadSpread{Median: 200, Min: 200, Max: 200, N: 1}}}},
		{Actor: protocol.ActorRunner, Kind: protocol.KindLoad, Load: &protocol.LoadEvent{Phase: experiments.LoadStyleDone, Config: experiments.DefaultLoad(), Style: "state-only",
			Result: &experiments.LoadStyleResult{Style: "state-only", Tally: experiments.LoadTally{Style: "state-only", Jobs: 1000, Done: 1000}, Check: experiments.LoadCheck{Jobs: 1000, Broken: 4, ZombieResult: 2}, PerSecond: 190, Agrees: true}}},
		{Actor: protocol.ActorRunner, Kind: protocol.KindLoad, Load: &protocol.LoadEvent{Phase: experiments.LoadFinished, Config: experiments.DefaultLoad(), Verdict: "State only: 2 of 1,000 jobs ended with a zombie's result; fencelab: 0, at the same throughput: 0.98× theirs, from 0.91× to 1.05× over 5 rounds.",
			Throughput: &experiments.LoadComparison{Ratio: experiments.LoadSpread{Median: 0.98, Min: 0.91, Max: 1.05, N: 5}, Same: true},
			Results:    []experiments.LoadStyleResult{{Style: "fencelab", Agrees: true}}}},
		{Actor: protocol.ActorRunner, Kind: protocol.KindLoad, Load: &protocol.LoadEvent{Phase: experiments.LoadStopped, Config: experiments.DefaultLoad(), Reason: protocol.StopReset}},
	}
}

func TestLoadConfig_Bounds(t *testing.T) {
	for _, c := range []experiments.LoadConfig{
		{Workers: 1}, {Workers: 17}, {Jobs: 9}, {Jobs: 5001}, {LeaseMS: 199}, {LeaseMS: 2001},
		{Styles: []string{"bespoke"}}, {Styles: []string{"fencelab", "fencelab"}},
	} {
		c.Fill()
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := experiments.DefaultLoad().Validate(); err != nil {
		t.Errorf("the default: %v", err)
	}
}

func TestNarrate_EveryKindSaysASentenceAndMatchesTheSchema(t *testing.T) {
	kinds := map[protocol.Kind]bool{}
	for _, e := range sampleEvents() {
		e.V, e.Run, e.At = protocol.ProtocolVersion, "r1", at(5)
		protocol.Narrate(&e)
		kinds[e.Kind] = true
		if e.Text == "" || e.Text == string(e.Kind) || strings.Contains(e.Text, "%!") || strings.Contains(e.Text, "<nil>") {
			t.Errorf("%s event narrated as %q", e.Kind, e.Text)
		}
		if err := labtest.ValidateEvent(e); err != nil {
			b, _ := json.Marshal(e)
			t.Errorf("%s event breaks the schema: %v\n%s", e.Kind, err, b)
		}
	}
	for _, k := range protocol.Kinds() {
		if !kinds[k] {
			t.Errorf("no sample of kind %s", k)
		}
	}
}

func TestSchema_RefusesWhatTheProtocolDoesNot(t *testing.T) {
	good := protocol.Event{V: protocol.ProtocolVersion, At: at(1), Actor: "A", Kind: protocol.KindSQL, Text: "x",
		SQL: &protocol.SQLEvent{Op: protocol.OpClaim, Result: protocol.ResultOK, Stmt: protocol.Stmt{Name: "JobClaim", SQL: "UPDATE", Args: []string{}}, Owner: "worker-a"}}
	raw, _ := json.Marshal(good)
	if err := labtest.Validate(raw); err != nil {
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
		if err := labtest.Validate(b); err == nil {
			t.Errorf("%s: the schema accepts %s", name, b)
		}
	}
}

func TestVerdict_WordsFromTheCodes(t *testing.T) {
	h := labtest.NewHistory()
	h.Claim(10, "A", 1, 1000)
	h.Claim(1100, "A", 2, 1000) // the same name: a restarted pod
	vs := judge.Violations(h.Recs, nil, nil)
	if len(vs) != 0 {
		t.Fatalf("a reclaim alone breaks %v", vs)
	}
	for _, tc := range []struct {
		name string
		out  string
		want []string
	}{
		{"safe", protocol.OutcomeVerdict(protocol.Outcome{Safe: true, ZombieCommit: experiments.CallRejected, Final: protocol.FinalRow{Epoch: 2, ResultFrom: "B"}}),
			[]string{"Safe: the job ended done at epoch 2 with worker B's result in the row and at the receiver; the zombie's late commit was fenced."}},
		{"unsafe, same name", protocol.OutcomeVerdict(protocol.Outcome{SameIdentity: true, Broken: []string{"epoch-check"}, Because: []string{"epoch-check"},
			Violations: []protocol.Violation{{Invariant: protocol.InvStaleWrite, Text: "Worker A's late commit landed."}, {Invariant: protocol.InvRowLastOwner, Text: "The row ends with worker A's result."}}}),
			[]string{"Unsafe: worker A's late commit landed, because the epoch-check guard was off and both workers had the same name", "Also: The row ends with worker A's result."}},
		{"unsafe, two guards", protocol.OutcomeVerdict(protocol.Outcome{Because: []string{"status-check", "owner-check"},
			Violations: []protocol.Violation{{Invariant: protocol.InvRowLastOwner, Text: "The row ends with worker A's result."}}}),
			[]string{"Unsafe: the row ends with worker A's result, because the status-check and owner-check guards were off."}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(tc.out, w) {
				t.Errorf("%s: verdict %q lacks %q", tc.name, tc.out, w)
			}
		}
	}
}
