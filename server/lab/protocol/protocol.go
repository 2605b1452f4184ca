package protocol

import (
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
)

// This file declares the event protocol, whole: every kind of event, its
// fields and its codes. Every consumer — the page, the CLI's --json, the
// NDJSON export, the offline replay, the tests — reads these fields and
// nothing else. An event's Text is narration for people (see narrate.go):
// no program parses it. protocol.schema.json, beside this file, is the same
// protocol as a JSON Schema, generated from these declarations
// (TestProtocolSchema_IsUpToDate) and checked against every event the tests
// emit.

// ProtocolVersion is the version of the event protocol. It goes up whenever
// a field or a code changes meaning or goes away; adding an optional field
// does not change it.
const ProtocolVersion = 2

// Kind says what sort of thing an Event records. The payload of an event
// is the field named like its kind: a "sql" event carries Event.SQL, a
// "row" event Event.Row, and so on.
type Kind string

// The kinds of event.
const (
	KindSQL        Kind = "sql"        // a statement a worker ran, with its rows
	KindCheckpoint Kind = "checkpoint" // a step-mode worker waits at a checkpoint
	KindProcess    Kind = "process"    // a worker process was spawned, stopped, continued, killed or exited
	KindCall       Kind = "call"       // a worker called the receiver over HTTP, and its answer
	KindRow        Kind = "row"        // Postgres reported a change to a job row (trigger + NOTIFY)
	KindReceiver   Kind = "receiver"   // the receiver decided on a delivery
	KindLease      Kind = "lease"      // a lease ran out on the database clock, or was taken while live
	KindStep       Kind = "step"       // the runner began a step of the script
	KindVerdict    Kind = "verdict"    // the outcome of a run, read from the database and the receiver
	KindRunState   Kind = "run_state"  // a run started, paused, changed pace or ended
	KindBatch      Kind = "batch"      // a batch of background runs (the matrix, an experiment) began or finished
	KindNote       Kind = "note"       // something worth saying that changes no state
	KindError      Kind = "error"      // something went wrong that was not a fenced write
	KindSession    Kind = "session"    // the session ended
	KindLoad       Kind = "load"       // the load lab began, counted, finished a style, finished or stopped
)

// Kinds lists every kind, in the order above.
func Kinds() []Kind {
	return []Kind{KindSQL, KindCheckpoint, KindProcess, KindCall, KindRow, KindReceiver, KindLease,
		KindStep, KindVerdict, KindRunState, KindBatch, KindNote, KindError, KindSession, KindLoad}
}

// The actors that are not workers. A worker's actor is its label: "A",
// "B", … (one to eight capital letters).
const (
	ActorPostgres = "postgres"
	ActorReceiver = "receiver"
	ActorRunner   = "runner"
	ActorServer   = "server"
	ActorRelay    = "relay" // sends the outbox's deliveries after their commits
)

// Event is one thing that happened in a run. Seq is given by the log that
// keeps it; a worker leaves it zero. At is the database clock: from the
// statement's own now() where there is one, else read by the runner.
// Exactly one payload field is set: the one named like Kind.
type Event struct {
	Seq   int64     `json:"seq,omitempty"`
	V     int       `json:"v"` // ProtocolVersion
	Run   string    `json:"run,omitempty"`
	At    time.Time `json:"at"`
	Actor string    `json:"actor"`
	Kind  Kind      `json:"kind"`
	// Text says what happened in one sentence, for people only.
	Text string `json:"text"`
	// Badge is the key of the event's badge in the word table
	// (WordTable.Badges), or "" for an event that wears none. It is
	// derived from the event's own fields (BadgeKey) whenever the event
	// is encoded, so every event carries it — one recorded before the
	// field existed, or sent by a worker we did not write, too.
	Badge string `json:"badge,omitempty"`

	SQL        *SQLEvent        `json:"sql,omitempty"`
	Checkpoint *CheckpointEvent `json:"checkpoint,omitempty"`
	Process    *ProcessEvent    `json:"process,omitempty"`
	Call       *CallEvent       `json:"call,omitempty"`
	Row        *RowEvent        `json:"row,omitempty"`
	Receiver   *ReceiverEvent   `json:"receiver,omitempty"`
	Lease      *LeaseEvent      `json:"lease,omitempty"`
	Step       *StepEvent       `json:"step,omitempty"`
	Verdict    *VerdictEvent    `json:"verdict,omitempty"`
	RunState   *RunStateEvent   `json:"run_state,omitempty"`
	Batch      *BatchEvent      `json:"batch,omitempty"`
	Note       *NoteEvent       `json:"note,omitempty"`
	Error      *ErrorEvent      `json:"error,omitempty"`
	Session    *SessionEvent    `json:"session,omitempty"`
	Load       *LoadEvent       `json:"load,omitempty"`
}

