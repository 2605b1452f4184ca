package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Result is what a worker writes as a job's result and sends the receiver
// as its payload. Worker names the process that did the work, so the final
// state says whose work it holds even when two workers share an identity.
type Result struct {
	Worker string `json:"worker"`
	Owner  string `json:"owner"`
	Pid    int    `json:"pid"`
	JobID  int64  `json:"job_id"`
	Epoch  int64  `json:"epoch"`
	Output string `json:"output"`
}

// ResultFrom returns the worker named in a result or payload, or "".
func ResultFrom(raw []byte) string {
	var r Result
	if len(raw) == 0 || json.Unmarshal(raw, &r) != nil {
		return ""
	}
	return r.Worker
}

// appPrefix starts the application_name of every worker's connection, so
// the history trigger records which process wrote each change.
const appPrefix = "fencelab worker "

// AppName returns the application_name a worker with this label connects as.
func AppName(label string) string { return appPrefix + label }

// LabelFromApp returns the worker label in an application_name, or "".
func LabelFromApp(app string) string {
	if l, ok := strings.CutPrefix(app, appPrefix); ok {
		return l
	}
	return ""
}

// HistoryRecord is one change to a job as the trigger recorded it.
type HistoryRecord struct {
	Seq           int64           `json:"seq"`
	JobID         int64           `json:"job_id"`
	Op            string          `json:"op"`
	At            time.Time       `json:"at"`
	OldStatus     *string         `json:"old_status"`
	NewStatus     string          `json:"new_status"`
	OldOwner      *string         `json:"old_owner"`
	NewOwner      *string         `json:"new_owner"`
	OldEpoch      *int64          `json:"old_epoch"`
	NewEpoch      int64           `json:"new_epoch"`
	OldLeaseUntil *time.Time      `json:"old_lease_until"`
	NewLeaseUntil *time.Time      `json:"new_lease_until"`
	Attempts      int             `json:"attempts"`
	Result        json.RawMessage `json:"result"`
	App           string          `json:"app"`
}

// Worker returns the label of the worker whose connection made the change.
func (h HistoryRecord) Worker() string { return LabelFromApp(h.App) }

// History reads a job's recorded changes, oldest first.
func (q *Queue) History(ctx context.Context, jobID int64) ([]HistoryRecord, error) {
	if err := validateJobID(jobID); err != nil {
		return nil, fmt.Errorf("job history: %w", err)
	}
	st := JobHistoryList(q.cfg.Schema, jobID)
	rows, err := q.db.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		return nil, fmt.Errorf("history of job %d: %w", jobID, err)
	}
	defer rows.Close()
	var out []HistoryRecord
	for rows.Next() {
		var h HistoryRecord
		var result []byte
		if err := rows.Scan(&h.Seq, &h.JobID, &h.Op, &h.At, &h.OldStatus, &h.NewStatus, &h.OldOwner, &h.NewOwner,
			&h.OldEpoch, &h.NewEpoch, &h.OldLeaseUntil, &h.NewLeaseUntil, &h.Attempts, &result, &h.App); err != nil {
			return nil, fmt.Errorf("history of job %d: %w", jobID, err)
		}
		h.Result = result
		out = append(out, h)
	}
	return out, rows.Err()
}

// Violation is one broken invariant, in a plain sentence, with the guards
// whose absence lets it happen.
type Violation struct {
	Invariant string  `json:"invariant"`
	Text      string  `json:"text"`
	Guards    []Guard `json:"guards"`
	Op        string  `json:"op,omitempty"` // for a stale write: the history op that landed
}

// The invariants a correct build keeps. Each names what Check looks for.
const (
	InvStaleWrite        = "stale-write"        // no write from a worker whose claim was taken over
	InvEpochUnique       = "epoch-unique"       // every claim holds a newer epoch than the one before
	InvLeaseRespected    = "lease-respected"    // no claim while the previous lease is live on the database clock
	InvReceiverMonotonic = "receiver-monotonic" // the receiver's epoch for a job never goes backwards
	InvRowLastOwner      = "row-last-owner"     // the finished row holds its last owner's result
	InvReceiverLastOwner = "receiver-last-owner"
	InvFinished          = "finished" // the job ends done
)

func worker(label string) string {
	if label == "" {
		return "an unknown connection"
	}
	return "worker " + label
}

func opWords(op string) string {
	switch op {
	case "complete":
		return "commit"
	case "renew":
		return "lease renewal"
	case "fail", "retry":
		return "failure report"
	}
	return op
}

