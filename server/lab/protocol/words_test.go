package protocol_test

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// sameAsCode lists the codes whose words are the code itself, on purpose:
// a new code's words must be written (or the code added here), so a
// missing case fails this test, not a reader.
var sameAsCode = map[string]bool{
	"protocol.RunPhase/starting": true, "protocol.RunPhase/ready": true, "protocol.RunPhase/playing": true, "protocol.RunPhase/paused": true,
	"protocol.RunPhase/finished": true, "protocol.RunPhase/failed": true, "protocol.RunPhase/stopped": true,
	"protocol.ProcState/running": true, "protocol.ProcState/sleeping": true, "protocol.ProcState/exited": true, "protocol.ProcState/unknown": true,
	"experiments.Call/rejected": true, "experiments.Call/accepted": true,
	"protocol.ProcessChange/spawned": true, "protocol.ProcessChange/ready": true, "protocol.ProcessChange/exited": true, "protocol.NoteCode/stopped": true,
}

// TestWords_EveryCodeHasWords walks every value of every code the page
// shows — read from the constants declared in the source, so a code is
// walked the moment it is declared — and fails for one that has no words
// in the word table, or that the lab's lister of its values leaves out.
func TestWords_EveryCodeHasWords(t *testing.T) {
	declared := codes(t)
	w := protocol.Words()
	walk := func(typ string, listed []string, words func(v string) []string) {
		t.Helper()
		got := slices.Clone(listed)
		sort.Strings(got)
		if want := declared[typ]; !slices.Equal(got, want) {
			t.Errorf("%s: the lab lists %v, the source declares %v", typ, got, want)
		}
		for _, v := range declared[typ] {
			ws := words(v)
			if len(ws) == 0 {
				t.Errorf("%s %q has no words", typ, v)
			}
			for _, s := range ws {
				if s == "" || (s == v && !sameAsCode[typ+"/"+v]) {
					t.Errorf("%s %q has no words of its own: %q", typ, v, s)
				}
			}
		}
	}
	strs := func(vs ...string) []string { return vs }
	// The page's own sentences, outside any code.
	for name, s := range map[string]string{"question": w.Question, "same_identity": w.SameIdentity, "predict.running": w.Predict.Running,
		"predict.kept": w.Predict.Kept, "predict.said": w.Predict.Said, "predict.alone": w.Predict.Alone} {
		if s == "" {
			t.Errorf("the word table's %s is empty", name)
		}
	}
	orderings := append(experiments.Orderings(), experiments.FreePlay)
	walk("experiments.Ordering", names(orderings), func(v string) []string {
		o := w.Orderings[experiments.Ordering(v)]
		return strs(o.Title, o.Menu, o.Short)
	})
	walk("experiments.Call", names(protocol.Calls()), func(v string) []string { return strs(w.Calls[experiments.Call(v)]) })
	walk("protocol.ProcState", names(protocol.ProcStates()), func(v string) []string { return strs(w.States[protocol.ProcState(v)]) })
	walk("experiments.Answer", names(experiments.Answers()), func(v string) []string { return strs(w.Answers[experiments.Answer(v)]) })
	walk("experiments.Delivery", names(experiments.Deliveries()), func(v string) []string { return strs(w.Deliveries[experiments.Delivery(v)]) })
	walk("experiments.BatchName", names(experiments.BatchNames()), func(v string) []string {
		b := w.Batches[experiments.BatchName(v)]
		return strs(b.Title, b.Ask)
	})
	walk("experiments.Chapter", names(experiments.Chapters()), func(v string) []string { return strs(experiments.Chapter(v).Title()) })
	walk("protocol.Column", names(protocol.Columns()), func(v string) []string { return strs(w.Columns[protocol.Column(v)]) })
	walk("protocol.FenceReason", names(protocol.FenceReasons()), func(v string) []string {
		r := protocol.FenceReason(v)
		return strs(w.Reasons[r], protocol.FenceReasonPast(r), protocol.ReasonWords(r, protocol.Fence{}))
	})
	walk("protocol.Mode", names(protocol.Modes()), func(v string) []string { return strs(w.Modes[protocol.Mode(v)]) })
	walk("protocol.RunPhase", names(protocol.Phases()), func(v string) []string { return strs(w.Phases[protocol.RunPhase(v)]) })
	walk("protocol.StopReason", names(protocol.StopReasons()), func(v string) []string { return strs(w.Stops[protocol.StopReason(v)]) })
	walk("protocol.Mark", names(protocol.Marks()), func(v string) []string {
		m := w.Marks[protocol.Mark(v)]
		if m.Tone == "" || m.Word == "" {
			t.Errorf("mark %q has no tone or word: %+v", v, m)
		}
		return strs(m.Sign, m.Label, m.Cell)
	})
	// Badges: every code an event's badge is built from.
	walk("protocol.NoteCode", names(protocol.NoteCodes()), func(v string) []string {
		return strs(w.Badges[protocol.BadgeKey(protocol.Event{Note: &protocol.NoteEvent{Code: protocol.NoteCode(v)}})].Label)
	})
	walk("engine.Decision", declared["engine.Decision"], func(v string) []string {
		return strs(w.Badges[protocol.BadgeKey(protocol.Event{Receiver: &protocol.ReceiverEvent{Decision: protocol.Decision(v)}})].Label)
	})
	walk("protocol.CallResult", declared["protocol.CallResult"], func(v string) []string {
		return strs(w.Badges[protocol.BadgeKey(protocol.Event{Call: &protocol.CallEvent{Result: protocol.CallResult(v)}})].Label)
	})
	walk("protocol.ProcessChange", declared["protocol.ProcessChange"], func(v string) []string {
		return strs(w.Badges[protocol.BadgeKey(protocol.Event{Process: &protocol.ProcessEvent{Change: protocol.ProcessChange(v)}})].Label)
	})
	walk("protocol.LeaseChange", declared["protocol.LeaseChange"], func(v string) []string {
		return strs(w.Badges[protocol.BadgeKey(protocol.Event{Lease: &protocol.LeaseEvent{Change: protocol.LeaseChange(v)}})].Label)
	})
	walk("engine.Status", declared["engine.Status"], func(v string) []string {
		return strs(w.Badges[protocol.BadgeKey(protocol.Event{Row: &protocol.RowEvent{New: protocol.RowImage{Status: protocol.Status(v)}}})].Label)
	})
	// A statement's badge, for every op and every result it can have.
	for _, op := range declared["protocol.Op"] {
		for _, r := range declared["protocol.SQLResult"] {
			if op == string(protocol.OpClaim) && r == string(protocol.ResultFenced) || op != string(protocol.OpClaim) && r == string(protocol.ResultNoJob) {
				continue // a claim is never fenced; only a claim finds no job
			}
			e := protocol.Event{SQL: &protocol.SQLEvent{Op: protocol.Op(op), Result: protocol.SQLResult(r)}}
			if b, ok := w.Badges[protocol.BadgeKey(e)]; !ok || b.Label == "" {
				t.Errorf("a %s that came to %s (badge key %q) has no badge", op, r, protocol.BadgeKey(e))
			}
			if r == string(protocol.ResultFenced) {
				e.SQL.Owner, e.SQL.Epoch = "worker-a", i64(2)
				e.SQL.Fenced = &protocol.Fence{RowStatus: protocol.StatusDone, RowOwner: "worker-a", RowEpoch: 2}
				if b, ok := w.Badges[protocol.BadgeKey(e)]; !ok || b.Label == "" || !strings.HasSuffix(protocol.BadgeKey(e), ".overtaken") {
					t.Errorf("a %s refused to its own owner (badge key %q) has no badge", op, protocol.BadgeKey(e))
				}
			}
		}
	}
	for _, e := range []protocol.Event{{Process: &protocol.ProcessEvent{Change: protocol.ProcExited, Signal: "SIGKILL"}},
		{Verdict: &protocol.VerdictEvent{Safe: true}}, {Verdict: &protocol.VerdictEvent{}}, {Error: &protocol.ErrorEvent{}}} {
		if b, ok := w.Badges[protocol.BadgeKey(e)]; !ok || b.Label == "" {
			t.Errorf("badge key %q has no badge", protocol.BadgeKey(e))
		}
	}
	if k := protocol.BadgeKey(protocol.Event{Step: &protocol.StepEvent{}}); k != "" {
		t.Errorf("a step has badge key %q, want none", k)
	}
	// Guards, the correct build's row, and the queue styles.
	for _, g := range playground.AllGuards() {
		if x := w.Guards[g.String()]; x.Help == "" || x.Off == "" {
			t.Errorf("guard %s has no words: %+v", g, x)
		}
	}
	if x := w.Guards["none"]; x.Off == "" {
		t.Error("the correct build has no words where a guard's would go")
	}
	for _, st := range experiments.Styles() {
		if w.Styles[st.Name] == "" || st.Title == "" || st.Short == "" {
			t.Errorf("queue style %s has no words: %+v", st.Name, st)
		}
	}
}

