package protocol

import (
	"fmt"
	"unicode/utf8"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/experiments"
)

// GuardText is how people name a guard.
type GuardText struct {
	Name string `json:"name"` // "epoch-check"
	Help string `json:"help"` // what it does, one line
	Off  string `json:"off"`  // "epoch-check off"
}

// NoGuardOff names the correct build where a guard's name would go: the
// row of the guard matrix with every guard on (its cells' Broken is "",
// their key "none").
var NoGuardOff = GuardText{Name: "none", Help: "every guard on: the correct build", Off: "all guards on"}

// GuardWords returns the words for a guard. The line of help is the
// engine's own (playground.Guard.Help), so it is written once.
func GuardWords(g playground.Guard) GuardText {
	return GuardText{Name: g.String(), Help: g.Help(), Off: g.String() + " off"}
}

// Calls lists every fate of a zombie's call.
func Calls() []experiments.Call {
	return []experiments.Call{experiments.CallRejected, experiments.CallAccepted, experiments.CallAcceptedThenSuperseded, experiments.CallNotAttempted, experiments.CallNeverSent, experiments.CallSkipped}
}

// FenceReasons lists the engine's reasons a fenced write was refused.
func FenceReasons() []FenceReason {
	return []FenceReason{ReasonNotRunning, ReasonOwnerChanged, ReasonEpochChanged}
}

// fenceReasonWords are a fence reason's words without the row's values:
// as it stands, and told after the fact.
var fenceReasonWords = map[FenceReason]struct{ now, past string }{
	ReasonNotRunning:   {"the job is no longer running", "the job was no longer running"},
	ReasonOwnerChanged: {"another owner holds the job", "another owner held the job"},
	ReasonEpochChanged: {"the row's epoch moved on", "the row's epoch had moved on"},
}

// FenceReasonWords says a reason a fenced write was refused, without the
// row's values: "the row's epoch moved on".
func FenceReasonWords(r FenceReason) string {
	if w, ok := fenceReasonWords[r]; ok {
		return w.now
	}
	return string(r)
}

// FenceReasonPast is FenceReasonWords told after the fact, as the reveal
// tells a run: "the row's epoch had moved on".
func FenceReasonPast(r FenceReason) string {
	if w, ok := fenceReasonWords[r]; ok {
		return w.past
	}
	return string(r)
}

// ReasonWords says, in a clause, why a fenced write was refused.
func ReasonWords(r FenceReason, f Fence) string {
	switch r {
	case ReasonNotRunning:
		return fmt.Sprintf("the job is %s, no longer running", f.RowStatus)
	case ReasonOwnerChanged:
		return fmt.Sprintf("the job is owned by %s now", f.RowOwner)
	case ReasonEpochChanged:
		return fmt.Sprintf("the row is at epoch %d", f.RowEpoch)
	}
	return string(r)
}

// Badge is the short label that says at a glance what an event came to,
// and its tone (ok, bad, fenced, refused, same, frozen, expired, row, quiet).
type Badge struct {
	Tone  string `json:"tone"`
	Label string `json:"label"`
}

