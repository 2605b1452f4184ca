package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// This file holds every SQL statement the engine runs, and nothing else
// does. Names are Noun+Verb. Each guard is one clause: when a guard is off
// its clause is left out of the statement and a comment stands in its place,
// so the SQL a person reads on the timeline is exactly the SQL that ran.

// Statement is one SQL statement as the engine sends it to Postgres.
type Statement struct {
	Name string // Noun+Verb, such as "JobClaim"
	SQL  string
	Args []any
}

// builder assembles a statement line by line and numbers its arguments.
type builder struct {
	name  string
	lines []string
	args  []any
}

// arg adds an argument and returns its placeholder.
func (b *builder) arg(v any) string {
	b.args = append(b.args, v)
	return "$" + strconv.Itoa(len(b.args))
}

func (b *builder) line(format string, a ...any) { b.lines = append(b.lines, fmt.Sprintf(format, a...)) }

// guarded adds the line clause when guard g is on, and otherwise a comment
// in its place that says which guard removed it.
func (b *builder) guarded(gs Guards, g Guard, clause string) {
	if gs.On(g) {
		b.lines = append(b.lines, clause)
		return
	}
	body := strings.TrimLeft(clause, " ")
	indent := clause[:len(clause)-len(body)]
	b.lines = append(b.lines, indent+"-- "+body+"  ("+g.String()+" off)")
}

// offNote is the trailing comment on a line that a broken guard changed.
func offNote(gs Guards, g Guard, what string) string {
	if gs.On(g) {
		return ""
	}
	return "  -- " + what + " (" + g.String() + " off)"
}

// set writes an UPDATE's SET list, one assignment a line.
func (b *builder) set(assignments []string) {
	for i, l := range assignments {
		if i == 0 {
			b.line("     SET %s", l)
		} else {
			b.line("         %s", l)
		}
	}
}

func (b *builder) build() Statement {
	return Statement{Name: b.name, SQL: strings.Join(b.lines, "\n"), Args: b.args}
}

func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

// clockExpr returns the expression a lease is judged by: the database's
// now(), or with db-clock off the worker's own clock passed as an argument.
func clockExpr(b *builder, gs Guards, workerNow time.Time) string {
	if gs.On(DBClock) {
		return "now()"
	}
	return b.arg(workerNow) + "::timestamptz"
}

// JobClaim takes one claimable job in a single statement (rule 1): a
// pending job whose run_at has come, or a running one whose lease has run
// out with attempts left. It sets the owner, bumps the epoch and starts a
// fresh lease. The same statement first ends every running job whose lease
// ran out on its last attempt (spent): such a job is never claimed again.
func JobClaim(schema string, gs Guards, owner string, lease time.Duration, workerNow time.Time) Statement {
	return claimStatement("JobClaim", schema, gs, owner, 1, lease, workerNow)
}

// claimStatement builds the one-job and the batch claim: they differ only
// in how many rows the inner SELECT may pick.
func claimStatement(name, schema string, gs Guards, owner string, n int, lease time.Duration, workerNow time.Time) Statement {
	b := &builder{name: name}
	t := ident(schema) + ".jobs"
	ownerArg, leaseArg := b.arg(owner), b.arg(interval(lease))
	clock := clockExpr(b, gs, workerNow)
	clockNote := offNote(gs, DBClock, "the worker's own clock, not now()")
	spent(b, t, clock, clockNote)
	b.line("UPDATE %s", t)
	b.line("   SET status = 'running',")
	b.line("       owner = %s,", ownerArg)
	b.guarded(gs, EpochIncrement, "       epoch = epoch + 1,")
	b.line("       attempts = attempts + 1,")
	b.line("       lease_until = %s + %s::interval,%s", clock, leaseArg, clockNote)
	b.line("       updated_at = now()")
	// One job is picked as the article writes it, id = (SELECT ...); a
	// batch into an array.
	pick, open, shut := "LIMIT 1", "(", ")"
	if n != 1 {
		pick, open, shut = "LIMIT "+b.arg(n), "ANY (ARRAY(", "))"
	}
	b.line(" WHERE id = %s", open)
	b.line("       SELECT id FROM %s", t)
	b.line("        WHERE run_at <= %s", clock)
	b.line("          AND (status = 'pending'")
	b.line("               OR (status = 'running' AND lease_until < %s AND attempts < max_attempts))%s", clock, clockNote)
	b.line("        ORDER BY run_at, id")
	b.line("        %s", pick)
	if gs.On(SkipLocked) {
		b.line("          FOR UPDATE SKIP LOCKED%s", shut)
	} else {
		b.line("          FOR UPDATE  -- SKIP LOCKED  (%s off)", SkipLocked)
		b.line("       %s", shut)
	}
	b.line("RETURNING id, owner, epoch, lease_until, attempts, payload, now()")
	return b.build()
}

