package protocol

import (
	"fmt"
	"strings"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
)

// Narrate fills in e.Text, if it is empty, with one sentence built from
// the event's own fields. Every emitter calls it, so the words for each
// kind and code are written here once, and an event says nothing its
// fields do not.
func Narrate(e *Event) {
	if e.Text == "" {
		e.Text = narration(*e)
	}
}

func ClockTime(t time.Time) string { return t.UTC().Format("15:04:05.000") }

func ms(v int64) string { return (time.Duration(v) * time.Millisecond).String() }

func narration(e Event) string {
	l := e.Actor
	switch {
	case e.SQL != nil:
		return sqlNarration(l, e.SQL)
	case e.Checkpoint != nil:
		c := e.Checkpoint
		switch c.Name {
		case CheckpointDeliver:
			return fmt.Sprintf("Worker %s holds job %d at epoch %d and is ready to call the receiver.", l, c.JobID, Int64Of(c.Epoch))
		case CheckpointCommit:
			return fmt.Sprintf("Worker %s is ready to commit job %d at epoch %d.", l, c.JobID, Int64Of(c.Epoch))
		}
		return fmt.Sprintf("Worker %s is ready to claim a job.", l)
	case e.Process != nil:
		return processNarration(l, e.Process)
	case e.Call != nil:
		c := e.Call
		switch c.Result {
		case DeliveryRefused:
			return fmt.Sprintf("The receiver refused worker %s's epoch %d for job %d: it holds epoch %d (HTTP 409).", l, c.Epoch, c.JobID, Int64Of(c.HeldEpoch))
		case DeliveryFailed:
			msg := "no answer"
			if c.Error != nil {
				msg = c.Error.Message
			}
			return fmt.Sprintf("Worker %s could not reach the receiver: %s.", l, strings.TrimSuffix(msg, "."))
		}
		return fmt.Sprintf("The receiver accepted worker %s's epoch %d for job %d (%s, HTTP %d).", l, c.Epoch, c.JobID, c.Decision, c.HTTPStatus)
	case e.Row != nil:
		return rowNarration(e.Row)
	case e.Receiver != nil:
		return receiverNarration(e.Receiver)
	case e.Lease != nil:
		x := e.Lease
		holder := x.Owner
		if x.Holder != "" {
			holder = "worker " + x.Holder
		}
		if x.Change == LeaseTakenLive {
			return fmt.Sprintf("Worker %s's own clock, %v ahead, said job %d's lease (epoch %d, %s) had run out; on the database clock it still had %v to run.",
				x.ClockOf, ms(x.SkewMS), x.JobID, x.Epoch, holder, ms(x.LiveMS))
		}
		return fmt.Sprintf("Job %d's lease (epoch %d, %s) ran out on the database clock: lease_until %s < now() %s. The job is claimable again.",
			x.JobID, x.Epoch, holder, ClockTime(x.LeaseUntil), ClockTime(x.DBNow))
	case e.Verdict != nil:
		if e.Verdict.Outcome != nil {
			return e.Verdict.Outcome.Verdict
		}
		if e.Verdict.Report != nil {
			return e.Verdict.Report.Verdict
		}
	case e.RunState != nil:
		i := e.RunState.Info
		s := fmt.Sprintf("Run %s (%s, %s) is %s", i.ID, i.Ordering, i.Mode, i.Phase)
		if i.Mode == ModeAuto && !i.Phase.Ended() {
			s += fmt.Sprintf(", one step every %v", ms(i.PaceMS))
		}
		if i.StopReason != "" {
			s += ": " + StopWords(i.StopReason)
		}
		return s + "."
	case e.Batch != nil:
		b := e.Batch
		if b.Phase == BatchFinished {
			return b.Answer
		}
		if b.Phase == BatchStopped {
			return fmt.Sprintf("The batch %s was stopped (%s): the runs it had not played will not run.", b.Name, b.Answer)
		}
		if b.Name == experiments.BatchCheck {
			return fmt.Sprintf("Check it: your statements, in %d runs of real workers — the article's two orderings, then the hints' three cases.", len(b.Cells))
		}
		if b.Name == experiments.BatchMatrix {
			return fmt.Sprintf("The guard matrix: %d runs, every guard off in every ordering, with two names and with one, for real.", len(b.Cells))
		}
		return fmt.Sprintf("The experiment %s: %d runs, for real.", b.Name, len(b.Cells))
	case e.Note != nil:
		return noteNarration(l, e.Note)
	case e.Error != nil:
		switch e.Error.Code {
		case ErrStepFailed:
			return "The run stopped: " + e.Error.Message
		case ErrStartFailed:
			return "The run could not start: " + e.Error.Message
		case ErrBadCommand:
			return fmt.Sprintf("Worker %s ignored a bad command: %s.", l, strings.TrimSuffix(e.Error.Message, "."))
		}
		return "Something went wrong: " + e.Error.Message
	case e.Load != nil:
		return loadNarration(e.Load)
	case e.Session != nil:
		switch e.Session.Reason {
		case SessionIdle:
			return "Session ended: it was idle for too long."
		case SessionDeleted:
			return "Session ended: its driver ended it."
		case SessionShutdown:
			return "Session ended: the server is shutting down."
		}
	}
	return string(e.Kind)
}