// badges maps a badge key to its badge. The keys are built from an event's
// fields by BadgeKey: "sql.<op>.<result>" (and "sql.<op>.overtaken"),
// "call.<result>", "receiver.<decision>", "process.<change>" (and
// "process.killed"), "lease.<change>", "row.<status>", "note.<code>",
// "verdict.safe", "verdict.unsafe", "error".
var badges = map[string]Badge{
	"sql.claim.ok":        {"ok", "claimed"},
	"sql.claim.no-job":    {"quiet", "no job"},
	"sql.renew.ok":        {"quiet", "♥ renewed"},
	"sql.renew.fenced":    {"fenced", "✗ lease lost"},
	"sql.complete.ok":     {"ok", "✓ committed"},
	"sql.complete.fenced": {"fenced", "✗ fenced"},
	"sql.fail.ok":         {"ok", "failure reported"},
	"sql.fail.fenced":     {"fenced", "✗ fenced"},
	// The job's own owner refused: someone else finished the job first.
	"sql.complete.overtaken": {"refused", "✗ refused: already done by another"},
	"sql.fail.overtaken":     {"refused", "✗ refused: already done by another"},
	"sql.renew.overtaken":    {"refused", "✗ refused: already done by another"},
	"sql.error":              {"bad", "error"},

	"call.accepted": {"ok", "receiver said 200"},
	"call.refused":  {"refused", "receiver said 409"},
	"call.error":    {"bad", "call failed"},
	"call.deferred": {"quiet", "⧗ to the outbox"},
	"call.skipped":  {"same", "already delivered: not called"},

	"receiver." + string(AcceptedFirst): {"ok", "✓ accepted (first)"},
	"receiver." + string(AcceptedNewer): {"ok", "✓ accepted (newer epoch)"},
	"receiver." + string(AcceptedSame):  {"same", "✓ accepted again (same epoch)"},
	"receiver." + string(AcceptedOlder): {"bad", "⚠ accepted an OLDER epoch"},
	"receiver." + string(RefusedStale):  {"refused", "✗ refused: stale epoch"},
	"receiver." + string(Duplicate):     {"same", "duplicate key: no effect"},

	"process.spawned":   {"quiet", "spawned"},
	"process.ready":     {"quiet", "ready"},
	"process.stopped":   {"frozen", "❄ frozen (SIGSTOP)"},
	"process.continued": {"ok", "▶ thawed (SIGCONT)"},
	"process.killing":   {"bad", "SIGKILL sent"},
	"process.killed":    {"bad", "✝ killed (SIGKILL)"},
	"process.exited":    {"quiet", "exited"},

	"lease.expired":    {"expired", "◔ lease ran out"},
	"lease.taken-live": {"bad", "⚠ taken while live"},

	"row.pending": {"row", "row: pending"},
	"row.running": {"row", "row: running"},
	"row.done":    {"row", "row: done"},
	"row.failed":  {"row", "row: failed"},

	"note." + string(NoteSkip):       {"quiet", "skips"},
	"note." + string(NoteGone):       {"quiet", "nothing to do"},
	"note." + string(NoteWakesLater): {"frozen", "acts once thawed"},
	"note." + string(NoteNoLease):    {"quiet", "no lease"},
	"note." + string(NoteStallLimit): {"bad", "frozen too long"},
	"note." + string(NoteStopped):    {"quiet", "stopped"},
	"note." + string(NoteOutput):     {"quiet", "printed"},
	"note." + string(NoteLog):        {"quiet", "logged"},
	"note." + string(NoteInLine):     {"quiet", "in line"},
	"note." + string(NoteChapter):    {"quiet", "chapter opened"},
	"note." + string(NoteClassEnded): {"quiet", "class ended"},
	"note." + string(NoteClassRun):   {"quiet", "run for everyone"},

	"verdict." + string(MarkSafe):   markBadge(MarkSafe),
	"verdict." + string(MarkUnsafe): markBadge(MarkUnsafe),
	"error":                         {"bad", "error"},
}

func markBadge(m Mark) Badge {
	w := MarkWords(m)
	return Badge{Tone: w.Tone, Label: w.Label}
}

// receiverBadge is the badge key of a receiver's decision.
func receiverBadge(d Decision) string { return "receiver." + string(d) }

// MarkText is a mark's sign and words.
type MarkText struct {
	Tone  string `json:"tone"`  // as a Badge's: ok, bad, quiet
	Sign  string `json:"sign"`  // the sign alone, beside words of its own: "✓"
	Word  string `json:"word"`  // the words alone, for a screen reader or a sentence: "safe"
	Label string `json:"label"` // standing alone: "✓ Safe"
	Cell  string `json:"cell"`  // in a cell of the guard matrix: "✓ safe"
}

// MarkWords returns a mark's sign and words.
func MarkWords(m Mark) MarkText {
	switch m {
	case MarkSafe:
		return MarkText{"ok", "✓", "safe", "✓ Safe", "✓ safe"}
	case MarkUnsafe:
		return MarkText{"bad", "✗", "unsafe", "✗ Unsafe", "✗ UNSAFE"}
	case MarkError:
		return MarkText{"bad", "!", "no verdict", "! No verdict", "! error"}
	case MarkStopped:
		return MarkText{"quiet", "–", "stopped", "– Stopped", "– stopped"}
	case MarkPending:
		return MarkText{"quiet", "…", "waiting", "… Waiting", "…"}
	case MarkRunning:
		return MarkText{"quiet", "⟳", "running", "⟳ Running", "⟳"}
	case MarkAsCorrect:
		return MarkText{"ok", "✓", "as a correct build", "✓ as a correct build", "✓"}
	case MarkNotAsCorrect:
		return MarkText{"bad", "✗", "not as a correct build", "✗ not as a correct build", "✗"}
	case MarkRight:
		return MarkText{"ok", "✓", "right", "✓ Right", "✓"}
	case MarkWrong:
		return MarkText{"bad", "✗", "not this time", "✗ Not this time", "✗"}
	}
	return MarkText{"quiet", "", string(m), string(m), string(m)}
}