// Stmt is one SQL statement as it ran: its Noun+Verb name, the text sent,
// its arguments rendered for people (FormatArgs), and the rows it affected.
type Stmt struct {
	Name string   `json:"name"`
	SQL  string   `json:"sql"`
	Args []string `json:"args"`
	Rows int64    `json:"rows"`
}

// ---- sql ---------------------------------------------------------------

// Op is what a worker's statement was for.
type Op string

// The ops.
const (
	OpClaim    Op = "claim"
	OpRenew    Op = "renew"
	OpComplete Op = "complete"
	OpFail     Op = "fail"
)

// SQLResult is what a worker's statement came to.
type SQLResult string

// The results.
const (
	ResultOK     SQLResult = "ok"     // it did what it was for (1 row)
	ResultNoJob  SQLResult = "no-job" // a claim found nothing claimable (0 rows)
	ResultFenced SQLResult = "fenced" // a compare-and-set matched no row: the write was dropped
	ResultFailed SQLResult = "error"  // the statement failed (Error says why)
)

// SQLEvent is a statement a worker ran (actor: the worker's label).
type SQLEvent struct {
	Op     Op        `json:"op"`
	Result SQLResult `json:"result"`
	Stmt   Stmt      `json:"stmt"`
	JobID  int64     `json:"job_id,omitempty"`
	// Owner is the identity the worker claims and writes under.
	Owner string `json:"owner"`
	// Epoch is the epoch the worker holds (for a claim: the one it won).
	Epoch *int64 `json:"epoch,omitempty"`
	// LeaseUntil is the new lease end on the database clock, after a claim
	// or a renewal that went through.
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	// Status is the status a failure report left the job in: pending (a
	// retry) or failed.
	Status Status `json:"status,omitempty"`
	// Fenced says what the row held when the compare-and-set was judged,
	// read by the same statement, and which kept guards it failed.
	Fenced *Fence `json:"fenced,omitempty"`
	// Error says why the statement failed.
	Error *Failure `json:"error,omitempty"`
}

// Fence is what a fenced write met: the row as the statement locked it.
type Fence struct {
	RowStatus Status        `json:"row_status"`
	RowOwner  string        `json:"row_owner"`
	RowEpoch  int64         `json:"row_epoch"`
	Reasons   []FenceReason `json:"reasons"`
}

// ---- checkpoint ----------------------------------------------------------

// Checkpoint names a place where a step-mode worker waits for a command.
type Checkpoint string

// The checkpoints, in the order a worker reaches them for one job.
const (
	CheckpointClaim   Checkpoint = "claim"   // before claiming
	CheckpointDeliver Checkpoint = "deliver" // holding a job, before calling the receiver
	CheckpointCommit  Checkpoint = "commit"  // after the receiver answered, before committing
)

// CheckpointEvent says a step-mode worker waits at a checkpoint (actor: the worker).
type CheckpointEvent struct {
	Name  Checkpoint `json:"name"`
	JobID int64      `json:"job_id,omitempty"`
	Epoch *int64     `json:"epoch,omitempty"`
	Owner string     `json:"owner,omitempty"`
}

// ---- process ---------------------------------------------------------------

// ProcessChange is what happened to a worker process.
type ProcessChange string

