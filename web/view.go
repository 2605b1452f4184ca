package web

import (
	"strings"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/templates"
)

// Setup is what the page's controls start at: from the permalink, or the
// defaults.
type Setup struct {
	Ordering     experiments.Ordering
	Mode         protocol.Mode // auto or step
	Broken       playground.Guards
	Style        string
	SameIdentity bool
	LeaseMS      int64
	PaceMS       int64
	SkewMS       int64
	Delivery     experiments.Delivery
}

// PageView builds the page's view model from the lab: every choice of the
// setup in the lab's words, marked as s sets it; the article's question,
// table, experiments and guard matrix; what fencing does not do. The
// templates render it and decide nothing.
func PageView(s Setup) templates.View {
	v := templates.View{
		Setup:    templates.Setup{SameIdentity: s.SameIdentity, LeaseMS: s.LeaseMS, PaceMS: s.PaceMS, SkewMS: s.SkewMS},
		Question: protocol.Question, QuestionSetup: protocol.QuestionSetup, QuestionAsk: protocol.QuestionAsk,
		Columns: columns(),
		Limits:  limits(),
		Load: templates.Load{Workers: experiments.DefaultLoad().Workers, Jobs: experiments.DefaultLoad().Jobs, Rounds: experiments.DefaultLoad().Rounds,
			MaxWorkers: experiments.MaxLoadWorkers, MaxJobs: experiments.MaxLoadJobs, LeaseMS: experiments.DefaultLoad().LeaseMS},
	}
	for _, o := range append(experiments.Orderings(), experiments.FreePlay) {
		v.Orderings = append(v.Orderings, templates.Choice{Value: string(o), Label: experiments.OrderingWords(o).Menu, Selected: o == s.Ordering})
	}
	for _, m := range []protocol.Mode{protocol.ModeAuto, protocol.ModeStep} {
		v.Modes = append(v.Modes, templates.Choice{Value: string(m), Label: upperFirst(protocol.ModeWords(m)), Selected: m == s.Mode || (m == protocol.ModeAuto && s.Mode != protocol.ModeStep)})
	}
	style := s.Style
	if style == "" {
		style = "fencelab"
	}
	for _, st := range experiments.Styles() {
		v.Styles = append(v.Styles, templates.StyleChoice{Name: st.Name, Title: st.Title, Source: st.Source, Selected: st.Name == style})
	}
	for _, g := range playground.AllGuards() {
		w := protocol.GuardWords(g)
		v.Guards = append(v.Guards, templates.GuardChoice{Name: w.Name, Help: w.Help, On: s.Broken.On(g)})
	}
	delivery := s.Delivery
	if delivery == "" {
		delivery = experiments.DeliverDirect
	}
	for _, d := range experiments.Deliveries() {
		v.Deliveries = append(v.Deliveries, templates.Choice{Value: string(d), Label: protocol.DeliveryWords(d), Selected: d == delivery})
	}
	for _, a := range experiments.Answers() {
		v.Answers = append(v.Answers, templates.Choice{Value: string(a), Label: protocol.AnswerWords(a)})
	}
	for _, o := range experiments.Orderings() {
		x, _ := experiments.ExpectedOutcome(o) // every scripted ordering has one
		v.Outcomes = append(v.Outcomes, templates.OutcomeRow{Ordering: string(o), Title: experiments.OrderingWords(o).Title,
			Call: x.Words.Call, Commit: x.Words.Commit, Final: x.Words.Final})
		w := experiments.OrderingWords(o)
		v.Matrix.Orderings = append(v.Matrix.Orderings, templates.MatrixOrdering{Name: string(o), Title: w.Title, Short: w.Short})
	}
	for _, b := range []experiments.BatchName{experiments.BatchEpochCheck, experiments.BatchEpochCheckSameIdentity, experiments.BatchReceiverCheck} {
		w := protocol.BatchWords(b)
		v.Experiments = append(v.Experiments, templates.Experiment{Name: string(b), Title: w.Title, Ask: w.Ask})
	}
	for _, m := range []protocol.Mark{protocol.MarkAsCorrect, protocol.MarkNotAsCorrect} {
		w := protocol.MarkWords(m)
		v.Matrix.Legend = append(v.Matrix.Legend, templates.Sign{Tone: w.Tone, Sign: w.Sign, Word: w.Word})
	}
	v.Matrix.Rows = append(v.Matrix.Rows, templates.MatrixRow{Key: protocol.NoGuardOff.Name, Label: protocol.NoGuardOff.Off})
	for _, g := range playground.AllGuards() {
		v.Matrix.Rows = append(v.Matrix.Rows, templates.MatrixRow{Key: g.String(), Label: protocol.GuardWords(g).Off})
	}
	return v
}

// editorLabels name the four statements as the article asks for them.
var editorLabels = map[sandbox.Kind]string{
	sandbox.Claim:    "The claim",
	sandbox.Complete: "Complete",
	sandbox.Fail:     "Fail",
	sandbox.Receiver: "The receiver's rule for one delivery",
}