// BadgeKey returns the key of an event's badge in Words.Badges, or "" for
// an event that has none. Every encoded event carries it as Event.Badge:
// the page looks the badge up and never builds a key of its own.
func BadgeKey(e Event) string {
	switch {
	case e.SQL != nil && e.SQL.Result == ResultFailed:
		return "sql.error"
	case e.SQL != nil && e.SQL.Result == ResultFenced && e.SQL.Fenced != nil && e.SQL.Epoch != nil && e.SQL.Fenced.RowEpoch == *e.SQL.Epoch && e.SQL.Fenced.RowOwner == e.SQL.Owner:
		// The writer still holds the row's epoch and owner: it is the
		// job's owner, refused only because another finished the job.
		return "sql." + string(e.SQL.Op) + ".overtaken"
	case e.SQL != nil:
		return "sql." + string(e.SQL.Op) + "." + string(e.SQL.Result)
	case e.Call != nil:
		return "call." + string(e.Call.Result)
	case e.Receiver != nil:
		return receiverBadge(e.Receiver.Decision)
	case e.Process != nil && e.Process.Change == ProcExited && e.Process.Signal == "SIGKILL":
		return "process.killed"
	case e.Process != nil:
		return "process." + string(e.Process.Change)
	case e.Lease != nil:
		return "lease." + string(e.Lease.Change)
	case e.Row != nil:
		return "row." + string(e.Row.New.Status)
	case e.Note != nil:
		return "note." + string(e.Note.Code)
	case e.Verdict != nil:
		return "verdict." + string(SafeMark(e.Verdict.Safe))
	case e.Error != nil:
		return "error"
	}
	return ""
}

// ProcStates lists every process state.
func ProcStates() []ProcState {
	return []ProcState{StateRunning, StateSleeping, StateStopped, StateZombie, StateExited, StateKilled, StateUnknown}
}

// StateWords says a worker's process state as its card shows it.
func StateWords(s ProcState) string {
	switch s {
	case StateStopped:
		return "stopped (T)"
	case StateZombie:
		return "zombie (exited, not yet reaped)"
	case StateKilled:
		return "killed (SIGKILL)"
	}
	return string(s)
}

// Question is the article's question, asked before anything is shown.
const Question = QuestionSetup + " " + QuestionAsk

// QuestionSetup is the story the question asks about, and QuestionAsk the
// question itself: a narrow page keeps the second once the reader has seen
// the first.
const (
	QuestionSetup = "Worker A claims a job with a short lease, then freezes. Worker B reclaims the job and is still working when A wakes up."
	QuestionAsk   = "With leases alone, what happens to A's commit?"
)

// AnswerWords says an answer as the article does.
func AnswerWords(a experiments.Answer) string {
	switch a {
	case experiments.AnswerRejected:
		return "Postgres rejects it, because the lease expired"
	case experiments.AnswerSucceeds:
		return "It succeeds, and A's result replaces B's"
	case experiments.AnswerBlocks:
		return "It blocks until B finishes"
	}
	return string(a)
}

// BatchText is how people name a batch of runs.
type BatchText struct {
	Title string `json:"title"`
	Ask   string `json:"ask"` // what it asks, in the article's words
}

// BatchWords returns the words for a batch.
func BatchWords(b experiments.BatchName) BatchText {
	switch b {
	case experiments.BatchMatrix:
		return BatchText{"The guard matrix", "Every guard off, in every ordering, with two names and with one."}
	case experiments.BatchEpochCheck:
		return BatchText{"Remove AND epoch = :epoch from the compare-and-set", "Which ordering fails, and why?"}
	case experiments.BatchEpochCheckSameIdentity:
		return BatchText{"The same, with one name for both workers", "A restarted pod keeps its hostname: which ordering fails now?"}
	case experiments.BatchReceiverCheck:
		return BatchText{"Put it back; remove the epoch check from the receiver", "Which ordering fails, and why?"}
	case experiments.BatchCheck:
		return BatchText{"Check it", "Both orderings must end the same way."}
	}
	return BatchText{string(b), ""}
}