// spent adds the claim's first part: a CTE that ends, as failed, every
// running job whose lease ran out on its last attempt. It bumps the epoch,
// as a claim does, because the job is taken from its holder: the holder's
// late commit is fenced like a zombie's. It passes over rows another
// session holds (SKIP LOCKED whatever the guards say: it is not the claim's
// lock), and reads the partial index jobs_leased, so it costs nothing while
// no lease has run out.
func spent(b *builder, t, clock, clockNote string) {
	b.line("WITH spent AS (")
	b.line("  UPDATE %s", t)
	b.line("     SET status = 'failed',")
	b.line("         epoch = epoch + 1,  -- taken from its holder, as a claim takes a job")
	b.line("         error = 'its lease ran out on attempt ' || attempts || ' of ' || max_attempts,")
	b.line("         lease_until = NULL,")
	b.line("         updated_at = now()")
	b.line("   WHERE id = ANY (ARRAY(")
	b.line("         SELECT id FROM %s", t)
	b.line("          WHERE status = 'running' AND lease_until < %s AND attempts >= max_attempts%s", clock, clockNote)
	b.line("            FOR UPDATE SKIP LOCKED))")
	b.line(")")
}

// JobCountClaimable counts the jobs a claim would see as claimable, by the
// same clock, without locking them: when a claim finds none while this
// finds some, the claim skipped rows another session had locked for a
// moment (a heartbeat's update).
func JobCountClaimable(schema string, gs Guards, workerNow time.Time) Statement {
	b := &builder{name: "JobCountClaimable"}
	clock := clockExpr(b, gs, workerNow)
	b.line("SELECT count(*) FROM %s.jobs", ident(schema))
	b.line(" WHERE run_at <= %s", clock)
	b.line("   AND (status = 'pending'")
	b.line("        OR (status = 'running' AND lease_until < %s AND attempts < max_attempts))", clock)
	return b.build()
}

// ---- batches: the production path --------------------------------------------
//
// The same rules as the one-job statements, for many jobs in one
// statement each: a claim of up to n jobs, and a complete, fail or renew of
// many, each a compare-and-set on that job's own owner and epoch, which
// says for every job what its row held when it was judged.

// JobClaimBatch takes up to n claimable jobs in one statement, each with
// its epoch bumped and a fresh lease on the database clock, skipping rows
// another claimer holds, after ending the spent jobs as JobClaim does. The
// jobs are picked into an array and updated by their primary key, so the
// plan does not hang on the table's statistics.
func JobClaimBatch(schema string, gs Guards, owner string, n int, lease time.Duration, workerNow time.Time) Statement {
	return claimStatement("JobClaimBatch", schema, gs, owner, n, lease, workerNow)
}

// casBatch builds a compare-and-set on many jobs as one statement: the
// input (job id, owner and epoch held, and the columns set) as arrays; the
// rows locked by primary key, in id order (so two batches that meet never
// deadlock), before the UPDATE touches them; the UPDATE matching each row
// only if every kept guard holds for its own owner and epoch; and for every
// input row, in input order: the job id, the row as seen (NULLs: no such
// job), returned (NULL: fenced), now(). extra names the input's further
// columns and their array types.
func casBatch(b *builder, schema string, gs Guards, ids []int64, owners []string, epochs []int64, extra [][2]string, extraArgs []any, set []string, returning string) {
	t := ident(schema) + ".jobs"
	cols := "id, owner, epoch"
	idsArg := b.arg(ids)
	arrays := fmt.Sprintf("%s::bigint[], %s::text[], %s::bigint[]", idsArg, b.arg(owners), b.arg(epochs))
	carried := ""
	for i, e := range extra {
		cols += ", " + e[0]
		arrays += fmt.Sprintf(", %s::%s", b.arg(extraArgs[i]), e[1])
		carried += ", input." + e[0]
	}
	b.line("WITH input AS (")
	b.line("  SELECT * FROM unnest(%s) WITH ORDINALITY AS i(%s, ord)", arrays, cols)
	b.line("), seen AS (")
	b.line("  SELECT j.id, j.status AS row_status, j.owner AS row_owner, j.epoch AS row_epoch,")
	b.line("         input.owner AS held_owner, input.epoch AS held_epoch%s", carried)
	b.line("    FROM %s AS j JOIN input ON input.id = j.id", t)
	b.line("   WHERE j.id = ANY (%s::bigint[])", idsArg)
	b.line("   ORDER BY j.id")
	b.line("     FOR UPDATE OF j")
	b.line("), done AS (")
	if set == nil {
		// A lock alone: the rows are seen, locked, and judged, and nothing
		// is written.
		b.line("  SELECT seen.id, %s", returning)
		b.line("    FROM seen")
		b.line("   WHERE true")
	} else {
		b.line("  UPDATE %s AS j", t)
		b.set(set)
		// The guards compare the row as seen, which is the row as it is:
		// seen holds its lock.
		b.line("    FROM seen")
		b.line("   WHERE j.id = seen.id")
	}
	b.guarded(gs, StatusCheck, "     AND seen.row_status = 'running'")
	b.guarded(gs, OwnerCheck, "     AND seen.row_owner = seen.held_owner")
	b.guarded(gs, EpochCheck, "     AND seen.row_epoch = seen.held_epoch")
	if set != nil {
		b.line("  RETURNING j.id, %s", returning)
	}
	b.line(")")
	b.line("SELECT input.id, seen.row_status, seen.row_owner, seen.row_epoch, done.returned, now()")
	b.line("  FROM input LEFT JOIN seen ON seen.id = input.id LEFT JOIN done ON done.id = input.id")
	b.line(" ORDER BY input.ord")
}

