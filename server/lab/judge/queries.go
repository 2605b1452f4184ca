package judge

import (
	"strings"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/jackc/pgx/v5"
)

// This file holds every SQL statement the lab runs itself, and nothing
// else in the lab does: the set-up of its schemas beside the engine's
// (setup.go, sql/history.sql), the reads of the history its verdicts are
// made from, the load lab's fills and tallies. Names are Noun+Verb, as the
// engine's are. The queue's own statements are the engine's, run through
// engine.Queue and engine.Receiver.

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// historyColumns are a history record's columns, in HistoryRecord's order.
const historyColumns = "seq, job_id, op, at, old_status, new_status, old_owner, new_owner,\n" +
	"       old_epoch, new_epoch, old_lease_until, new_lease_until, attempts, result, app"

// jobHistoryList reads a job's history as the trigger recorded it.
func jobHistoryList(schema string, jobID int64) playground.Statement {
	return playground.Statement{Name: "JobHistoryList", SQL: "SELECT " + historyColumns + "\n  FROM " + ident(schema) + ".job_history\n WHERE job_id = $1\n ORDER BY seq",
		Args: []any{jobID}}
}

// jobHistoryAfter reads the history records numbered after seq, every
// job's, oldest first, at most limit of them: what a listener that lost
// its connection missed.
func jobHistoryAfter(schema string, seq int64, limit int) playground.Statement {
	return playground.Statement{Name: "JobHistoryAfter", SQL: "SELECT " + historyColumns + "\n  FROM " + ident(schema) + ".job_history\n WHERE seq > $1\n ORDER BY seq\n LIMIT $2",
		Args: []any{seq, limit}}
}

// JobsFill empties a jobs table and inserts n pending jobs in one go, for
// the load lab and the benchmarks: three statements, run in order.
func JobsFill(schema string, n int) []playground.Statement { return JobsFillFinished(schema, 0, n) }

// JobsFillFinished empties the jobs table, then inserts finished jobs
// (done, at epoch 1, as a long-lived queue's table holds them) and pending
// ones, and analyzes the table: the set-up of a benchmark. Every job may
// be tried engine.MaxAttemptsCap times: the load lab's stalls take a job
// over again and again, and a job must not end failed for its attempts
// running out, which is a queue's policy and not what the lab measures.
func JobsFillFinished(schema string, finished, pending int) []playground.Statement {
	t := ident(schema) + ".jobs"
	sts := []playground.Statement{{Name: "JobsTruncate", SQL: "TRUNCATE " + t}}
	if finished > 0 {
		sts = append(sts, playground.Statement{Name: "JobInsertFinished", SQL: "INSERT INTO " + t +
			" (payload, status, owner, epoch, attempts, max_attempts, result) SELECT jsonb_build_object('n', i), 'done', 'earlier', 1, 1, $2, '{}' FROM generate_series(1, $1) i",
			Args: []any{finished, engine.MaxAttemptsCap}})
	}
	return append(sts,
		playground.Statement{Name: "JobInsertSeries", SQL: "INSERT INTO " + t + " (payload, max_attempts) SELECT jsonb_build_object('n', i), $2 FROM generate_series(1, $1) i",
			Args: []any{pending, engine.MaxAttemptsCap}},
		playground.Statement{Name: "JobsAnalyze", SQL: "ANALYZE " + t},
	)
}

// ---- tallies: the load lab's live counts --------------------------------------
//
// Counted from what Postgres recorded, never from what workers say, while
// the workers run; the lab's invariant checker reads the same records job
// by job at the end, and the two must agree.

// jobsTally counts a queue's jobs by how they ended: done, failed, and
// all of them.
func jobsTally(schema string) playground.Statement {
	return playground.Statement{Name: "JobsTally", SQL: "SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'failed'), count(*) FROM " +
		ident(schema) + ".jobs"}
}