// DeliveryWords says a delivery mode as the page offers it.
func DeliveryWords(d experiments.Delivery) string {
	switch d {
	case experiments.DeliverDirect:
		return "the receiver keeps the newest epoch (fenced)"
	case experiments.DeliverKeyed:
		return "a third party that knows no epochs: it deduplicates on a stable key"
	case experiments.DeliverOutbox:
		return "an outbox, written with the commit and sent after it"
	}
	return string(d)
}

// Column names a column of the article's table.
type Column string

// The columns.
const (
	ColumnCall   Column = "call"
	ColumnCommit Column = "commit"
	ColumnFinal  Column = "final"
)

// Columns lists the columns of the article's table, in its order.
func Columns() []Column { return []Column{ColumnCall, ColumnCommit, ColumnFinal} }

// ColumnWords is the header of a column of the article's table.
func ColumnWords(c Column) string {
	switch c {
	case ColumnCall:
		return "zombie's receiver call"
	case ColumnCommit:
		return "zombie's commit"
	case ColumnFinal:
		return "final state"
	}
	return string(c)
}

// PredictText is the Predict panel's words around the reader's pick: while
// its run plays, before it, and the two halves of its answer ("You said:
// …. With leases alone: ….").
type PredictText struct {
	Running string `json:"running"`
	Kept    string `json:"kept"`
	Said    string `json:"said"`
	Alone   string `json:"alone"`
}

// WordTable is every code's words, as the page gets them with its first
// state: it looks words up here and never writes its own.
// TestWords_EveryCodeHasWords walks every value of every code it holds.
type WordTable struct {
	Version   int                                               `json:"version"`
	Orderings map[experiments.Ordering]experiments.OrderingText `json:"orderings"`
	Guards    map[string]GuardText                              `json:"guards"` // every guard, and NoGuardOff under "none"
	Calls     map[experiments.Call]string                       `json:"calls"`
	Badges    map[string]Badge                                  `json:"badges"`
	States    map[ProcState]string                              `json:"states"`
	Question  string                                            `json:"question"`
	// SameIdentity names a run whose new owner has the zombie's name.
	SameIdentity string `json:"same_identity"`
	// Predict is what the Predict panel says around the reader's pick.
	Predict    PredictText                         `json:"predict"`
	Answers    map[experiments.Answer]string       `json:"answers"`
	Deliveries map[experiments.Delivery]string     `json:"deliveries"`
	Batches    map[experiments.BatchName]BatchText `json:"batches"`
	Columns    map[Column]string                   `json:"columns"`
	Reasons    map[FenceReason]string              `json:"reasons"`
	Modes      map[Mode]string                     `json:"modes"`
	Phases     map[RunPhase]string                 `json:"phases"`
	Stops      map[StopReason]string               `json:"stops"`
	Marks      map[Mark]MarkText                   `json:"marks"`
	// Ended lists the phases a run never leaves (RunPhase.Ended).
	Ended []RunPhase `json:"ended"`
	// Styles names each queue style shortly, as the load lab's chart does.
	Styles map[string]string `json:"styles"`
}

// Modes lists the ways a run is played.
func Modes() []Mode { return []Mode{ModeAuto, ModeStep, ModeFree} }

// ModeWords says how a run is played: "step by step".
func ModeWords(m Mode) string {
	switch m {
	case ModeAuto:
		return "automatically"
	case ModeStep:
		return "step by step"
	case ModeFree:
		return "free play"
	}
	return string(m)
}

// Phases lists a run's phases, in the order a run goes through them.
func Phases() []RunPhase {
	return []RunPhase{PhaseStarting, PhaseReady, PhasePlaying, PhasePaused, PhaseFinished, PhaseFailed, PhaseStopped}
}

// PhaseWords says where a run is.
func PhaseWords(p RunPhase) string {
	switch p {
	case PhaseStarting:
		return "starting"
	case PhaseReady:
		return "ready"
	case PhasePlaying:
		return "playing"
	case PhasePaused:
		return "paused"
	case PhaseFinished:
		return "finished"
	case PhaseFailed:
		return "failed"
	case PhaseStopped:
		return "stopped"
	}
	return string(p)
}

// StopReasons lists why a run may be stopped.
func StopReasons() []StopReason {
	return []StopReason{StopReset, StopReplaced, StopTimeLimit, StopAbandoned, StopWorkerLost, StopSessionEnd, StopShutdown, StopInterrupted, StopStartFailed}
}