// JobCompleteBatch records many jobs' results, each only if its caller
// still owns it at the epoch it holds.
func JobCompleteBatch(schema string, gs Guards, ids []int64, owners []string, epochs []int64, results []string) Statement {
	b := &builder{name: "JobCompleteBatch"}
	casBatch(b, schema, gs, ids, owners, epochs, [][2]string{{"result", "text[]"}}, []any{results}, []string{
		"status = 'done',",
		"result = seen.result::jsonb,",
		"lease_until = NULL,",
		"updated_at = now()",
	}, "j.epoch AS returned")
	return b.build()
}

// JobFailBatch records many failures, each only if its caller still owns
// the job: back to pending while it has attempts left, to run again after
// its own delay, and failed after.
func JobFailBatch(schema string, gs Guards, ids []int64, owners []string, epochs []int64, reasons []string, delays []time.Duration) Statement {
	b := &builder{name: "JobFailBatch"}
	waits := make([]pgtype.Interval, len(delays))
	for i, d := range delays {
		waits[i] = interval(d)
	}
	casBatch(b, schema, gs, ids, owners, epochs, [][2]string{{"reason", "text[]"}, {"delay", "interval[]"}}, []any{reasons, waits}, []string{
		"status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END,",
		"error = seen.reason,",
		"run_at = now() + seen.delay,",
		"lease_until = NULL,",
		"updated_at = now()",
	}, "j.status AS returned")
	return b.build()
}

// JobLockBatch locks many jobs' rows and judges each as a compare-and-set
// would, writing nothing: returned is 1 for each job its caller still
// holds. The transaction that ran it then writes for those jobs, knowing
// no other claim can take them before it ends.
func JobLockBatch(schema string, gs Guards, ids []int64, owners []string, epochs []int64) Statement {
	b := &builder{name: "JobLockBatch"}
	casBatch(b, schema, gs, ids, owners, epochs, nil, nil, nil, "1 AS returned")
	return b.build()
}

// LeaseRenewBatch extends many leases, each by compare-and-set like a
// commit: a zombie's heartbeat fails exactly as its commit would.
func LeaseRenewBatch(schema string, gs Guards, ids []int64, owners []string, epochs []int64, lease time.Duration, workerNow time.Time) Statement {
	b := &builder{name: "LeaseRenewBatch"}
	clock := clockExpr(b, gs, workerNow)
	leaseArg := b.arg(interval(lease))
	casBatch(b, schema, gs, ids, owners, epochs, nil, nil, []string{
		fmt.Sprintf("lease_until = %s + %s::interval,%s", clock, leaseArg, offNote(gs, DBClock, "the worker's own clock, not now()")),
		"updated_at = now()",
	}, "j.lease_until AS returned")
	return b.build()
}

// casWhere adds the compare-and-set clauses shared by renew, complete and
// fail: the job id, then one clause per ownership guard.
func casWhere(b *builder, gs Guards, idArg, owner string, epoch int64) {
	b.line("  WHERE id = %s", idArg)
	b.guarded(gs, StatusCheck, "    AND status = 'running'")
	// Placeholders are only numbered for clauses that are sent, so a
	// broken guard's comment names the value it no longer compares.
	if gs.On(OwnerCheck) {
		b.line("    AND owner = %s", b.arg(owner))
	} else {
		b.guarded(gs, OwnerCheck, "    AND owner = <the owner held>")
	}
	if gs.On(EpochCheck) {
		b.line("    AND epoch = %s", b.arg(epoch))
	} else {
		b.guarded(gs, EpochCheck, "    AND epoch = <the epoch held>")
	}
}