// historyLateWrites counts the completions and failure reports that landed
// on a job after another connection had claimed it: zombie writes that got
// into the row. (A lab queue's history names each write's connection.) A
// connection's late writes of one kind to one job count once: a zombie's
// renewal of a finished row, with the status check off, is recorded as a
// completion too. An expiry is no write of the zombie's: the claim that
// found its lease run out on its last attempt ended the job.
func historyLateWrites(schema string) playground.Statement {
	h := ident(schema) + ".job_history"
	return playground.Statement{Name: "HistoryLateWrites", SQL: "SELECT count(DISTINCT (w.job_id, w.app, w.op)) FROM " + h + " w" +
		" WHERE w.op IN ('complete', 'fail', 'retry')" +
		" AND (SELECT c.app FROM " + h + " c WHERE c.job_id = w.job_id AND c.op = 'claim' AND c.seq < w.seq ORDER BY c.seq DESC LIMIT 1) <> w.app"}
}

// decisionsOlderAccepted counts the deliveries a receiver took although it
// held a newer epoch for the job: zombie writes that got to the receiver,
// each sender's once per job.
func decisionsOlderAccepted(schema string) playground.Statement {
	return playground.Statement{Name: "DecisionsOlderAccepted", SQL: "SELECT count(DISTINCT (job_id, owner)) FROM " + ident(schema) + ".decisions WHERE decision = 'accepted-older'"}
}

// historySpan reads how long a queue took over its jobs on the database
// clock: from the first claim to the moment the last job first ended
// (done, or failed: by a failure report or by an expiry on its last
// attempt), whatever zombies wrote after.
func historySpan(schema string) playground.Statement {
	h := ident(schema) + ".job_history"
	return playground.Statement{Name: "HistorySpan", SQL: "SELECT (SELECT min(at) FROM " + h + " WHERE op = 'claim'), max(first_end) FROM" +
		" (SELECT min(at) AS first_end FROM " + h + " WHERE op IN ('complete', 'fail', 'expire') GROUP BY job_id) e"}
}

// dbErr is the engine's own translation of a lab statement's error, so
// that a database out of reach is engine.ErrUnavailable for both alike.
func dbErr(op string, err error) error { return engine.TranslateError(op, err) }

// jobWritesList reads every UPDATE statement on jobs the job_writes
// trigger recorded, oldest first.
func jobWritesList(schema string) playground.Statement {
	return playground.Statement{Name: "JobWritesList", SQL: "SELECT seq, at, app, matched, job_ids\n  FROM " + ident(schema) + ".job_writes\n ORDER BY seq"}
}

// jobWritesSent reads how many UPDATE statements on jobs worker A and
// worker B have sent, rolled back or not (the job_writes_sent_ sequences).
func jobWritesSent(schema string) playground.Statement {
	s := ident(schema)
	return playground.Statement{Name: "JobWritesSent", SQL: "SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM " + s + ".job_writes_sent_a),\n" +
		"       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM " + s + ".job_writes_sent_b)"}
}

// jobSet puts a job in a probe's state, as the server: $1 id, $2 status,
// $3 owner (” for none), $4 epoch, $5 the lease in milliseconds from
// now() (NULL for none), $6 attempts, $7 max_attempts.
func jobSet(schema string) playground.Statement {
	return playground.Statement{Name: "JobSet", SQL: "UPDATE " + ident(schema) + ".jobs\n" +
		"   SET status = $2, owner = NULLIF($3, ''), epoch = $4, lease_until = now() + $5::bigint * interval '1 millisecond',\n" +
		"       attempts = $6, max_attempts = $7, result = NULL, error = NULL\n WHERE id = $1"}
}

// jobRowsList reads every job's row, as a probe compares them.
func jobRowsList(schema string) playground.Statement {
	return playground.Statement{Name: "JobRowsList", SQL: "SELECT id, status, coalesce(owner, ''), epoch, coalesce(lease_until::text, ''), attempts,\n" +
		"       coalesce(result::text, ''), coalesce(error, '')\n  FROM " + ident(schema) + ".jobs\n ORDER BY id"}
}