// tables are the columns of the tables the reader's statements work on,
// in order, as a run's schemas hold them once set up (a test holds them to
// a real setup's catalog).
var tables = []templates.Table{
	{Name: "jobs", Columns: []templates.TableColumn{
		{Name: "id", Type: "bigint"}, {Name: "payload", Type: "jsonb"}, {Name: "status", Type: "text"}, {Name: "owner", Type: "text"},
		{Name: "epoch", Type: "bigint"}, {Name: "lease_until", Type: "timestamptz"}, {Name: "attempts", Type: "integer"},
		{Name: "max_attempts", Type: "integer"}, {Name: "result", Type: "jsonb"}, {Name: "error", Type: "text"},
		{Name: "created_at", Type: "timestamptz"}, {Name: "updated_at", Type: "timestamptz"}, {Name: "run_at", Type: "timestamptz"}}},
	{Name: "deliveries", Columns: []templates.TableColumn{
		{Name: "job_id", Type: "bigint"}, {Name: "epoch", Type: "bigint"}, {Name: "owner", Type: "text"}, {Name: "payload", Type: "jsonb"},
		{Name: "prev_epoch", Type: "bigint"}, {Name: "prev_owner", Type: "text"}, {Name: "accepted", Type: "integer"},
		{Name: "updated_at", Type: "timestamptz"}}},
}

// build is the article's Steps 2 and 3: an editor per statement, in the
// article's order, with the sandbox's spec of it, the leases-alone text it
// starts from and ours; the tables; the cases a check runs.
func build() templates.Build {
	b := templates.Build{Tables: tables, MaxTextBytes: sandbox.MaxTextBytes}
	start, ours := sandbox.Start(), sandbox.Ours()
	for _, k := range sandbox.Kinds() {
		spec, _ := sandbox.SpecOf(k) // every kind has one
		e := templates.Editor{Kind: k.String(), Label: editorLabels[k], Start: start.Text(k), Ours: ours.Text(k),
			Writes: spec.Writes, Verbs: spec.Verbs, Contract: spec.Contract}
		for _, p := range spec.Params {
			e.Params = append(e.Params, templates.Param{Name: p.Name, Type: p.Type, Doc: p.Doc})
		}
		for _, c := range spec.Columns {
			e.Returns = append(e.Returns, templates.Returned{Name: c.Name, Types: c.Types})
		}
		b.Editors = append(b.Editors, e)
	}
	for _, c := range experiments.CheckCases() {
		b.Cases = append(b.Cases, templates.CheckCase{Case: string(c), Title: c.Title()})
	}
	return b
}

// columns are the headers of the article's table.
func columns() templates.Columns {
	return templates.Columns{Call: protocol.ColumnWords(protocol.ColumnCall), Commit: protocol.ColumnWords(protocol.ColumnCommit), Final: protocol.ColumnWords(protocol.ColumnFinal)}
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// limits lists what fencing does not do, in the article's words, each
// with the real runs that show it.
func limits() []templates.Limit {
	run := func(ordering experiments.Ordering, extra string) string {
		return `{"action":"run","mode":"auto","pace_ms":400,"lease_ms":800,"ordering":"` + string(ordering) + `"` + extra + `}`
	}
	return []templates.Limit{
		{ID: "receiver", Title: "The receiver must cooperate",
			Say: "Fencing protects only what checks the token. A third party that ignores the epoch takes the zombie's late call over the new owner's. The article's remedy: give it a stable key it deduplicates on, and look its state up before you retry. That makes one effect per job — but when the zombie calls first, the one effect is the zombie's.",
			Runs: []templates.LimitRun{
				{ID: "ignores", Button: "Run it: a receiver that ignores the epoch", Command: run(experiments.NewOwnerFirst, `,"broken":["receiver-check"]`)},
				{ID: "keyed", Button: "With the remedy: a key it deduplicates on", Command: run(experiments.NewOwnerFirst, `,"delivery":"keyed"`)},
				{ID: "keyed-zombie", Button: "The same key, the zombie first", Command: run(experiments.ZombieFirst, `,"delivery":"keyed"`)},
			}},
		{ID: "heard", Title: "The zombie never wins, but it may be heard",
			Say: "When the zombie reaches the receiver first, its call is accepted before the new owner's newer epoch supersedes it. If that call sent an email or moved money, it happened. The fix the article names: an outbox, written in the same transaction as the compare-and-set and delivered by a relay only after the commit.",
			Runs: []templates.LimitRun{
				{ID: "effects", Button: "Run it, and count the effects", Command: run(experiments.ZombieFirst, ``)},
				{ID: "outbox", Button: "With an outbox", Command: run(experiments.ZombieFirst, `,"delivery":"outbox"`)},
			}},
		{ID: "clock", Title: "The database clock is trusted",
			Say: "Leases are judged on one clock, the database's. A worker that judged by its own, running fast, would take a lease that is still live: the token cannot fix a wrong clock.",
			Runs: []templates.LimitRun{
				{ID: "skew", Button: "Run it: a worker 2 s fast, judging by its own clock", Command: run(experiments.ClockSkew, `,"broken":["db-clock"],"skew_ms":2000`)},
			}},
	}
}