// casStatement builds a compare-and-set on one job as a single statement
// that also says what the row held when it was judged. The row is locked
// first (the CTE "seen", which the UPDATE joins, so it is read and locked
// before the UPDATE can touch the row); the UPDATE then matches the row only
// if every kept guard holds; and the statement returns the row as seen
// beside the UPDATE's own result. When the guards fail, the reasons come
// from that same locked row, never from a later read.
//
// Its one row is: the row's status, owner and epoch as seen (no row at all:
// no such job), then returning (NULL when the write was fenced), then now().
func casStatement(b *builder, schema string, gs Guards, jobID int64, owner string, epoch int64, set []string, returning string) {
	casStatementThen(b, schema, gs, jobID, owner, epoch, set, returning, nil)
}

// casStatementThen is casStatement with more CTEs after the UPDATE's, which
// may read what it wrote (FROM done): they happen only if it did.
func casStatementThen(b *builder, schema string, gs Guards, jobID int64, owner string, epoch int64, set []string, returning string, then func(b *builder)) {
	t := ident(schema) + ".jobs"
	idArg := b.arg(jobID)
	b.line("WITH seen AS (")
	b.line("  SELECT status AS row_status, owner AS row_owner, epoch AS row_epoch")
	b.line("    FROM %s", t)
	b.line("   WHERE id = %s", idArg)
	b.line("     FOR UPDATE")
	b.line("), done AS (")
	b.line("  UPDATE %s", t)
	b.set(set)
	b.line("    FROM seen")
	casWhere(b, gs, idArg, owner, epoch)
	b.lines = append(b.lines, "  RETURNING "+returning)
	if then != nil {
		then(b)
	}
	b.line(")")
	b.line("SELECT seen.row_status, seen.row_owner, seen.row_epoch, done.*, now()")
	b.line("  FROM seen LEFT JOIN done ON true")
}

// LeaseRenew extends a lease by compare-and-set, like a commit: a zombie's
// heartbeat fails exactly as its commit would.
func LeaseRenew(schema string, gs Guards, jobID int64, owner string, epoch int64, lease time.Duration, workerNow time.Time) Statement {
	b := &builder{name: "LeaseRenew"}
	clock := clockExpr(b, gs, workerNow)
	casStatement(b, schema, gs, jobID, owner, epoch, []string{
		fmt.Sprintf("lease_until = %s + %s::interval,%s", clock, b.arg(interval(lease)), offNote(gs, DBClock, "the worker's own clock, not now()")),
		"updated_at = now()",
	}, "lease_until AS new_lease_until")
	return b.build()
}

// JobComplete records a job's result, only if the caller still owns it at
// the epoch it holds.
func JobComplete(schema string, gs Guards, jobID int64, owner string, epoch int64, result []byte) Statement {
	b := &builder{name: "JobComplete"}
	casStatement(b, schema, gs, jobID, owner, epoch, []string{
		"status = 'done',",
		fmt.Sprintf("result = %s::jsonb,", b.arg(string(result))),
		"lease_until = NULL,",
		"updated_at = now()",
	}, "epoch AS new_epoch")
	return b.build()
}

// JobCompleteOutbox is JobComplete that also writes a delivery to the
// outbox, in the same statement: the delivery exists if and only if the
// commit landed, and a relay sends it after the commit.
func JobCompleteOutbox(schema string, gs Guards, jobID int64, owner string, epoch int64, result []byte, d Delivery) Statement {
	b := &builder{name: "JobCompleteOutbox"}
	casStatementThen(b, schema, gs, jobID, owner, epoch, []string{
		"status = 'done',",
		fmt.Sprintf("result = %s::jsonb,", b.arg(string(result))),
		"lease_until = NULL,",
		"updated_at = now()",
	}, "epoch AS new_epoch", func(b *builder) {
		b.line("), sent AS (")
		b.line("  INSERT INTO %s.outbox (job_id, epoch, owner, payload)", ident(schema))
		b.line("  SELECT %s, %s, %s, %s::jsonb FROM done", b.arg(d.JobID), b.arg(d.Epoch), b.arg(d.Owner), b.arg(string(d.Payload)))
	})
	return b.build()
}