// The changes.
const (
	ProcSpawned   ProcessChange = "spawned"   // the supervisor started it
	ProcReady     ProcessChange = "ready"     // it connected to Postgres and is ready
	ProcStopped   ProcessChange = "stopped"   // frozen by SIGSTOP
	ProcContinued ProcessChange = "continued" // thawed by SIGCONT
	ProcKilling   ProcessChange = "killing"   // SIGKILL sent
	ProcExited    ProcessChange = "exited"    // it ended and was reaped
)

// ProcState is a worker's real process state, read from the operating
// system (/proc on Linux, the process table on macOS) or its wait status.
type ProcState string

// The states.
const (
	StateRunning  ProcState = "running"
	StateSleeping ProcState = "sleeping"
	StateStopped  ProcState = "stopped"
	StateZombie   ProcState = "zombie" // exited, not yet reaped
	StateExited   ProcState = "exited"
	StateKilled   ProcState = "killed" // exited by a signal
	StateUnknown  ProcState = "unknown"
)

// Cause says who made a process change.
type Cause string

// The causes.
const (
	CauseScript     Cause = "script"      // a step of the scenario
	CauseDriver     Cause = "driver"      // a person's command
	CauseStallLimit Cause = "stall-limit" // frozen longer than the server allows
	CauseRunEnd     Cause = "run-end"     // the run ended
	CauseOutside    Cause = "outside"     // nobody in the run: a signal from outside, or a crash
)

// ProcessEvent is a change of a worker process (actor: the worker).
type ProcessEvent struct {
	Change ProcessChange `json:"change"`
	Pid    int           `json:"pid"`
	State  ProcState     `json:"state"`
	// Letter is the state letter the kernel reports (R, S, D, T, Z, …),
	// while the process lives.
	Letter string `json:"letter,omitempty"`
	// Signal is the signal sent (stopped: SIGSTOP, continued: SIGCONT,
	// killing: SIGKILL) or, for exited, the signal it died of.
	Signal string `json:"signal,omitempty"`
	// ExitCode is its exit status when it exited on its own.
	ExitCode *int  `json:"exit_code,omitempty"`
	Cause    Cause `json:"cause,omitempty"`
	// Owner is the identity it claims under (spawned, ready).
	Owner string `json:"owner,omitempty"`
	// SkewMS is how far its own clock runs ahead of the database's, in
	// milliseconds (spawned).
	SkewMS int64 `json:"skew_ms,omitempty"`
}

// ---- call ------------------------------------------------------------------

// CallResult is what a worker's call to the receiver came to.
type CallResult string

// The results.
const (
	DeliveryAccepted CallResult = "accepted" // HTTP 200
	DeliveryRefused  CallResult = "refused"  // HTTP 409: a stale epoch
	DeliveryFailed   CallResult = "error"    // no answer, or one that is not a receipt
	// DeliveryDeferred: the outbox mode; the delivery is written with the
	// commit, and the relay sends it after.
	DeliveryDeferred CallResult = "deferred"
	// DeliverySkipped: the keyed mode; the worker looked its key up first
	// and the receiver already had it, so it did not call.
	DeliverySkipped CallResult = "skipped"
)

// CallEvent is a worker's call to the receiver (actor: the worker), or the
// relay's sending of an outbox delivery (actor: relay). The URL is cut to
// its last element: the path may carry a run's secret key.
type CallEvent struct {
	Result     CallResult `json:"result"`
	JobID      int64      `json:"job_id"`
	Epoch      int64      `json:"epoch"` // the epoch the worker held and sent
	Owner      string     `json:"owner"`
	URL        string     `json:"url"`
	Body       string     `json:"body"`
	HTTPStatus int        `json:"http_status,omitempty"`
	Decision   Decision   `json:"decision,omitempty"`
	// HeldEpoch is the newest epoch the receiver holds after the call.
	HeldEpoch *int64   `json:"held_epoch,omitempty"`
	Error     *Failure `json:"error,omitempty"`
}

// ---- row -----------------------------------------------------------------

// RowOp is the kind of change Postgres recorded for a job row.
type RowOp string