// Check walks a job's history and the receiver's decisions for it and
// returns every invariant they break, oldest first, each said once. It
// needs nothing but what Postgres and the receiver recorded.
func Check(history []HistoryRecord, decisions []DecisionRecord, held *Held) []Violation {
	var out []Violation
	seen := map[string]bool{}
	add := func(key string, v Violation) {
		if !seen[key] {
			seen[key] = true
			out = append(out, v)
		}
	}
	var last *HistoryRecord
	for i := range history {
		h := &history[i]
		switch h.Op {
		case "claim":
			if h.OldStatus != nil && *h.OldStatus == string(StatusRunning) && h.OldLeaseUntil != nil && h.OldLeaseUntil.After(h.At) {
				prev := "the previous owner"
				if last != nil {
					prev = worker(last.Worker())
				}
				add("lease:"+h.App, Violation{InvLeaseRespected, fmt.Sprintf(
					"%s claimed job %d while %s's lease still had %v to run on the database clock: two workers held the job at once.",
					upperFirst(worker(h.Worker())), h.JobID, prev, h.OldLeaseUntil.Sub(h.At).Round(time.Millisecond)),
					[]Guard{DBClock}, ""})
			}
			if last != nil && h.NewEpoch <= last.NewEpoch {
				add("epoch:"+h.App, Violation{InvEpochUnique, fmt.Sprintf(
					"%s's claim holds epoch %d, no newer than %s's epoch %d: two owners shared one fencing token.",
					upperFirst(worker(h.Worker())), h.NewEpoch, worker(last.Worker()), last.NewEpoch),
					[]Guard{EpochIncrement}, ""})
			}
			last = h
		case "renew", "complete", "fail", "retry":
			if last != nil && h.App != last.App {
				add("stale:"+h.App+":"+h.Op, Violation{InvStaleWrite, fmt.Sprintf(
					"%s's late %s landed after %s had claimed job %d at epoch %d: a write from a lost lease got through.",
					upperFirst(worker(h.Worker())), opWords(h.Op), worker(last.Worker()), h.JobID, last.NewEpoch),
					[]Guard{StatusCheck, OwnerCheck, EpochCheck, EpochIncrement}, h.Op})
			}
		}
	}
	for i := range decisions {
		d := &decisions[i]
		if d.Decision == AcceptedOlder {
			prev := int64(-1)
			if d.PrevEpoch != nil {
				prev = *d.PrevEpoch
			}
			add("backwards:"+d.Owner, Violation{InvReceiverMonotonic, fmt.Sprintf(
				"The receiver accepted epoch %d from %s after it held epoch %d: it went backwards.",
				d.Epoch, worker(ResultFrom(d.Payload)), prev), []Guard{ReceiverCheck}, ""})
		}
	}
	if last == nil {
		return out
	}
	owner := last.Worker()
	if len(history) > 0 {
		end := history[len(history)-1]
		if end.NewStatus == string(StatusDone) {
			if from := ResultFrom(end.Result); from != owner {
				add("row", Violation{InvRowLastOwner, fmt.Sprintf(
					"The row ends with %s's result, but %s was the job's last owner (epoch %d).",
					worker(from), worker(owner), last.NewEpoch), []Guard{StatusCheck, OwnerCheck, EpochCheck, EpochIncrement}, ""})
			}
		}
		if end.NewStatus == string(StatusDone) && held != nil {
			if from := ResultFrom(held.Payload); from != owner {
				add("receiver", Violation{InvReceiverLastOwner, fmt.Sprintf(
					"The receiver ends with %s's payload (epoch %d), but %s was the job's last owner (epoch %d).",
					worker(from), held.Epoch, worker(owner), last.NewEpoch), []Guard{ReceiverCheck, EpochIncrement}, ""})
			}
		}
	}
	return out
}