// NoteCodes lists the notes.
func NoteCodes() []NoteCode {
	return []NoteCode{NoteSkip, NoteGone, NoteWakesLater, NoteNoLease, NoteStallLimit, NoteStopped, NoteOutput, NoteLog, NoteInLine, NoteChapter, NoteClassEnded, NoteClassRun}
}

// Words returns the word table.
func Words() WordTable {
	w := WordTable{Version: ProtocolVersion, Orderings: map[experiments.Ordering]experiments.OrderingText{}, Guards: map[string]GuardText{},
		Calls: map[experiments.Call]string{}, Badges: map[string]Badge{}, States: map[ProcState]string{}, Question: Question,
		SameIdentity: "one name for both workers",
		Predict: PredictText{
			Running: "Running it with leases alone: A freezes, its lease runs out, B takes the job over, and A wakes up while B is still working…",
			Kept:    "Your answer is kept. Now run it with leases alone.",
			Said:    "You said",
			Alone:   "With leases alone",
		},
		Answers: map[experiments.Answer]string{}, Deliveries: map[experiments.Delivery]string{}, Batches: map[experiments.BatchName]BatchText{},
		Columns: map[Column]string{}, Reasons: map[FenceReason]string{}, Modes: map[Mode]string{},
		Phases: map[RunPhase]string{}, Stops: map[StopReason]string{}, Marks: map[Mark]MarkText{}, Styles: map[string]string{}}
	for _, st := range experiments.Styles() {
		w.Styles[st.Name] = StyleShort(st.Name)
	}
	for _, o := range append(experiments.Orderings(), experiments.FreePlay) {
		w.Orderings[o] = experiments.OrderingWords(o)
	}
	for _, g := range playground.AllGuards() {
		w.Guards[g.String()] = GuardWords(g)
	}
	w.Guards[NoGuardOff.Name] = NoGuardOff
	for _, c := range Calls() {
		w.Calls[c] = c.Words()
	}
	for k, b := range badges {
		w.Badges[k] = b
	}
	for _, s := range ProcStates() {
		w.States[s] = StateWords(s)
	}
	for _, a := range experiments.Answers() {
		w.Answers[a] = AnswerWords(a)
	}
	for _, d := range experiments.Deliveries() {
		w.Deliveries[d] = DeliveryWords(d)
	}
	for _, b := range experiments.BatchNames() {
		w.Batches[b] = BatchWords(b)
	}
	for _, c := range Columns() {
		w.Columns[c] = ColumnWords(c)
	}
	for _, r := range FenceReasons() {
		w.Reasons[r] = FenceReasonWords(r)
	}
	for _, m := range Modes() {
		w.Modes[m] = ModeWords(m)
	}
	for _, p := range Phases() {
		w.Phases[p] = PhaseWords(p)
		if p.Ended() {
			w.Ended = append(w.Ended, p)
		}
	}
	for _, r := range StopReasons() {
		w.Stops[r] = StopWords(r)
	}
	for _, m := range Marks() {
		w.Marks[m] = MarkWords(m)
	}
	return w
}

// StyleShort names a queue style in a few words ("" for no style).
func StyleShort(name string) string {
	for _, s := range experiments.Styles() {
		if s.Name == name {
			return s.Short
		}
	}
	return name
}

// StopWords says why a run was stopped.
func StopWords(r StopReason) string {
	switch r {
	case StopReset:
		return "it was reset"
	case StopReplaced:
		return "a new run replaced it"
	case StopTimeLimit:
		return "it ran for longer than this server allows"
	case StopAbandoned:
		return "nobody was watching or driving it"
	case StopWorkerLost:
		return "a worker died of something outside the run, so its script cannot go on"
	case StopSessionEnd:
		return "its session ended"
	case StopShutdown:
		return "the server is shutting down"
	case StopInterrupted:
		return "it was interrupted"
	case StopStartFailed:
		return "it could not start"
	}
	return string(r)
}

// who names a worker by its label in a sentence.
func Who(label string) string {
	if label == "" {
		return "an unknown connection"
	}
	return "worker " + label
}

// Cut returns s if it holds at most max bytes; otherwise its first max
// bytes or fewer, cut at a character boundary, then "… [cut: N more
// bytes]": a text shown to people that says it was cut, and by how much.
func Cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	end := max
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + fmt.Sprintf("… [cut: %d more bytes]", len(s)-end)
}
