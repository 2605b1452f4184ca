package lab_test

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab"
)

// sameAsCode lists the codes whose words are the code itself, on purpose:
// a new code's words must be written (or the code added here), so a
// missing case fails this test, not a reader.
var sameAsCode = map[string]bool{
	"lab.RunPhase/starting": true, "lab.RunPhase/ready": true, "lab.RunPhase/playing": true, "lab.RunPhase/paused": true,
	"lab.RunPhase/finished": true, "lab.RunPhase/failed": true, "lab.RunPhase/stopped": true,
	"lab.ProcState/running": true, "lab.ProcState/sleeping": true, "lab.ProcState/exited": true, "lab.ProcState/unknown": true,
	"lab.Call/rejected": true, "lab.Call/accepted": true,
	"lab.ProcessChange/spawned": true, "lab.ProcessChange/ready": true, "lab.ProcessChange/exited": true, "lab.NoteCode/stopped": true,
}

// TestWords_EveryCodeHasWords walks every value of every code the page
// shows — read from the constants declared in the source, so a code is
// walked the moment it is declared — and fails for one that has no words
// in the word table, or that the lab's lister of its values leaves out.
func TestWords_EveryCodeHasWords(t *testing.T) {
	declared := codes(t)
	w := lab.Words()
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
	orderings := append(lab.Orderings(), lab.FreePlay)
	walk("lab.Ordering", names(orderings), func(v string) []string {
		o := w.Orderings[lab.Ordering(v)]
		return strs(o.Title, o.Menu, o.Short)
	})
	walk("lab.Call", names(lab.Calls()), func(v string) []string { return strs(w.Calls[lab.Call(v)]) })
	walk("lab.ProcState", names(lab.ProcStates()), func(v string) []string { return strs(w.States[lab.ProcState(v)]) })
	walk("lab.Answer", names(lab.Answers()), func(v string) []string { return strs(w.Answers[lab.Answer(v)]) })
	walk("lab.Delivery", names(lab.Deliveries()), func(v string) []string { return strs(w.Deliveries[lab.Delivery(v)]) })
	walk("lab.BatchName", names(lab.BatchNames()), func(v string) []string {
		b := w.Batches[lab.BatchName(v)]
		return strs(b.Title, b.Ask)
	})
	walk("lab.Column", names(lab.Columns()), func(v string) []string { return strs(w.Columns[lab.Column(v)]) })
	walk("engine.FenceReason", names(lab.FenceReasons()), func(v string) []string { return strs(w.Reasons[engine.FenceReason(v)]) })
	walk("lab.Mode", names(lab.Modes()), func(v string) []string { return strs(w.Modes[lab.Mode(v)]) })
	walk("lab.RunPhase", names(lab.Phases()), func(v string) []string { return strs(w.Phases[lab.RunPhase(v)]) })
	walk("lab.StopReason", names(lab.StopReasons()), func(v string) []string { return strs(w.Stops[lab.StopReason(v)]) })
	walk("lab.Mark", names(lab.Marks()), func(v string) []string {
		m := w.Marks[lab.Mark(v)]
		if m.Tone == "" || m.Word == "" {
			t.Errorf("mark %q has no tone or word: %+v", v, m)
		}
		return strs(m.Sign, m.Label, m.Cell)
	})
	// Badges: every code an event's badge is built from.
	walk("lab.NoteCode", names(lab.NoteCodes()), func(v string) []string {
		return strs(w.Badges[lab.BadgeKey(lab.Event{Note: &lab.NoteEvent{Code: lab.NoteCode(v)}})].Label)
	})
	walk("engine.Decision", declared["engine.Decision"], func(v string) []string {
		return strs(w.Badges[lab.BadgeKey(lab.Event{Receiver: &lab.ReceiverEvent{Decision: engine.Decision(v)}})].Label)
	})
	walk("lab.CallResult", declared["lab.CallResult"], func(v string) []string {
		return strs(w.Badges[lab.BadgeKey(lab.Event{Call: &lab.CallEvent{Result: lab.CallResult(v)}})].Label)
	})
	walk("lab.ProcessChange", declared["lab.ProcessChange"], func(v string) []string {
		return strs(w.Badges[lab.BadgeKey(lab.Event{Process: &lab.ProcessEvent{Change: lab.ProcessChange(v)}})].Label)
	})
	walk("lab.LeaseChange", declared["lab.LeaseChange"], func(v string) []string {
		return strs(w.Badges[lab.BadgeKey(lab.Event{Lease: &lab.LeaseEvent{Change: lab.LeaseChange(v)}})].Label)
	})
	walk("engine.Status", declared["engine.Status"], func(v string) []string {
		return strs(w.Badges[lab.BadgeKey(lab.Event{Row: &lab.RowEvent{New: lab.RowImage{Status: engine.Status(v)}}})].Label)
	})
	// A statement's badge, for every op and every result it can have.
	for _, op := range declared["lab.Op"] {
		for _, r := range declared["lab.SQLResult"] {
			if op == string(lab.OpClaim) && r == string(lab.ResultFenced) || op != string(lab.OpClaim) && r == string(lab.ResultNoJob) {
				continue // a claim is never fenced; only a claim finds no job
			}
			e := lab.Event{SQL: &lab.SQLEvent{Op: lab.Op(op), Result: lab.SQLResult(r)}}
			if b, ok := w.Badges[lab.BadgeKey(e)]; !ok || b.Label == "" {
				t.Errorf("a %s that came to %s (badge key %q) has no badge", op, r, lab.BadgeKey(e))
			}
			if r == string(lab.ResultFenced) {
				e.SQL.Owner, e.SQL.Epoch = "worker-a", i64(2)
				e.SQL.Fenced = &lab.Fence{RowStatus: engine.StatusDone, RowOwner: "worker-a", RowEpoch: 2}
				if b, ok := w.Badges[lab.BadgeKey(e)]; !ok || b.Label == "" || !strings.HasSuffix(lab.BadgeKey(e), ".overtaken") {
					t.Errorf("a %s refused to its own owner (badge key %q) has no badge", op, lab.BadgeKey(e))
				}
			}
		}
	}
	for _, e := range []lab.Event{{Process: &lab.ProcessEvent{Change: lab.ProcExited, Signal: "SIGKILL"}},
		{Verdict: &lab.VerdictEvent{Safe: true}}, {Verdict: &lab.VerdictEvent{}}, {Error: &lab.ErrorEvent{}}} {
		if b, ok := w.Badges[lab.BadgeKey(e)]; !ok || b.Label == "" {
			t.Errorf("badge key %q has no badge", lab.BadgeKey(e))
		}
	}
	if k := lab.BadgeKey(lab.Event{Step: &lab.StepEvent{}}); k != "" {
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
	for _, st := range lab.Styles() {
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
	overtaken := lab.Event{Kind: lab.KindSQL, SQL: &lab.SQLEvent{Op: lab.OpComplete, Result: lab.ResultFenced, Owner: "worker-a", Epoch: i64(2),
		Fenced: &lab.Fence{RowStatus: engine.StatusDone, RowOwner: "worker-a", RowEpoch: 2}}}
	if got := enc(overtaken)["badge"]; got != "sql.complete.overtaken" {
		t.Errorf("a commit refused to the job's own owner wears badge %v", got)
	}
	rcv := lab.Event{Kind: lab.KindReceiver, Receiver: &lab.ReceiverEvent{Decision: engine.AcceptedNewer, From: "B"}}
	r := enc(rcv)["receiver"].(map[string]any)
	if r["accepted"] != true || r["replaces"] != true || rcv.Receiver.Accepted {
		t.Errorf("an accepted-newer delivery encodes as %v (and the event itself was written: %v)", r, rcv.Receiver.Accepted)
	}
	for o, zombie := range map[lab.Ordering]string{lab.NewOwnerFirst: "A", lab.ZombieFirst: "A", lab.OwnerDoneFirst: "A",
		lab.CrashBeforeCommit: "A", lab.ClockSkew: "", lab.FreePlay: ""} {
		out := lab.Outcome{Ordering: o, Safe: true, Effects: []lab.Effect{{From: "A", Decision: engine.AcceptedFirst}, {From: "B", Decision: engine.AcceptedNewer}},
			Table: []lab.Cell{{Column: lab.ColumnCall, AsCorrect: true}, {Column: lab.ColumnFinal}}}
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
		info := enc(lab.RunInfo{Ordering: o})
		if z, _ := info["zombie"].(string); z != zombie {
			t.Errorf("%s: the run's zombie is %q, want %q", o, z, zombie)
		}
	}
}

// TestFinishBatch_EachRunCanBeOpened checks a finished experiment names
// each of its runs with what it came to, in words to put on its button.
func TestFinishBatch_EachRunCanBeOpened(t *testing.T) {
	cells := []lab.MatrixCell{{Run: "r2", Ordering: lab.NewOwnerFirst, Broken: "receiver-check"}, {Run: "r3", Ordering: lab.ZombieFirst, Broken: "receiver-check"},
		{Run: "r4", Ordering: lab.OwnerDoneFirst}}
	bad := lab.Outcome{Ordering: lab.NewOwnerFirst, Violations: []lab.Violation{{Invariant: lab.InvReceiverLastOwner, Text: "The receiver ends with worker A's result."}}}
	ok := lab.Outcome{Ordering: lab.ZombieFirst, Safe: true, ZombieCommit: lab.CallRejected}
	ev := lab.FinishBatch(lab.BatchReceiverCheck, 300, cells, []*lab.Outcome{&bad, &ok, nil})
	want := []lab.BatchRun{
		{Run: "r2", Ordering: lab.NewOwnerFirst, Broken: "receiver-check", Mark: lab.MarkUnsafe, Words: "new-owner-first: ✗ unsafe — open this run"},
		{Run: "r3", Ordering: lab.ZombieFirst, Broken: "receiver-check", Mark: lab.MarkSafe, Words: "zombie-first: ✓ safe — open this run"},
		{Run: "r4", Ordering: lab.OwnerDoneFirst, Mark: lab.MarkError, Words: "owner-done-first: ! no verdict — open this run"},
	}
	if !slices.Equal(ev.Runs, want) {
		t.Errorf("runs %+v\nwant %+v", ev.Runs, want)
	}
	if ev.Phase != lab.BatchFinished || !slices.Equal(ev.Unsafe, []string{"r2"}) || !strings.Contains(ev.Answer, "New-owner-first failed") {
		t.Errorf("the finished batch: %+v", ev)
	}
}

// TestNarrate_EveryRowOpHasWords walks every row op the source declares,
// the history trigger's names for a change, and fails for one that the
// narration tells in no words of its own: in the words of another op, or
// in those of a change it does not know (which is what an update is).
func TestNarrate_EveryRowOpHasWords(t *testing.T) {
	seen := map[string]string{}
	for _, op := range codes(t)["lab.RowOp"] {
		e := lab.Event{Kind: lab.KindRow, Actor: lab.ActorPostgres, Row: &lab.RowEvent{JobID: 7, Op: lab.RowOp(op), Writer: "B",
			New: lab.RowImage{Status: engine.StatusFailed, Owner: "worker-a", Epoch: 3}}}
		lab.Narrate(&e)
		if strings.Contains(e.Text, " changed: ") != (op == string(lab.RowUpdate)) {
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