func names[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// TestEncode_CarriesWhatThePageWouldOtherwiseDecide checks the fields
// derived when events and outcomes are encoded: the badge key, who the
// zombie is, whether a delivery took effect, the verdict's mark.
func TestEncode_CarriesWhatThePageWouldOtherwiseDecide(t *testing.T) {
	enc := func(v any) map[string]any {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	overtaken := protocol.Event{Kind: protocol.KindSQL, SQL: &protocol.SQLEvent{Op: protocol.OpComplete, Result: protocol.ResultFenced, Owner: "worker-a", Epoch: i64(2),
		Fenced: &protocol.Fence{RowStatus: protocol.StatusDone, RowOwner: "worker-a", RowEpoch: 2}}}
	if got := enc(overtaken)["badge"]; got != "sql.complete.overtaken" {
		t.Errorf("a commit refused to the job's own owner wears badge %v", got)
	}
	rcv := protocol.Event{Kind: protocol.KindReceiver, Receiver: &protocol.ReceiverEvent{Decision: protocol.AcceptedNewer, From: "B"}}
	r := enc(rcv)["receiver"].(map[string]any)
	if r["accepted"] != true || r["replaces"] != true || rcv.Receiver.Accepted {
		t.Errorf("an accepted-newer delivery encodes as %v (and the event itself was written: %v)", r, rcv.Receiver.Accepted)
	}
	for o, zombie := range map[experiments.Ordering]string{experiments.NewOwnerFirst: "A", experiments.ZombieFirst: "A", experiments.OwnerDoneFirst: "A",
		experiments.CrashBeforeCommit: "A", experiments.ClockSkew: "", experiments.FreePlay: ""} {
		out := protocol.Outcome{Ordering: o, Safe: true, Effects: []protocol.Effect{{From: "A", Decision: protocol.AcceptedFirst}, {From: "B", Decision: protocol.AcceptedNewer}},
			Table: []protocol.Cell{{Column: protocol.ColumnCall, AsCorrect: true}, {Column: protocol.ColumnFinal}}}
		m := enc(out)
		if z, _ := m["zombie"].(string); z != zombie || m["mark"] != "safe" {
			t.Errorf("%s: the outcome's zombie is %q and mark %v, want %q and safe", o, z, m["mark"], zombie)
		}
		fx := m["effects"].([]any)
		if a := fx[0].(map[string]any); (a["zombie"] == true) != (zombie == "A") || a["badge"] != "receiver.accepted-first" {
			t.Errorf("%s: A's effect encodes as %v", o, a)
		}
		if b := fx[1].(map[string]any); b["zombie"] == true {
			t.Errorf("%s: B's effect is the zombie's", o)
		}
		cells := m["table"].([]any)
		if cells[0].(map[string]any)["mark"] != "as-correct" || cells[1].(map[string]any)["mark"] != "not-as-correct" {
			t.Errorf("%s: the table's cells encode as %v", o, cells)
		}
		info := enc(protocol.RunInfo{Ordering: o})
		if z, _ := info["zombie"].(string); z != zombie {
			t.Errorf("%s: the run's zombie is %q, want %q", o, z, zombie)
		}
	}
}

// TestFinishBatch_EachRunCanBeOpened checks a finished experiment names
// each of its runs with what it came to, in words to put on its button.
func TestFinishBatch_EachRunCanBeOpened(t *testing.T) {
	cells := []protocol.MatrixCell{{Run: "r2", Ordering: experiments.NewOwnerFirst, Broken: "receiver-check"}, {Run: "r3", Ordering: experiments.ZombieFirst, Broken: "receiver-check"},
		{Run: "r4", Ordering: experiments.OwnerDoneFirst}}
	bad := protocol.Outcome{Ordering: experiments.NewOwnerFirst, Violations: []protocol.Violation{{Invariant: protocol.InvReceiverLastOwner, Text: "The receiver ends with worker A's result."}}}
	ok := protocol.Outcome{Ordering: experiments.ZombieFirst, Safe: true, ZombieCommit: experiments.CallRejected}
	ev := judge.FinishBatch(experiments.BatchReceiverCheck, 300, cells, []*protocol.Outcome{&bad, &ok, nil})
	want := []protocol.BatchRun{
		{Run: "r2", Ordering: experiments.NewOwnerFirst, Broken: "receiver-check", Mark: protocol.MarkUnsafe, Words: "new-owner-first: ✗ unsafe — open this run"},
		{Run: "r3", Ordering: experiments.ZombieFirst, Broken: "receiver-check", Mark: protocol.MarkSafe, Words: "zombie-first: ✓ safe — open this run"},
		{Run: "r4", Ordering: experiments.OwnerDoneFirst, Mark: protocol.MarkError, Words: "owner-done-first: ! no verdict — open this run"},
	}
	if !slices.Equal(ev.Runs, want) {
		t.Errorf("runs %+v\nwant %+v", ev.Runs, want)
	}
	if ev.Phase != protocol.BatchFinished || !slices.Equal(ev.Unsafe, []string{"r2"}) || !strings.Contains(ev.Answer, "New-owner-first failed") {
		t.Errorf("the finished batch: %+v", ev)
	}
}

// TestNarrate_EveryRowOpHasWords walks every row op the source declares,
// the history trigger's names for a change, and fails for one that the
// narration tells in no words of its own: in the words of another op, or
// in those of a change it does not know (which is what an update is).
func TestNarrate_EveryRowOpHasWords(t *testing.T) {
	seen := map[string]string{}
	for _, op := range codes(t)["protocol.RowOp"] {
		e := protocol.Event{Kind: protocol.KindRow, Actor: protocol.ActorPostgres, Row: &protocol.RowEvent{JobID: 7, Op: protocol.RowOp(op), Writer: "B",
			New: protocol.RowImage{Status: protocol.StatusFailed, Owner: "worker-a", Epoch: 3}}}
		protocol.Narrate(&e)
		if strings.Contains(e.Text, " changed: ") != (op == string(protocol.RowUpdate)) {
			t.Errorf("row op %q is told as %q", op, e.Text)
		}
		if other, ok := seen[e.Text]; ok {
			t.Errorf("row ops %q and %q are told alike: %q", other, op, e.Text)
		}
		seen[e.Text] = op
	}
	if _, ok := seen[""]; ok || len(seen) < 8 {
		t.Errorf("the row ops told: %v", seen)
	}
}

// The place in line in words, with the estimate when there is one.
func TestInLineWords_PlaceAndAbout(t *testing.T) {
	for _, tc := range []struct {
		place int
		wait  time.Duration
		want  string
	}{
		{1, 0, "Your check is next in line."},
		{3, 0, "Your check is 3rd in line."},
		{11, 0, "Your check is 11th in line."},
		{22, 0, "Your check is 22nd in line."},
		{1, 12 * time.Second, "Your check is next in line, about 12 s."},
		{3, 40 * time.Second, "Your check is 3rd in line, about 40 s."},
		{9, 170 * time.Second, "Your check is 9th in line, about 3 min."},
	} {
		if got := protocol.InLineWords(tc.place, tc.wait); got != tc.want {
			t.Errorf("InLineWords(%d, %v) = %q, want %q", tc.place, tc.wait, got, tc.want)
		}
	}
}