// The row ops, as the job_history trigger names them. An expire is a job
// failed for good by a claim that found its lease run out on its last
// attempt: the claim bumped the epoch, so the holder's late writes are
// fenced. It is no claim (the claimer does not take the job) and no write
// of the holder's.
const (
	RowInsert   RowOp = "insert"
	RowClaim    RowOp = "claim"
	RowRenew    RowOp = "renew"
	RowComplete RowOp = "complete"
	RowFail     RowOp = "fail"   // failed for good, by a failure report
	RowExpire   RowOp = "expire" // failed for good, by a claim after the last attempt's lease ran out
	RowRetry    RowOp = "retry"  // back to pending after a failure
	RowUpdate   RowOp = "update"
)

// RowImage is a job row's state on one side of a change.
type RowImage struct {
	Status     Status     `json:"status"`
	Owner      string     `json:"owner"`
	Epoch      int64      `json:"epoch"`
	LeaseUntil *time.Time `json:"lease_until"`
}

// RowEvent is a change to a job row as Postgres reported it (actor:
// postgres): what it was, what it became, and whose connection wrote it.
type RowEvent struct {
	HistorySeq int64     `json:"history_seq"`
	JobID      int64     `json:"job_id"`
	Op         RowOp     `json:"op"`
	Writer     string    `json:"writer"` // the label of the worker whose connection wrote it, or ""
	App        string    `json:"app"`    // the writer's application_name
	Old        *RowImage `json:"old"`    // nil for an insert
	New        RowImage  `json:"new"`
}

// ---- receiver ----------------------------------------------------------------

// ReceiverEvent is a decision of the receiver (actor: receiver).
type ReceiverEvent struct {
	Decision Decision `json:"decision"`
	JobID    int64    `json:"job_id"`
	Epoch    int64    `json:"epoch"` // the epoch offered
	Owner    string   `json:"owner"` // the identity that offered it
	From     string   `json:"from"`  // the worker label in its payload
	// HeldEpoch is the newest epoch the receiver holds after the decision.
	HeldEpoch int64 `json:"held_epoch"`
	// Superseded is the epoch this delivery replaced, and the identity
	// that had delivered it.
	Superseded      *int64 `json:"superseded,omitempty"`
	SupersededOwner string `json:"superseded_owner,omitempty"`
	Stmt            *Stmt  `json:"stmt,omitempty"`
	// Accepted says the delivery was taken: an effect happened
	// (Decision.Accepted). Replaces says it replaced another
	// epoch's delivery, which is superseded now (accepted-newer,
	// accepted-older). Both are derived from Decision when the event is
	// encoded.
	Accepted bool `json:"accepted,omitempty"`
	Replaces bool `json:"replaces,omitempty"`
}

// ---- lease -----------------------------------------------------------------

// LeaseChange is what happened to a lease.
type LeaseChange string

// The changes.
const (
	// LeaseExpired: the lease ran out on the database clock; the job is
	// claimable again.
	LeaseExpired LeaseChange = "expired"
	// LeaseTakenLive: a claim took the job while its lease was still live
	// on the database clock, because the claimer judged it by its own
	// clock (the db-clock guard off).
	LeaseTakenLive LeaseChange = "taken-live"
)

// Clock names the clock that judged a lease.
type Clock string

// The clocks.
const (
	ClockDatabase Clock = "database"
	ClockWorker   Clock = "worker"
)

// LeaseEvent is a lease running out, or taken while live (actor: postgres).
type LeaseEvent struct {
	Change LeaseChange `json:"change"`
	JobID  int64       `json:"job_id"`
	Epoch  int64       `json:"epoch"`            // the epoch whose lease it was
	Owner  string      `json:"owner"`            // the identity that held it
	Holder string      `json:"holder,omitempty"` // the label of the worker that held it
	// LeaseUntil is the lease's end and DBNow the database clock when it
	// was judged.
	LeaseUntil time.Time `json:"lease_until"`
	DBNow      time.Time `json:"db_now"`
	Clock      Clock     `json:"clock"`
	// ClockOf and SkewMS name the worker whose own clock judged it (taken-live).
	ClockOf string `json:"clock_of,omitempty"`
	SkewMS  int64  `json:"skew_ms,omitempty"`
	// LiveMS is how long the lease still had to run on the database clock
	// when it was taken (taken-live).
	LiveMS int64 `json:"live_ms,omitempty"`
}