func Int64Of(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func opName(op Op) string {
	if op == OpComplete {
		return "commit"
	}
	return string(op)
}

func sqlNarration(l string, s *SQLEvent) string {
	ep := Int64Of(s.Epoch)
	switch {
	case s.Result == ResultFailed:
		msg := ""
		if s.Error != nil {
			msg = s.Error.Message
		}
		return fmt.Sprintf("Worker %s's %s failed: %s.", l, s.Stmt.Name, strings.TrimSuffix(msg, "."))
	case s.Op == OpClaim && s.Result == ResultNoJob:
		return fmt.Sprintf("Worker %s found no claimable job (0 rows).", l)
	case s.Op == OpClaim:
		until := ""
		if s.LeaseUntil != nil {
			until = ", leased until " + ClockTime(*s.LeaseUntil) + " on the database clock"
		}
		return fmt.Sprintf("Worker %s claimed job %d at epoch %d%s (1 row).", l, s.JobID, ep, until)
	case s.Op == OpRenew && s.Result == ResultFenced:
		return fmt.Sprintf("Worker %s's lease renewal on job %d at epoch %d matched no row: its lease is lost%s.", l, s.JobID, ep, fenceClause(s.Fenced))
	case s.Op == OpRenew:
		return fmt.Sprintf("Worker %s renewed its lease on job %d at epoch %d (1 row).", l, s.JobID, ep)
	case s.Result == ResultFenced:
		return fmt.Sprintf("Worker %s's %s of job %d at epoch %d matched no row: fenced, its result is dropped%s.", l, opName(s.Op), s.JobID, ep, fenceClause(s.Fenced))
	case s.Op == OpComplete:
		return fmt.Sprintf("Worker %s committed job %d at epoch %d (1 row).", l, s.JobID, ep)
	case s.Op == OpFail && s.Status == StatusFailed:
		return fmt.Sprintf("Worker %s reported job %d failed at epoch %d, for good: no attempts are left (1 row).", l, s.JobID, ep)
	case s.Op == OpFail:
		return fmt.Sprintf("Worker %s reported job %d failed at epoch %d; it goes back to pending for a retry (1 row).", l, s.JobID, ep)
	}
	return fmt.Sprintf("Worker %s ran %s (%d rows).", l, s.Stmt.Name, s.Stmt.Rows)
}

// fenceClause says why a write was fenced, as " (reason; reason)".
func fenceClause(f *Fence) string {
	if f == nil || len(f.Reasons) == 0 {
		return ""
	}
	var rs []string
	for _, r := range f.Reasons {
		rs = append(rs, ReasonWords(r, *f))
	}
	return " (" + strings.Join(rs, "; ") + ")"
}

func processNarration(l string, p *ProcessEvent) string {
	switch p.Change {
	case ProcSpawned:
		s := fmt.Sprintf("Worker %s is spawned as a real process (pid %d), claiming as %s", l, p.Pid, p.Owner)
		if p.SkewMS != 0 {
			s += fmt.Sprintf("; its own clock runs %v ahead", ms(p.SkewMS))
		}
		return s + "."
	case ProcReady:
		return fmt.Sprintf("Worker %s (pid %d) is up, claiming as %s.", l, p.Pid, p.Owner)
	case ProcStopped:
		return fmt.Sprintf("Worker %s (pid %d) is frozen by SIGSTOP: its process state is %q. Its heartbeat stops with it.", l, p.Pid, p.State)
	case ProcContinued:
		return fmt.Sprintf("Worker %s (pid %d) is thawed by SIGCONT (its process state is %q) and carries on as if no time had passed.", l, p.Pid, p.State)
	case ProcKilling:
		return fmt.Sprintf("Worker %s (pid %d) is sent SIGKILL.", l, p.Pid)
	case ProcExited:
		switch {
		case p.Signal != "":
			return fmt.Sprintf("Worker %s (pid %d) was killed by %s.", l, p.Pid, p.Signal)
		case p.ExitCode != nil:
			return fmt.Sprintf("Worker %s (pid %d) exited with code %d.", l, p.Pid, *p.ExitCode)
		}
		return fmt.Sprintf("Worker %s (pid %d) ended.", l, p.Pid)
	}
	return fmt.Sprintf("Worker %s (pid %d): %s.", l, p.Pid, p.Change)
}

func rowNarration(r *RowEvent) string {
	by := "an unnamed connection"
	switch {
	case r.Writer != "":
		by = "worker " + r.Writer + "'s connection"
	case r.App != "":
		by = r.App
	}
	n := r.New
	lease := ""
	if n.LeaseUntil != nil {
		lease = ", leased until " + ClockTime(*n.LeaseUntil)
	}
	switch r.Op {
	case RowInsert:
		return fmt.Sprintf("Row: job %d is pending at epoch %d.", r.JobID, n.Epoch)
	case RowClaim:
		return fmt.Sprintf("Row: job %d is running, owned by %s at epoch %d%s (written by %s).", r.JobID, n.Owner, n.Epoch, lease, by)
	case RowRenew:
		return fmt.Sprintf("Row: job %d's lease is extended%s (written by %s).", r.JobID, lease, by)
	case RowComplete:
		return fmt.Sprintf("Row: job %d is done at epoch %d (written by %s).", r.JobID, n.Epoch, by)
	case RowFail:
		return fmt.Sprintf("Row: job %d has failed for good at epoch %d (written by %s).", r.JobID, n.Epoch, by)
	case RowRetry:
		return fmt.Sprintf("Row: job %d is pending again for a retry (written by %s).", r.JobID, by)
	case RowExpire:
		return fmt.Sprintf("Row: job %d has failed for good at epoch %d: its lease ran out on its last attempt, and a claim ended it (written by %s).", r.JobID, n.Epoch, by)
	}
	return fmt.Sprintf("Row: job %d changed: %s at epoch %d (written by %s).", r.JobID, n.Status, n.Epoch, by)
}

func receiverNarration(r *ReceiverEvent) string {
	switch r.Decision {
	case AcceptedFirst:
		return fmt.Sprintf("The receiver accepted worker %s's epoch %d for job %d: the first delivery it has seen.", r.From, r.Epoch, r.JobID)
	case AcceptedNewer:
		return fmt.Sprintf("The receiver accepted worker %s's epoch %d for job %d, superseding epoch %d.", r.From, r.Epoch, r.JobID, Int64Of(r.Superseded))
	case AcceptedSame:
		return fmt.Sprintf("The receiver accepted worker %s's epoch %d for job %d again: the same epoch, an idempotent retry.", r.From, r.Epoch, r.JobID)
	case AcceptedOlder:
		return fmt.Sprintf("The receiver accepted worker %s's OLDER epoch %d for job %d over epoch %d: it went backwards.", r.From, r.Epoch, r.JobID, Int64Of(r.Superseded))
	case RefusedStale:
		return fmt.Sprintf("The receiver refused worker %s's epoch %d for job %d: it already holds epoch %d.", r.From, r.Epoch, r.JobID, r.HeldEpoch)
	}
	return fmt.Sprintf("The receiver decided %s on worker %s's epoch %d for job %d.", r.Decision, r.From, r.Epoch, r.JobID)
}

func noteNarration(l string, n *NoteEvent) string {
	w := n.Worker
	if w == "" {
		w = l
	}
	switch n.Code {
	case NoteSkip:
		return fmt.Sprintf("Worker %s holds no job: it skips this step.", w)
	case NoteGone:
		return fmt.Sprintf("Worker %s has exited: nothing to do.", w)
	case NoteWakesLater:
		return fmt.Sprintf("Worker %s is frozen: it will go on as soon as it wakes.", w)
	case NoteNoLease:
		return fmt.Sprintf("Job %d holds no lease (it is %s).", n.JobID, n.Status)
	case NoteStallLimit:
		return fmt.Sprintf("Worker %s has been frozen for longer than %v, this server's limit: it is killed.", w, ms(n.LimitMS))
	case NoteStopped:
		return "The run was stopped: " + StopWords(n.Reason) + "."
	case NoteOutput:
		return fmt.Sprintf("Worker %s printed: %s", w, n.Line)
	case NoteLog:
		return fmt.Sprintf("Worker %s logged: %s", w, n.Line)
	case NoteInLine:
		return InLineWords(n.Place, time.Duration(n.WaitS)*time.Second)
	case NoteChapter:
		return fmt.Sprintf("Your teacher opened the chapter “%s” of the lesson.", n.Chapter.Title())
	case NoteClassRun:
		return "Your teacher started a run for everyone: it is on the stage."
	case NoteClassEnded:
		return "Your teacher ended the class. This page stays yours, but your checks from now on are not counted on the class's board."
	}
	return string(n.Code)
}

// InLineWords says where a check waits in the server's line, and about
// how long it waits when that is known (wait > 0): "Your check is 3rd in
// line, about 40 s."; 1 is "next".
func InLineWords(place int, wait time.Duration) string {
	where := "next"
	if place > 1 {
		where = Ordinal(place)
	}
	if wait <= 0 {
		return "Your check is " + where + " in line."
	}
	return fmt.Sprintf("Your check is %s in line, about %s.", where, waitWords(wait))
}

// Ordinal is n as a place: 1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st.
func Ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// waitWords is a wait as a person says it: "40 s", "2 min".
func waitWords(d time.Duration) string {
	if d < 90*time.Second {
		return fmt.Sprintf("%d s", max(1, int(d.Round(time.Second)/time.Second)))
	}
	return fmt.Sprintf("%d min", int(d.Round(time.Minute)/time.Minute))
}

func loadNarration(l *LoadEvent) string {
	switch l.Phase {
	case experiments.LoadStarted:
		return loadStartedWords(l.Config)
	case experiments.LoadTick:
		if t := l.Tally; t != nil {
			return fmt.Sprintf("%s: %s of %s jobs done, %.0f jobs/s; %d stalls; zombie writes landed: %d in the row, %d at the receiver.",
				UpperFirst(StyleShort(t.Style)), experiments.Thousands(int(t.Done)), experiments.Thousands(int(t.Jobs)), t.PerSecond, t.Stalls, t.LateRow, t.LateReceiver)
		}
	case experiments.LoadRoundDone, experiments.LoadStyleDone:
		if l.Result != nil {
			return loadResultWords(l)
		}
	case experiments.LoadFinished:
		return l.Verdict
	case experiments.LoadStopped:
		if l.Message != "" {
			return "The load lab stopped: " + l.Message
		}
		return "The load lab stopped: " + StopWords(l.Reason) + "."
	}
	return "The load lab: " + string(l.Phase) + "."
}