// OutboxInsert writes one delivery to the outbox, in the transaction of
// the completion that earns it.
func OutboxInsert(schema string, d Delivery) Statement {
	b := &builder{name: "OutboxInsert"}
	b.line("INSERT INTO %s.outbox (job_id, epoch, owner, payload)", ident(schema))
	b.line("VALUES (%s, %s, %s, %s::jsonb)", b.arg(d.JobID), b.arg(d.Epoch), b.arg(d.Owner), b.arg(string(d.Payload)))
	return b.build()
}

// OutboxPending reads up to limit outbox deliveries not sent yet, oldest first.
func OutboxPending(schema string, limit int) Statement {
	b := &builder{name: "OutboxPending"}
	b.line("SELECT id, job_id, epoch, owner, payload, created_at")
	b.line("  FROM %s.outbox", ident(schema))
	b.line(" WHERE sent_at IS NULL")
	b.line(" ORDER BY id")
	b.line(" LIMIT %s", b.arg(limit))
	return b.build()
}

// OutboxSent marks an outbox delivery sent.
func OutboxSent(schema string, id int64) Statement {
	b := &builder{name: "OutboxSent"}
	b.line("UPDATE %s.outbox SET sent_at = now()", ident(schema))
	b.line(" WHERE id = %s AND sent_at IS NULL", b.arg(id))
	return b.build()
}

// JobFail records a failure, only if the caller still owns the job. The job
// goes back to pending for a retry after delay, or to failed once its
// attempts are used up.
func JobFail(schema string, gs Guards, jobID int64, owner string, epoch int64, reason string, delay time.Duration) Statement {
	b := &builder{name: "JobFail"}
	casStatement(b, schema, gs, jobID, owner, epoch, []string{
		"status = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END,",
		fmt.Sprintf("error = %s,", b.arg(reason)),
		fmt.Sprintf("run_at = now() + %s::interval,", b.arg(interval(delay))),
		"lease_until = NULL,",
		"updated_at = now()",
	}, "status AS new_status")
	return b.build()
}

// JobInsert adds a pending job, to run at runAt (NULL: now).
func JobInsert(schema string, payload []byte, maxAttempts int, runAt pgtype.Timestamptz) Statement {
	b := &builder{name: "JobInsert"}
	b.line("INSERT INTO %s.jobs (payload, max_attempts, run_at)", ident(schema))
	b.line("VALUES (%s::jsonb, %s, coalesce(%s::timestamptz, now()))", b.arg(string(payload)), b.arg(maxAttempts), b.arg(runAt))
	b.line("RETURNING id, now()")
	return b.build()
}

// JobInsertMany adds many pending jobs in one statement, from arrays of
// equal length (a NULL run_at: now), and returns their ids in input order.
func JobInsertMany(schema string, payloads []string, maxAttempts []int32, runAt []pgtype.Timestamptz) Statement {
	b := &builder{name: "JobInsertMany"}
	b.line("INSERT INTO %s.jobs (payload, max_attempts, run_at)", ident(schema))
	b.line("SELECT p::jsonb, m, coalesce(r, now())")
	b.line("  FROM unnest(%s::text[], %s::int[], %s::timestamptz[]) WITH ORDINALITY AS i(p, m, r, ord)", b.arg(payloads), b.arg(maxAttempts), b.arg(runAt))
	b.line(" ORDER BY ord")
	b.line("RETURNING id")
	return b.build()
}

// JobGet reads one job as it is now, with the database time.
func JobGet(schema string, jobID int64) Statement {
	b := &builder{name: "JobGet"}
	b.line("SELECT id, payload, status, owner, epoch, lease_until, attempts, max_attempts,")
	b.line("       run_at, result, error, created_at, updated_at, now()")
	b.line("  FROM %s.jobs", ident(schema))
	b.line(" WHERE id = %s", b.arg(jobID))
	return b.build()
}

// JobList reads every job, oldest first, up to limit rows.
func JobList(schema string, limit int) Statement {
	b := &builder{name: "JobList"}
	b.line("SELECT id, payload, status, owner, epoch, lease_until, attempts, max_attempts,")
	b.line("       run_at, result, error, created_at, updated_at, now()")
	b.line("  FROM %s.jobs", ident(schema))
	b.line(" ORDER BY id")
	b.line(" LIMIT %s", b.arg(limit))
	return b.build()
}