// ---- step ------------------------------------------------------------------

// StepEvent is the runner beginning a step of the script (actor: runner).
type StepEvent struct {
	Index  int                `json:"index"` // from 0
	Total  int                `json:"total"`
	Action experiments.Action `json:"action"`
	Worker string             `json:"worker"`
}

// ---- verdict -------------------------------------------------------------------

// VerdictEvent is the outcome of a run (actor: runner): a scripted run's
// Outcome, or a free-play run's Report.
type VerdictEvent struct {
	Safe bool `json:"safe"`
	// Mark is Safe as a mark (safe or unsafe), derived when the event is
	// encoded: the page draws its sign and words from WordTable.Marks.
	Mark    Mark     `json:"mark,omitempty"`
	Outcome *Outcome `json:"outcome,omitempty"`
	Report  *Report  `json:"report,omitempty"`
}

// Mark is what a run came to, or where it is on its way there, at a
// glance: the key of its sign and words in WordTable.Marks. A verdict is
// safe or unsafe; a batch's run may also be pending, running, without a
// verdict (error) or stopped; a cell of the article's table is as a
// correct build's or not; a reader's prediction is right or wrong.
type Mark string

// The marks.
const (
	MarkSafe         Mark = "safe"
	MarkUnsafe       Mark = "unsafe"
	MarkError        Mark = "error"   // it ended without a verdict
	MarkStopped      Mark = "stopped" // it was stopped before it ran to its verdict
	MarkPending      Mark = "pending" // it has not started
	MarkRunning      Mark = "running"
	MarkAsCorrect    Mark = "as-correct"     // a cell of the article's table: as a correct build shows
	MarkNotAsCorrect Mark = "not-as-correct" // not as a correct build shows
	MarkRight        Mark = "right"          // a reader's prediction, borne out by the run
	MarkWrong        Mark = "wrong"          // a reader's prediction, not borne out
)

// Marks lists every mark.
func Marks() []Mark {
	return []Mark{MarkSafe, MarkUnsafe, MarkError, MarkStopped, MarkPending, MarkRunning, MarkAsCorrect, MarkNotAsCorrect, MarkRight, MarkWrong}
}

// SafeMark returns the mark of a verdict.
func SafeMark(safe bool) Mark {
	if safe {
		return MarkSafe
	}
	return MarkUnsafe
}

// ---- run_state -------------------------------------------------------------------

// Mode is how a run is played.
type Mode string

// The modes.
const (
	ModeAuto Mode = "auto" // the runner plays the steps at a pace
	ModeStep Mode = "step" // one step per command
	ModeFree Mode = "free" // no script: workers run on their own
)

// RunPhase is where a run is in its life.
type RunPhase string

// The phases: starting → ready (a step run waits for its first step) or
// playing (auto) ⇄ paused → finished (with a verdict), failed (a fault
// ended it) or stopped (ended before its verdict).
const (
	PhaseStarting RunPhase = "starting"
	PhaseReady    RunPhase = "ready"
	PhasePlaying  RunPhase = "playing"
	PhasePaused   RunPhase = "paused"
	PhaseFinished RunPhase = "finished"
	PhaseFailed   RunPhase = "failed"
	PhaseStopped  RunPhase = "stopped"
)

// Ended reports whether the phase is one a run never leaves.
func (p RunPhase) Ended() bool {
	return p == PhaseFinished || p == PhaseFailed || p == PhaseStopped
}

// StopReason says why a run was stopped before its verdict.
type StopReason string

// The reasons.
const (
	StopReset       StopReason = "reset"        // the driver reset it
	StopReplaced    StopReason = "replaced"     // the driver started another run
	StopTimeLimit   StopReason = "time-limit"   // it ran longer than the server allows
	StopAbandoned   StopReason = "abandoned"    // nobody watched or drove it for a while
	StopWorkerLost  StopReason = "worker-lost"  // a worker died of something outside the run
	StopSessionEnd  StopReason = "session-end"  // its session ended
	StopShutdown    StopReason = "shutdown"     // the server is shutting down
	StopInterrupted StopReason = "interrupted"  // Ctrl-C (the CLI)
	StopStartFailed StopReason = "start-failed" // it could not start
)