// rank orders violations by how plainly they show: a late commit that
// landed first, a quiet reuse of the token or a late heartbeat last.
func (v Violation) rank() int {
	switch v.Invariant {
	case InvStaleWrite:
		if v.Op == "renew" {
			return 6
		}
		return 0
	case InvRowLastOwner:
		return 1
	case InvReceiverLastOwner:
		return 2
	case InvReceiverMonotonic:
		return 3
	case InvLeaseRespected:
		return 4
	case InvEpochUnique:
		return 5
	}
	return 7
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// Call is what became of one of the zombie's calls.
type Call string

// The values of Outcome.ZombieReceiverCall and Outcome.ZombieCommit.
const (
	CallRejected               Call = "rejected"
	CallAccepted               Call = "accepted"
	CallAcceptedThenSuperseded Call = "accepted_then_superseded"
	CallNotAttempted           Call = "not_attempted"
)

// Words says the call's fate as the article's table does.
func (c Call) Words() string {
	switch c {
	case CallAcceptedThenSuperseded:
		return "accepted, then superseded"
	case CallNotAttempted:
		return "not attempted"
	}
	return string(c)
}

// FinalRow is the job row at the end of a run.
type FinalRow struct {
	Status     Status `json:"status"`
	Owner      string `json:"owner"`
	Epoch      int64  `json:"epoch"`
	ResultFrom string `json:"result_from"`
}

// FinalReceiver is what the receiver holds at the end of a run.
type FinalReceiver struct {
	Epoch       int64  `json:"epoch"`
	PayloadFrom string `json:"payload_from"`
}

// Outcome is the end of a run, read from the database and the receiver,
// never from what the workers believe.
type Outcome struct {
	Ordering           Ordering      `json:"ordering"`
	Broken             []string      `json:"broken"`
	SameIdentity       bool          `json:"same_identity"`
	JobID              int64         `json:"job_id"`
	ZombieReceiverCall Call          `json:"zombie_receiver_call"`
	ZombieCommit       Call          `json:"zombie_commit"`
	Final              FinalRow      `json:"final"`
	Receiver           FinalReceiver `json:"receiver"`
	Safe               bool          `json:"safe"`
	Violations         []string      `json:"violations"`
	Because            []string      `json:"because"` // the broken guards that let the violations happen
	Verdict            string        `json:"verdict"`
}

// EvaluateInput names what Evaluate looks at.
type EvaluateInput struct {
	Config RunConfig
	JobID  int64
	// ZombieTriedCommit tells a refused commit from one never sent: a
	// refused UPDATE leaves no trace in the database, so this one fact comes
	// from the runner, which saw the statement go out. Whether it landed is
	// still read from the database.
	ZombieTriedCommit bool
}

// Evaluate reads the job's row and history and the receiver's state and
// decisions, and says what happened and whether it was safe.
func Evaluate(ctx context.Context, q *Queue, r ReceiverView, in EvaluateInput) (Outcome, error) {
	o := Outcome{Ordering: in.Config.Ordering, Broken: in.Config.Broken.Names(), SameIdentity: in.Config.SameIdentity,
		JobID: in.JobID, Violations: []string{}, Because: []string{}}
	job, err := q.Get(ctx, in.JobID)
	if err != nil {
		return o, fmt.Errorf("evaluate: %w", err)
	}
	history, err := q.History(ctx, in.JobID)
	if err != nil {
		return o, fmt.Errorf("evaluate: %w", err)
	}
	decisions, err := r.Decisions(ctx, in.JobID)
	if err != nil {
		return o, fmt.Errorf("evaluate: %w", err)
	}
	var held *Held
	if h, err := r.Get(ctx, in.JobID); err == nil {
		held = &h
		o.Receiver = FinalReceiver{Epoch: h.Epoch, PayloadFrom: ResultFrom(h.Payload)}
	}
	o.Final = FinalRow{Status: job.Status, Owner: job.Owner, Epoch: job.Epoch, ResultFrom: ResultFrom(job.Result)}

	o.ZombieCommit = CallNotAttempted
	if in.ZombieTriedCommit {
		o.ZombieCommit = CallRejected
	}
	for _, h := range history {
		if (h.Op == "complete" || h.Op == "fail" || h.Op == "retry") && h.Worker() == Zombie {
			o.ZombieCommit = CallAccepted
		}
	}
	o.ZombieReceiverCall = CallNotAttempted
	for _, d := range decisions {
		if ResultFrom(d.Payload) != Zombie {
			continue
		}
		switch {
		case d.Decision.Accepted():
			o.ZombieReceiverCall = CallAccepted
		case o.ZombieReceiverCall == CallNotAttempted:
			o.ZombieReceiverCall = CallRejected
		}
	}
	if o.ZombieReceiverCall == CallAccepted && o.Receiver.PayloadFrom != Zombie {
		o.ZombieReceiverCall = CallAcceptedThenSuperseded
	}

	vs := Check(history, decisions, held)
	if job.Status != StatusDone {
		vs = append(vs, Violation{InvFinished, fmt.Sprintf("The job did not finish: it ends %s.", job.Status), nil, ""})
	}
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].rank() < vs[j].rank() })
	because := map[Guard]bool{}
	for _, v := range vs {
		o.Violations = append(o.Violations, v.Text)
		for _, g := range v.Guards {
			if !in.Config.Broken.On(g) {
				because[g] = true
			}
		}
	}
	for _, g := range AllGuards() {
		if because[g] {
			o.Because = append(o.Because, g.String())
		}
	}
	o.Safe = len(vs) == 0
	o.Verdict = verdict(o, len(vs) > 0 && vs[0].Invariant == InvStaleWrite && in.Config.SameIdentity && !in.Config.Broken.On(EpochCheck))
	return o, nil
}