// JobHistoryList reads a job's history as the trigger recorded it.
func JobHistoryList(schema string, jobID int64) Statement {
	b := &builder{name: "JobHistoryList"}
	b.line("SELECT seq, job_id, op, at, old_status, new_status, old_owner, new_owner,")
	b.line("       old_epoch, new_epoch, old_lease_until, new_lease_until, attempts, result, app")
	b.line("  FROM %s.job_history", ident(schema))
	b.line(" WHERE job_id = %s", b.arg(jobID))
	b.line(" ORDER BY seq")
	return b.build()
}

// JobHistoryAfter reads the history records numbered after seq, every
// job's, oldest first, at most limit of them: what a listener that lost
// its connection missed.
func JobHistoryAfter(schema string, seq int64, limit int) Statement {
	b := &builder{name: "JobHistoryAfter"}
	b.line("SELECT seq, job_id, op, at, old_status, new_status, old_owner, new_owner,")
	b.line("       old_epoch, new_epoch, old_lease_until, new_lease_until, attempts, result, app")
	b.line("  FROM %s.job_history", ident(schema))
	b.line(" WHERE seq > %s", b.arg(seq))
	b.line(" ORDER BY seq")
	b.line(" LIMIT %s", b.arg(limit))
	return b.build()
}

// JobHistoryLastSeq reads the newest history record's number (0 for none).
func JobHistoryLastSeq(schema string) Statement {
	return Statement{Name: "JobHistoryLastSeq", SQL: "SELECT coalesce(max(seq), 0) FROM " + ident(schema) + ".job_history"}
}

// JobListExpired lists running jobs whose lease has run out on the
// database clock.
func JobListExpired(schema string) Statement {
	b := &builder{name: "JobListExpired"}
	b.line("SELECT id, owner, epoch, lease_until, now()")
	b.line("  FROM %s.jobs", ident(schema))
	b.line(" WHERE status = 'running' AND lease_until < now()")
	b.line(" ORDER BY id")
	return b.build()
}

// ChannelListen subscribes the connection to a schema's row-change channel.
func ChannelListen(channel string) Statement {
	return Statement{Name: "ChannelListen", SQL: "LISTEN " + ident(channel)}
}

// ChannelUnlisten ends the connection's subscription to a channel.
func ChannelUnlisten(channel string) Statement {
	return Statement{Name: "ChannelUnlisten", SQL: "UNLISTEN " + ident(channel)}
}

// ClockNow reads the database clock.
func ClockNow() Statement {
	return Statement{Name: "ClockNow", SQL: "SELECT clock_timestamp()"}
}

// ReceiverDeliver is the receiver's rule as one atomic conditional upsert:
// a newer epoch replaces what is held (and says which epoch it superseded),
// the same epoch is accepted again, an older one matches no row.
func ReceiverDeliver(schema string, gs Guards, d Delivery) Statement {
	b := &builder{name: "ReceiverDeliver"}
	t := ident(schema) + ".deliveries"
	b.line("INSERT INTO %s AS held (job_id, epoch, owner, payload)", t)
	b.line("VALUES (%s, %s, %s, %s::jsonb)", b.arg(d.JobID), b.arg(d.Epoch), b.arg(d.Owner), b.arg(string(d.Payload)))
	b.line("ON CONFLICT (job_id) DO UPDATE")
	b.line("   SET epoch = EXCLUDED.epoch, owner = EXCLUDED.owner, payload = EXCLUDED.payload,")
	b.line("       prev_epoch = held.epoch, prev_owner = held.owner,")
	b.line("       accepted = held.accepted + 1, updated_at = now()")
	b.guarded(gs, ReceiverCheck, " WHERE held.epoch <= EXCLUDED.epoch")
	b.line("RETURNING epoch, prev_epoch, prev_owner, accepted, now()")
	return b.build()
}

// ReceiverDeliverKeyed is the rule of a receiver that knows no epochs — a
// third party — and deduplicates on a stable key, the job's id: the first
// delivery for a key is applied, any later one matches no row and changes
// nothing.
func ReceiverDeliverKeyed(schema string, d Delivery) Statement {
	b := &builder{name: "ReceiverDeliverKeyed"}
	b.line("INSERT INTO %s.deliveries AS held (job_id, epoch, owner, payload)", ident(schema))
	b.line("VALUES (%s, %s, %s, %s::jsonb)", b.arg(d.JobID), b.arg(d.Epoch), b.arg(d.Owner), b.arg(string(d.Payload)))
	b.line("ON CONFLICT (job_id) DO NOTHING")
	b.line("RETURNING epoch, now()")
	return b.build()
}

// ReceiverGet reads what the receiver holds for a job.
func ReceiverGet(schema string, jobID int64) Statement {
	b := &builder{name: "ReceiverGet"}
	b.line("SELECT job_id, epoch, owner, payload, accepted, updated_at, now()")
	b.line("  FROM %s.deliveries", ident(schema))
	b.line(" WHERE job_id = %s", b.arg(jobID))
	return b.build()
}