// RunInfo is a run as the page and the API show it.
type RunInfo struct {
	ID           string               `json:"id"`
	Ordering     experiments.Ordering `json:"ordering"`
	Mode         Mode                 `json:"mode"`
	Phase        RunPhase             `json:"phase"`
	Background   bool                 `json:"background,omitempty"` // a matrix cell, not the session's current run
	Custom       bool                 `json:"custom,omitempty"`     // its workers and receiver ran a reader's own statements
	Broken       []string             `json:"broken"`
	SameIdentity bool                 `json:"same_identity"`
	Delivery     experiments.Delivery `json:"delivery"`
	LeaseMS      int64                `json:"lease_ms"`
	SkewMS       int64                `json:"skew_ms,omitempty"`
	PaceMS       int64                `json:"pace_ms"`
	StepIndex    int                  `json:"step_index"` // the next step to play
	Steps        []experiments.Step   `json:"steps"`
	Started      time.Time            `json:"started"`
	Ended        *time.Time           `json:"ended,omitempty"`
	StopReason   StopReason           `json:"stop_reason,omitempty"`
	Outcome      *Outcome             `json:"outcome,omitempty"`
	Report       *Report              `json:"report,omitempty"`
	Error        *Failure             `json:"error,omitempty"`
	Workers      []Worker             `json:"workers,omitempty"`
	// Zombie is the label of the worker this run's script makes the
	// zombie (ZombieOf), or "" when it has none (clock-skew, free play).
	// It is derived from Ordering when the info is encoded.
	Zombie string `json:"zombie,omitempty"`
}

// Worker is a worker as the page and the API show it.
type Worker struct {
	Label     string     `json:"label"`
	Owner     string     `json:"owner"`
	Pid       int        `json:"pid"`
	State     ProcState  `json:"state"`
	Letter    string     `json:"letter,omitempty"`
	Frozen    bool       `json:"frozen"`
	Exited    bool       `json:"exited"`
	WaitingAt Checkpoint `json:"waiting_at,omitempty"`
	JobID     int64      `json:"job_id,omitempty"`
	Epoch     int64      `json:"epoch,omitempty"`
	SkewMS    int64      `json:"skew_ms,omitempty"`
}

// RunStateEvent says what a run looks like now (actor: runner).
type RunStateEvent struct {
	Info RunInfo `json:"info"`
}

// ---- batch ---------------------------------------------------------------

// BatchPhase is where a batch of background runs is.
type BatchPhase string

// The phases.
const (
	BatchStarted  BatchPhase = "started"
	BatchFinished BatchPhase = "finished"
	BatchStopped  BatchPhase = "stopped" // reset, or replaced by another batch: the rest never ran
)

// MatrixCell is one run of a batch: its ordering, the guard it breaks and
// whether its two workers share a name.
type MatrixCell struct {
	Run          string               `json:"run"`
	Ordering     experiments.Ordering `json:"ordering"`
	Broken       string               `json:"broken"` // the guard turned off, or "" for the correct build
	SameIdentity bool                 `json:"same_identity"`
	// Case is the check case the cell plays, in a check's batch: its
	// result in the report is found by this name, never by position.
	Case experiments.CheckCase `json:"case,omitempty"`
}

// BatchEvent is a batch of runs played in the background, a few at a
// time: the guard matrix, or one of the article's experiments (actor:
// runner). When it has finished it says what its runs showed.
type BatchEvent struct {
	Name    experiments.BatchName `json:"name"`
	Phase   BatchPhase            `json:"phase"`
	LeaseMS int64                 `json:"lease_ms"`
	// WaitedMS (a check's batch, started) is how long the check waited
	// in its line (the server's, or its class's) for its turn; absent
	// when it did not wait.
	WaitedMS int64 `json:"waited_ms,omitempty"`
	// Board (a check's batch, started) is the class whose board the
	// check counts on, by its code (ABC-234): a class student's check;
	// absent for any other, a student's after their class ended too.
	Board string       `json:"board,omitempty"`
	Cells []MatrixCell `json:"cells"`
	// Finished: the runs that were unsafe, and the answer in words;
	// stopped: why, in words.
	Unsafe []string `json:"unsafe,omitempty"`
	Answer string   `json:"answer,omitempty"`
	// Runs (finished) are the batch's runs, each to open from its answer:
	// its cell, what it came to and its button's words.
	Runs []BatchRun `json:"runs,omitempty"`
	// Check (a finished check) is what the reader's solution came to,
	// case by case.
	Check *CheckReport `json:"check,omitempty"`
}