func verdict(o Outcome, sameName bool) string {
	if o.Safe {
		who := worker(o.Final.ResultFrom)
		s := fmt.Sprintf("Safe: the job ended done at epoch %d with %s's result in the row and at the receiver", o.Final.Epoch, who)
		switch o.ZombieCommit {
		case CallRejected:
			s += "; the zombie's late commit was fenced"
		}
		return s + "."
	}
	s := "Unsafe: " + lowerFirst(strings.TrimSuffix(o.Violations[0], "."))
	if len(o.Because) > 0 {
		s += ", because " + guardList(o.Because) + " was off"
		if len(o.Because) > 1 {
			s = strings.TrimSuffix(s, " was off") + " were off"
		}
		if sameName {
			s += " and both workers had the same name, so the owner check could not tell them apart"
		}
	}
	if n := len(o.Violations) - 1; n > 0 {
		s += fmt.Sprintf(" (and %d more)", n)
	}
	return s + "."
}

func guardList(names []string) string {
	switch len(names) {
	case 1:
		return "the " + names[0] + " guard"
	case 2:
		return "the " + names[0] + " and " + names[1] + " guards"
	}
	return "the " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " guards"
}

// lowerFirst lowers a leading "The" so a sentence can follow a colon.
func lowerFirst(s string) string {
	if rest, ok := strings.CutPrefix(s, "The "); ok {
		return "the " + rest
	}
	return s
}

// JobReport is one job's end in a free-play run.
type JobReport struct {
	JobID        int64    `json:"job_id"`
	Status       Status   `json:"status"`
	Owner        string   `json:"owner"`
	Epoch        int64    `json:"epoch"`
	ResultFrom   string   `json:"result_from"`
	ReceiverFrom string   `json:"receiver_from"`
	Claims       int      `json:"claims"`
	Violations   []string `json:"violations"`
}

// Report is the outcome of a free-play run: every job, checked.
type Report struct {
	Jobs       []JobReport `json:"jobs"`
	Safe       bool        `json:"safe"`
	Violations []string    `json:"violations"`
	Verdict    string      `json:"verdict"`
}

// ReportJobs checks every job (up to limit) against the invariants, from
// what Postgres and the receiver recorded. Jobs still in progress are
// checked too: an invariant broken midway is broken.
func ReportJobs(ctx context.Context, q *Queue, r ReceiverView, limit int) (Report, error) {
	rep := Report{Jobs: []JobReport{}, Violations: []string{}}
	jobs, err := q.List(ctx, limit)
	if err != nil {
		return rep, err
	}
	done := 0
	for _, j := range jobs {
		history, err := q.History(ctx, j.ID)
		if err != nil {
			return rep, err
		}
		decisions, err := r.Decisions(ctx, j.ID)
		if err != nil {
			return rep, err
		}
		jr := JobReport{JobID: j.ID, Status: j.Status, Owner: j.Owner, Epoch: j.Epoch, ResultFrom: ResultFrom(j.Result), Violations: []string{}}
		var held *Held
		if h, err := r.Get(ctx, j.ID); err == nil {
			held = &h
			jr.ReceiverFrom = ResultFrom(h.Payload)
		}
		for _, h := range history {
			if h.Op == "claim" {
				jr.Claims++
			}
		}
		for _, v := range Check(history, decisions, held) {
			jr.Violations = append(jr.Violations, v.Text)
			rep.Violations = append(rep.Violations, v.Text)
		}
		if j.Status == StatusDone {
			done++
		}
		rep.Jobs = append(rep.Jobs, jr)
	}
	rep.Safe = len(rep.Violations) == 0
	switch {
	case len(jobs) == 0:
		rep.Verdict = "No jobs yet: add one, and some workers."
	case rep.Safe:
		rep.Verdict = fmt.Sprintf("Safe so far: %d of %d jobs done, no write from a lost lease landed, and the receiver never went backwards.", done, len(jobs))
	default:
		rep.Verdict = "Unsafe: " + lowerFirst(rep.Violations[0])
		if n := len(rep.Violations) - 1; n > 0 {
			rep.Verdict = strings.TrimSuffix(rep.Verdict, ".") + fmt.Sprintf(" (and %d more).", n)
		}
	}
	return rep, nil
}