// ReceiverDecisionInsert logs one decision of the receiver.
func ReceiverDecisionInsert(schema string, d Delivery, decision Decision, held, prev *int64) Statement {
	b := &builder{name: "ReceiverDecisionInsert"}
	b.line("INSERT INTO %s.decisions (job_id, epoch, owner, payload, decision, held_epoch, prev_epoch)", ident(schema))
	b.line("VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s)", b.arg(d.JobID), b.arg(d.Epoch), b.arg(d.Owner),
		b.arg(string(d.Payload)), b.arg(string(decision)), b.arg(held), b.arg(prev))
	b.line("RETURNING seq, at")
	return b.build()
}

// ReceiverDecisionList reads the receiver's decisions for a job, in order.
func ReceiverDecisionList(schema string, jobID int64) Statement {
	b := &builder{name: "ReceiverDecisionList"}
	b.line("SELECT seq, job_id, epoch, owner, payload, decision, held_epoch, prev_epoch, at")
	b.line("  FROM %s.decisions", ident(schema))
	b.line(" WHERE job_id = %s", b.arg(jobID))
	b.line(" ORDER BY seq")
	return b.build()
}

// SchemaLock serializes the set-up and tear-down of the named schemas
// across sessions, until the transaction ends: setups of other schemas go
// on at the same time. The keys are taken in one order, so two setups that
// share a schema cannot deadlock.
func SchemaLock(schemas ...string) Statement {
	keys := make([]int64, 0, len(schemas))
	for _, s := range schemas {
		keys = append(keys, schemaLockKey(s))
	}
	slices.Sort(keys)
	return Statement{Name: "SchemaLock", SQL: "SELECT pg_advisory_xact_lock(k) FROM (SELECT k FROM unnest($1::bigint[]) AS k ORDER BY k) AS keys", Args: []any{keys}}
}

// SchemaDrop drops both schemas of a run.
func SchemaDrop(s Schemas) Statement {
	return Statement{Name: "SchemaDrop", SQL: fmt.Sprintf("DROP SCHEMA IF EXISTS %s, %s CASCADE", ident(s.Jobs), ident(s.Receiver))}
}

// SchemaDropOne drops one schema and everything in it.
func SchemaDropOne(name string) Statement {
	return Statement{Name: "SchemaDropOne", SQL: "DROP SCHEMA IF EXISTS " + ident(name) + " CASCADE"}
}

// JobIDRestart makes a jobs schema number its jobs from start, so job ids
// from different schemas never meet at a shared receiver.
func JobIDRestart(schema string, start int64) Statement {
	return Statement{Name: "JobIDRestart", SQL: fmt.Sprintf("ALTER TABLE %s.jobs ALTER COLUMN id RESTART WITH %d", ident(schema), start)}
}

// AdvisoryLock takes a session-level advisory lock and holds it for as
// long as the connection lives. Processes that share a database use it to
// say "I am alive and these schemas are mine".
func AdvisoryLock(key int64) Statement {
	return Statement{Name: "AdvisoryLock", SQL: "SELECT pg_advisory_lock($1)", Args: []any{key}}
}

// AdvisoryTryLock takes an advisory lock if nobody holds it: a lock that
// is free means the process that held it is gone.
func AdvisoryTryLock(key int64) Statement {
	return Statement{Name: "AdvisoryTryLock", SQL: "SELECT pg_try_advisory_lock($1)", Args: []any{key}}
}

// AdvisoryUnlock gives back a lock taken with AdvisoryTryLock.
func AdvisoryUnlock(key int64) Statement {
	return Statement{Name: "AdvisoryUnlock", SQL: "SELECT pg_advisory_unlock($1)", Args: []any{key}}
}

// SchemaList lists the schemas whose names start with prefix.
func SchemaList(prefix string) Statement {
	return Statement{
		Name: "SchemaList",
		SQL:  "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY nspname",
		Args: []any{prefix},
	}
}

// JobsFill empties a jobs table and inserts $1 pending jobs in one go, for
// benchmarks: three statements, run in order.
func JobsFill(schema string, n int) []Statement { return JobsFillFinished(schema, 0, n) }