// BatchRun is one run of a finished batch, as its answer offers to open it.
type BatchRun struct {
	Run          string               `json:"run"`
	Ordering     experiments.Ordering `json:"ordering"`
	Broken       string               `json:"broken"`
	SameIdentity bool                 `json:"same_identity"`
	// Mark is what it came to: safe, unsafe, or error (no verdict).
	Mark Mark `json:"mark"`
	// Words are its button's: "new-owner-first: ✗ unsafe — open this run".
	Words string `json:"words"`
}

// ---- note -------------------------------------------------------------------------

// NoteCode says what a note is about.
type NoteCode string

// The notes.
const (
	NoteSkip       NoteCode = "skip"        // a worker holds no job: it skips the step
	NoteGone       NoteCode = "gone"        // a worker has exited: nothing to do
	NoteWakesLater NoteCode = "wakes-later" // a frozen worker took the command and acts on it once thawed
	NoteNoLease    NoteCode = "no-lease"    // the job holds no lease to wait for
	NoteStallLimit NoteCode = "stall-limit" // a worker was frozen too long and is killed
	NoteStopped    NoteCode = "stopped"     // the run was stopped before its verdict
	NoteOutput     NoteCode = "output"      // a worker printed a line that is not an event
	NoteLog        NoteCode = "log"         // a worker logged a line on stderr
	NoteInLine     NoteCode = "in-line"     // the session's check waits in the server's line, at Place
	NoteChapter    NoteCode = "chapter"     // a teacher opened a chapter of the lesson for the class: the page opens it
	NoteClassEnded NoteCode = "class-ended" // the teacher ended the class: the session's checks count on no board from now on
	NoteClassRun   NoteCode = "class-run"   // the teacher started a run for everyone (the event's run): the page brings it into view
)

// NoteEvent says something that changes no state.
type NoteEvent struct {
	Code    NoteCode   `json:"code"`
	Worker  string     `json:"worker,omitempty"`
	JobID   int64      `json:"job_id,omitempty"`
	Status  string     `json:"status,omitempty"` // no-lease: the job's status
	LimitMS int64      `json:"limit_ms,omitempty"`
	Reason  StopReason `json:"reason,omitempty"` // stopped
	Line    string     `json:"line,omitempty"`   // output, log: the line, cut to 300 bytes (Cut)
	Place   int        `json:"place,omitempty"`  // in-line: 1 for the next check to start
	WaitS   int        `json:"wait_s,omitempty"` // in-line: about how long it waits, in seconds; 0 when not known
	// Chapter (chapter) is the lesson's chapter the page opens, as
	// ?lesson=<id> opens it: one of experiments.Chapters.
	Chapter experiments.Chapter `json:"chapter,omitempty"`
}

// ---- error -------------------------------------------------------------------------

// ErrorEvent is something that went wrong that was not a fenced write.
type ErrorEvent struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
	Step    *int      `json:"step,omitempty"` // step-failed: its index
}

// ---- session -------------------------------------------------------------------------

// SessionEndReason says why a session ended.
type SessionEndReason string

// The reasons.
const (
	SessionIdle     SessionEndReason = "idle"     // unused and unwatched for too long
	SessionDeleted  SessionEndReason = "deleted"  // its driver ended it
	SessionShutdown SessionEndReason = "shutdown" // the server is shutting down
)

// SessionEvent says a session ended (actor: server).
type SessionEvent struct {
	Reason SessionEndReason `json:"reason"`
}