// JobsFillFinished empties the jobs table, then inserts finished jobs
// (done, at epoch 1, as a long-lived queue's table holds them) and pending
// ones, and analyzes the table: the set-up of a benchmark.
func JobsFillFinished(schema string, finished, pending int) []Statement {
	t := ident(schema) + ".jobs"
	sts := []Statement{{Name: "JobsTruncate", SQL: "TRUNCATE " + t}}
	if finished > 0 {
		sts = append(sts, Statement{Name: "JobInsertFinished", SQL: "INSERT INTO " + t +
			" (payload, status, owner, epoch, attempts, result) SELECT jsonb_build_object('n', i), 'done', 'earlier', 1, 1, '{}' FROM generate_series(1, $1) i", Args: []any{finished}})
	}
	return append(sts,
		Statement{Name: "JobInsertSeries", SQL: "INSERT INTO " + t + " (payload) SELECT jsonb_build_object('n', i) FROM generate_series(1, $1) i", Args: []any{pending}},
		Statement{Name: "JobsAnalyze", SQL: "ANALYZE " + t},
	)
}

// ---- tallies: the load lab's live counts --------------------------------------
//
// Counted from what Postgres recorded, never from what workers say, while
// the workers run; the lab's invariant checker reads the same records job
// by job at the end, and the two must agree.

// JobsTally counts a queue's jobs by how they ended: done, failed, and
// all of them.
func JobsTally(schema string) Statement {
	return Statement{Name: "JobsTally", SQL: "SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'failed'), count(*) FROM " +
		ident(schema) + ".jobs"}
}

// HistoryLateWrites counts the completions and failure reports that landed
// on a job after another connection had claimed it: zombie writes that got
// into the row. (A lab queue's history names each write's connection.) A
// connection's late writes of one kind to one job count once: a zombie's
// renewal of a finished row, with the status check off, is recorded as a
// completion too.
func HistoryLateWrites(schema string) Statement {
	h := ident(schema) + ".job_history"
	return Statement{Name: "HistoryLateWrites", SQL: "SELECT count(DISTINCT (w.job_id, w.app, w.op)) FROM " + h + " w" +
		" WHERE w.op IN ('complete', 'fail', 'retry')" +
		" AND (SELECT c.app FROM " + h + " c WHERE c.job_id = w.job_id AND c.op = 'claim' AND c.seq < w.seq ORDER BY c.seq DESC LIMIT 1) <> w.app"}
}

// DecisionsOlderAccepted counts the deliveries a receiver took although it
// held a newer epoch for the job: zombie writes that got to the receiver,
// each sender's once per job.
func DecisionsOlderAccepted(schema string) Statement {
	return Statement{Name: "DecisionsOlderAccepted", SQL: "SELECT count(DISTINCT (job_id, owner)) FROM " + ident(schema) + ".decisions WHERE decision = 'accepted-older'"}
}

// HistorySpan reads how long a queue took over its jobs on the database
// clock: from the first claim to the moment the last job first ended (done
// or failed), whatever zombies wrote after.
func HistorySpan(schema string) Statement {
	h := ident(schema) + ".job_history"
	return Statement{Name: "HistorySpan", SQL: "SELECT (SELECT min(at) FROM " + h + " WHERE op = 'claim'), max(first_end) FROM" +
		" (SELECT min(at) AS first_end FROM " + h + " WHERE op IN ('complete', 'fail') GROUP BY job_id) e"}
}

// ---- the schema's version ------------------------------------------------------

func versionTableCreate(schema string) Statement {
	return Statement{Name: "VersionTableCreate", SQL: "CREATE TABLE IF NOT EXISTS " + ident(schema) +
		".schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"}
}

// versionTableExists reads the catalog as a table, with the statement's
// own snapshot: to_regclass would answer from this connection's catalog
// cache, which a setup that waited on the schema lock has not refreshed
// (an advisory lock takes in no invalidations), and so miss a table
// another session just made.
func versionTableExists(schema string) Statement {
	return Statement{Name: "VersionTableExists", SQL: "SELECT EXISTS (SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace" +
		" WHERE n.nspname = $1 AND c.relname = 'schema_migrations')", Args: []any{schema}}
}

func versionGet(schema string) Statement {
	return Statement{Name: "VersionGet", SQL: "SELECT coalesce(max(version), 0) FROM " + ident(schema) + ".schema_migrations"}
}

func versionAdd(schema string, version int, name string) Statement {
	return Statement{Name: "VersionAdd", SQL: "INSERT INTO " + ident(schema) + ".schema_migrations (version, name) VALUES ($1, $2)", Args: []any{version, name}}
}

func versionRemove(schema string, version int) Statement {
	return Statement{Name: "VersionRemove", SQL: "DELETE FROM " + ident(schema) + ".schema_migrations WHERE version = $1", Args: []any{version}}
}
