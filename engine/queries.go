package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencelab/fencelab/engine/internal/hook"
	"github.com/jackc/pgx/v5/pgtype"
)

// This file holds every SQL statement the engine runs, and nothing else
// does. Names are Noun+Verb. Each guard is one clause: when a guard is off
// its clause is left out of the statement and a comment stands in its place,
// so the SQL a person reads on the timeline is exactly the SQL that ran.

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
func (b *builder) guarded(gs hook.Guards, g hook.Guard, clause string) {
	if gs.On(g) {
		b.lines = append(b.lines, clause)
		return
	}
	body := strings.TrimLeft(clause, " ")
	indent := clause[:len(clause)-len(body)]
	b.lines = append(b.lines, indent+"-- "+body+"  ("+g.String()+" off)")
}

// offNote is the trailing comment on a line that a broken guard changed.
func offNote(gs hook.Guards, g hook.Guard, what string) string {
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

func (b *builder) build() hook.Statement {
	return hook.Statement{Name: b.name, SQL: strings.Join(b.lines, "\n"), Args: b.args}
}

func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

// clockExpr returns the expression a lease is judged by: the database's
// now(), or with db-clock off the worker's own clock passed as an argument.
func clockExpr(b *builder, gs hook.Guards, workerNow time.Time) string {
	if gs.On(hook.DBClock) {
		return "now()"
	}
	return b.arg(workerNow) + "::timestamptz"
}

// jobClaim takes one claimable job in a single statement (rule 1): a
// pending job whose run_at has come, or a running one whose lease has run
// out with attempts left. It sets the owner, bumps the epoch and starts a
// fresh lease. The same statement first ends every running job whose lease
// ran out on its last attempt (spent): such a job is never claimed again.
func jobClaim(schema string, gs hook.Guards, owner string, lease time.Duration, workerNow time.Time) hook.Statement {
	return claimStatement("JobClaim", schema, gs, owner, 1, lease, workerNow)
}

// claimStatement builds the one-job and the batch claim: they differ only
// in how many rows the inner SELECT may pick.
func claimStatement(name, schema string, gs hook.Guards, owner string, n int, lease time.Duration, workerNow time.Time) hook.Statement {
	b := &builder{name: name}
	t := ident(schema) + ".jobs"
	ownerArg, leaseArg := b.arg(owner), b.arg(interval(lease))
	clock := clockExpr(b, gs, workerNow)
	clockNote := offNote(gs, hook.DBClock, "the worker's own clock, not now()")
	spent(b, t, clock, clockNote)
	b.line("UPDATE %s", t)
	b.line("   SET status = 'running',")
	b.line("       owner = %s,", ownerArg)
	b.guarded(gs, hook.EpochIncrement, "       epoch = epoch + 1,")
	b.line("       attempts = attempts + 1,")
	b.line("       lease_until = %s + %s::interval,%s", clock, leaseArg, clockNote)
	b.line("       updated_at = now()")
	// One job is picked as the article writes it, id = (SELECT ...); a
	// batch into an array. The claimable jobs come from two places, each
	// read by its own partial index so that a claim never walks past the
	// jobs other claimers hold: the pending ones (jobs_pending, in run_at
	// order) and the running ones whose lease ran out (jobs_leased, by lease
	// end). Each part locks at most as many as the claim takes, and the
	// claim takes the first of both in run_at order; a row locked and not
	// taken is let go when the statement's transaction ends.
	limit, open, shut := "LIMIT 1", "(", ")"
	if n != 1 {
		limit, open, shut = "LIMIT "+b.arg(n), "ANY (ARRAY(", "))"
	}
	lock := "FOR UPDATE SKIP LOCKED"
	if !gs.On(hook.SkipLocked) {
		lock = "FOR UPDATE  -- SKIP LOCKED  (" + hook.SkipLocked.String() + " off)"
	}
	// part is one of the two: its rows in run_at order, as many as the
	// claim takes, locked. Its closing parenthesis has a line of its own,
	// so the comment standing for SKIP LOCKED never hides it.
	part := func(alias string, where ...string) {
		b.line("         SELECT * FROM (")
		b.line("           SELECT id, run_at FROM %s", t)
		keyword := "WHERE"
		for _, w := range where {
			b.line("            %s %s", keyword, w)
			keyword = "  AND"
		}
		b.line("            ORDER BY run_at, id %s", limit)
		b.line("              %s", lock)
		b.line("         ) AS %s", alias)
	}
	b.line(" WHERE id = %s", open)
	b.line("       SELECT id FROM (")
	part("pending", "status = 'pending' AND run_at <= "+clock+clockNote)
	b.line("         UNION ALL")
	part("lease_ran_out", "status = 'running' AND lease_until < "+clock+" AND attempts < max_attempts"+clockNote,
		"run_at <= "+clock)
	b.line("       ) AS claimable")
	b.line("        ORDER BY run_at, id %s%s", limit, shut)
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

// jobCountClaimable counts the jobs a claim would see as claimable, by the
// same clock, without locking them: when a claim finds none while this
// finds some, the claim skipped rows another session had locked for a
// moment (a heartbeat's update).
func jobCountClaimable(schema string, gs hook.Guards, workerNow time.Time) hook.Statement {
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

// jobClaimBatch takes up to n claimable jobs in one statement, each with
// its epoch bumped and a fresh lease on the database clock, skipping rows
// another claimer holds, after ending the spent jobs as jobClaim does. The
// jobs are picked into an array and updated by their primary key, so the
// plan does not hang on the table's statistics.
func jobClaimBatch(schema string, gs hook.Guards, owner string, n int, lease time.Duration, workerNow time.Time) hook.Statement {
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
func casBatch(b *builder, schema string, gs hook.Guards, ids []int64, owners []string, epochs []int64, extra [][2]string, extraArgs []any, set []string, returning string) {
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
	b.guarded(gs, hook.StatusCheck, "     AND seen.row_status = 'running'")
	b.guarded(gs, hook.OwnerCheck, "     AND seen.row_owner = seen.held_owner")
	b.guarded(gs, hook.EpochCheck, "     AND seen.row_epoch = seen.held_epoch")
	if set != nil {
		b.line("  RETURNING j.id, %s", returning)
	}
	b.line(")")
	b.line("SELECT input.id, seen.row_status, seen.row_owner, seen.row_epoch, done.returned, now()")
	b.line("  FROM input LEFT JOIN seen ON seen.id = input.id LEFT JOIN done ON done.id = input.id")
	b.line(" ORDER BY input.ord")
}

// jobCompleteBatch records many jobs' results, each only if its caller
// still owns it at the epoch it holds.
func jobCompleteBatch(schema string, gs hook.Guards, ids []int64, owners []string, epochs []int64, results []string) hook.Statement {
	b := &builder{name: "JobCompleteBatch"}
	casBatch(b, schema, gs, ids, owners, epochs, [][2]string{{"result", "text[]"}}, []any{results}, []string{
		"status = 'done',",
		"result = seen.result::jsonb,",
		"lease_until = NULL,",
		"updated_at = now()",
	}, "j.epoch AS returned")
	return b.build()
}

// jobFailBatch records many failures, each only if its caller still owns
// the job: back to pending while it has attempts left, to run again after
// its own delay, and failed after.
func jobFailBatch(schema string, gs hook.Guards, ids []int64, owners []string, epochs []int64, reasons []string, delays []time.Duration) hook.Statement {
	b := &builder{name: "JobFailBatch"}
	waits := make([]pgtype.Interval, len(delays))
	for i, d := range delays {
		waits[i] = interval(d)
	}
	casBatch(b, schema, gs, ids, owners, epochs, [][2]string{{"reason", "text[]"}, {"delay", "interval[]"}}, []any{reasons, waits}, []string{
		"status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END,",
		"error = seen.reason,",
		"run_at = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at ELSE now() + seen.delay END,",
		"lease_until = NULL,",
		"updated_at = now()",
	}, "j.status AS returned")
	return b.build()
}

// jobLockBatch locks many jobs' rows and judges each as a compare-and-set
// would, writing nothing: returned is 1 for each job its caller still
// holds. The transaction that ran it then writes for those jobs, knowing
// no other claim can take them before it ends.
func jobLockBatch(schema string, gs hook.Guards, ids []int64, owners []string, epochs []int64) hook.Statement {
	b := &builder{name: "JobLockBatch"}
	casBatch(b, schema, gs, ids, owners, epochs, nil, nil, nil, "1 AS returned")
	return b.build()
}

// leaseRenewBatch extends many leases, each by compare-and-set like a
// commit: a zombie's heartbeat fails exactly as its commit would.
func leaseRenewBatch(schema string, gs hook.Guards, ids []int64, owners []string, epochs []int64, lease time.Duration, workerNow time.Time) hook.Statement {
	b := &builder{name: "LeaseRenewBatch"}
	clock := clockExpr(b, gs, workerNow)
	leaseArg := b.arg(interval(lease))
	casBatch(b, schema, gs, ids, owners, epochs, nil, nil, []string{
		fmt.Sprintf("lease_until = %s + %s::interval,%s", clock, leaseArg, offNote(gs, hook.DBClock, "the worker's own clock, not now()")),
		"updated_at = now()",
	}, "j.lease_until AS returned")
	return b.build()
}

// casWhere adds the compare-and-set clauses shared by renew, complete and
// fail: the job id, then one clause per ownership guard.
func casWhere(b *builder, gs hook.Guards, idArg, owner string, epoch int64) {
	b.line("  WHERE id = %s", idArg)
	b.guarded(gs, hook.StatusCheck, "    AND status = 'running'")
	// Placeholders are only numbered for clauses that are sent, so a
	// broken guard's comment names the value it no longer compares.
	if gs.On(hook.OwnerCheck) {
		b.line("    AND owner = %s", b.arg(owner))
	} else {
		b.guarded(gs, hook.OwnerCheck, "    AND owner = <the owner held>")
	}
	if gs.On(hook.EpochCheck) {
		b.line("    AND epoch = %s", b.arg(epoch))
	} else {
		b.guarded(gs, hook.EpochCheck, "    AND epoch = <the epoch held>")
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
func casStatement(b *builder, schema string, gs hook.Guards, jobID int64, owner string, epoch int64, set []string, returning string) {
	casStatementThen(b, schema, gs, jobID, owner, epoch, set, returning, nil)
}

// casStatementThen is casStatement with more CTEs after the UPDATE's, which
// may read what it wrote (FROM done): they happen only if it did.
func casStatementThen(b *builder, schema string, gs hook.Guards, jobID int64, owner string, epoch int64, set []string, returning string, then func(b *builder)) {
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

// leaseRenew extends a lease by compare-and-set, like a commit: a zombie's
// heartbeat fails exactly as its commit would.
func leaseRenew(schema string, gs hook.Guards, jobID int64, owner string, epoch int64, lease time.Duration, workerNow time.Time) hook.Statement {
	b := &builder{name: "LeaseRenew"}
	clock := clockExpr(b, gs, workerNow)
	casStatement(b, schema, gs, jobID, owner, epoch, []string{
		fmt.Sprintf("lease_until = %s + %s::interval,%s", clock, b.arg(interval(lease)), offNote(gs, hook.DBClock, "the worker's own clock, not now()")),
		"updated_at = now()",
	}, "lease_until AS new_lease_until")
	return b.build()
}

// jobComplete records a job's result, only if the caller still owns it at
// the epoch it holds.
func jobComplete(schema string, gs hook.Guards, jobID int64, owner string, epoch int64, result []byte) hook.Statement {
	b := &builder{name: "JobComplete"}
	casStatement(b, schema, gs, jobID, owner, epoch, []string{
		"status = 'done',",
		fmt.Sprintf("result = %s::jsonb,", b.arg(string(result))),
		"lease_until = NULL,",
		"updated_at = now()",
	}, "epoch AS new_epoch")
	return b.build()
}

// jobCompleteOutbox is jobComplete that also writes a delivery to the
// outbox, in the same statement: the delivery exists if and only if the
// commit landed, and a relay sends it after the commit.
func jobCompleteOutbox(schema string, gs hook.Guards, jobID int64, owner string, epoch int64, result []byte, d Delivery) hook.Statement {
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

// outboxInsert writes one delivery to the outbox, in the transaction of
// the completion that earns it.
func outboxInsert(schema string, d Delivery) hook.Statement {
	b := &builder{name: "OutboxInsert"}
	b.line("INSERT INTO %s.outbox (job_id, epoch, owner, payload)", ident(schema))
	b.line("VALUES (%s, %s, %s, %s::jsonb)", b.arg(d.JobID), b.arg(d.Epoch), b.arg(d.Owner), b.arg(string(d.Payload)))
	return b.build()
}

// outboxPending reads up to limit outbox deliveries not sent yet, oldest first.
func outboxPending(schema string, limit int) hook.Statement {
	b := &builder{name: "OutboxPending"}
	b.line("SELECT id, job_id, epoch, owner, payload, created_at")
	b.line("  FROM %s.outbox", ident(schema))
	b.line(" WHERE sent_at IS NULL")
	b.line(" ORDER BY id")
	b.line(" LIMIT %s", b.arg(limit))
	return b.build()
}

// outboxSent marks an outbox delivery sent.
func outboxSent(schema string, id int64) hook.Statement {
	b := &builder{name: "OutboxSent"}
	b.line("UPDATE %s.outbox SET sent_at = now()", ident(schema))
	b.line(" WHERE id = %s AND sent_at IS NULL", b.arg(id))
	return b.build()
}

// jobFail records a failure, only if the caller still owns the job. The job
// goes back to pending for a retry after delay, or to failed once its
// attempts are used up.
func jobFail(schema string, gs hook.Guards, jobID int64, owner string, epoch int64, reason string, delay time.Duration) hook.Statement {
	b := &builder{name: "JobFail"}
	casStatement(b, schema, gs, jobID, owner, epoch, []string{
		"status = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END,",
		fmt.Sprintf("error = %s,", b.arg(reason)),
		fmt.Sprintf("run_at = CASE WHEN attempts >= max_attempts THEN run_at ELSE now() + %s::interval END,", b.arg(interval(delay))),
		"lease_until = NULL,",
		"updated_at = now()",
	}, "status AS new_status")
	return b.build()
}

// jobInsert adds a pending job, to run at runAt (NULL: now).
func jobInsert(schema string, payload []byte, maxAttempts int, runAt pgtype.Timestamptz) hook.Statement {
	b := &builder{name: "JobInsert"}
	b.line("INSERT INTO %s.jobs (payload, max_attempts, run_at)", ident(schema))
	b.line("VALUES (%s::jsonb, %s, coalesce(%s::timestamptz, now()))", b.arg(string(payload)), b.arg(maxAttempts), b.arg(runAt))
	b.line("RETURNING id, now()")
	return b.build()
}

// jobInsertMany adds many pending jobs in one statement, from arrays of
// equal length (a NULL run_at: now), and returns their ids in input order.
func jobInsertMany(schema string, payloads []string, maxAttempts []int32, runAt []pgtype.Timestamptz) hook.Statement {
	b := &builder{name: "JobInsertMany"}
	b.line("INSERT INTO %s.jobs (payload, max_attempts, run_at)", ident(schema))
	b.line("SELECT p::jsonb, m, coalesce(r, now())")
	b.line("  FROM unnest(%s::text[], %s::int[], %s::timestamptz[]) WITH ORDINALITY AS i(p, m, r, ord)", b.arg(payloads), b.arg(maxAttempts), b.arg(runAt))
	b.line(" ORDER BY ord")
	b.line("RETURNING id")
	return b.build()
}

// jobGet reads one job as it is now, with the database time.
func jobGet(schema string, jobID int64) hook.Statement {
	b := &builder{name: "JobGet"}
	b.line("SELECT id, payload, status, owner, epoch, lease_until, attempts, max_attempts,")
	b.line("       run_at, result, error, created_at, updated_at, now()")
	b.line("  FROM %s.jobs", ident(schema))
	b.line(" WHERE id = %s", b.arg(jobID))
	return b.build()
}

// jobPlace is a job's status and, pending, its place: the pending jobs
// before it in the claim's order (run_at, id), and itself. It reads the
// partial index jobs_pending.
func jobPlace(schema string, jobID int64) hook.Statement {
	b := &builder{name: "JobPlace"}
	t := ident(schema) + ".jobs"
	id := b.arg(jobID)
	b.line("SELECT j.status, CASE WHEN j.status = 'pending' THEN")
	b.line("       (SELECT count(*) FROM %s a WHERE a.status = 'pending' AND (a.run_at, a.id) <= (j.run_at, j.id))", t)
	b.line("       ELSE 0 END")
	b.line("  FROM %s j", t)
	b.line(" WHERE j.id = %s", id)
	return b.build()
}

// jobList reads every job, oldest first, up to limit rows.
func jobList(schema string, limit int) hook.Statement {
	b := &builder{name: "JobList"}
	b.line("SELECT id, payload, status, owner, epoch, lease_until, attempts, max_attempts,")
	b.line("       run_at, result, error, created_at, updated_at, now()")
	b.line("  FROM %s.jobs", ident(schema))
	b.line(" ORDER BY id")
	b.line(" LIMIT %s", b.arg(limit))
	return b.build()
}

// jobListExpired lists running jobs whose lease has run out on the
// database clock.
func jobListExpired(schema string) hook.Statement {
	b := &builder{name: "JobListExpired"}
	b.line("SELECT id, owner, epoch, lease_until, now()")
	b.line("  FROM %s.jobs", ident(schema))
	b.line(" WHERE status = 'running' AND lease_until < now()")
	b.line(" ORDER BY id")
	return b.build()
}

// receiverDeliver is the receiver's rule as one atomic conditional upsert:
// a newer epoch replaces what is held (and says which epoch it superseded),
// the same epoch is accepted again, an older one matches no row.
func receiverDeliver(schema string, gs hook.Guards, d Delivery) hook.Statement {
	b := &builder{name: "ReceiverDeliver"}
	t := ident(schema) + ".deliveries"
	b.line("INSERT INTO %s AS held (job_id, epoch, owner, payload)", t)
	b.line("VALUES (%s, %s, %s, %s::jsonb)", b.arg(d.JobID), b.arg(d.Epoch), b.arg(d.Owner), b.arg(string(d.Payload)))
	b.line("ON CONFLICT (job_id) DO UPDATE")
	b.line("   SET epoch = EXCLUDED.epoch, owner = EXCLUDED.owner, payload = EXCLUDED.payload,")
	b.line("       prev_epoch = held.epoch, prev_owner = held.owner,")
	b.line("       accepted = held.accepted + 1, updated_at = now()")
	b.guarded(gs, hook.ReceiverCheck, " WHERE held.epoch <= EXCLUDED.epoch")
	b.line("RETURNING epoch, prev_epoch, prev_owner, accepted, now()")
	return b.build()
}

// receiverDeliverKeyed is the rule of a receiver that knows no epochs — a
// third party — and deduplicates on a stable key, the job's id: the first
// delivery for a key is applied, any later one matches no row and changes
// nothing.
func receiverDeliverKeyed(schema string, d Delivery) hook.Statement {
	b := &builder{name: "ReceiverDeliverKeyed"}
	b.line("INSERT INTO %s.deliveries AS held (job_id, epoch, owner, payload)", ident(schema))
	b.line("VALUES (%s, %s, %s, %s::jsonb)", b.arg(d.JobID), b.arg(d.Epoch), b.arg(d.Owner), b.arg(string(d.Payload)))
	b.line("ON CONFLICT (job_id) DO NOTHING")
	b.line("RETURNING epoch, now()")
	return b.build()
}

// receiverGet reads what the receiver holds for a job.
func receiverGet(schema string, jobID int64) hook.Statement {
	b := &builder{name: "ReceiverGet"}
	b.line("SELECT job_id, epoch, owner, payload, accepted, updated_at, now()")
	b.line("  FROM %s.deliveries", ident(schema))
	b.line(" WHERE job_id = %s", b.arg(jobID))
	return b.build()
}

// receiverDecisionInsert logs one decision of the receiver.
func receiverDecisionInsert(schema string, d Delivery, decision Decision, held, prev *int64) hook.Statement {
	b := &builder{name: "ReceiverDecisionInsert"}
	b.line("INSERT INTO %s.decisions (job_id, epoch, owner, payload, decision, held_epoch, prev_epoch)", ident(schema))
	b.line("VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s)", b.arg(d.JobID), b.arg(d.Epoch), b.arg(d.Owner),
		b.arg(string(d.Payload)), b.arg(string(decision)), b.arg(held), b.arg(prev))
	b.line("RETURNING seq, at")
	return b.build()
}

// receiverDecisionList reads the receiver's decisions for a job, in order.
func receiverDecisionList(schema string, jobID int64) hook.Statement {
	b := &builder{name: "ReceiverDecisionList"}
	b.line("SELECT seq, job_id, epoch, owner, payload, decision, held_epoch, prev_epoch, at")
	b.line("  FROM %s.decisions", ident(schema))
	b.line(" WHERE job_id = %s", b.arg(jobID))
	b.line(" ORDER BY seq")
	return b.build()
}

// schemaLock serializes the set-up and tear-down of the named schemas
// across sessions, until the transaction ends: setups of other schemas go
// on at the same time. The keys are taken in one order, so two setups that
// share a schema cannot deadlock.
func schemaLock(schemas ...string) hook.Statement {
	keys := make([]int64, 0, len(schemas))
	for _, s := range schemas {
		keys = append(keys, schemaLockKey(s))
	}
	slices.Sort(keys)
	return hook.Statement{Name: "SchemaLock", SQL: "SELECT pg_advisory_xact_lock(k) FROM (SELECT k FROM unnest($1::bigint[]) AS k ORDER BY k) AS keys", Args: []any{keys}}
}

// schemaDropOne drops one schema and everything in it.
func schemaDropOne(name string) hook.Statement {
	return hook.Statement{Name: "SchemaDropOne", SQL: "DROP SCHEMA IF EXISTS " + ident(name) + " CASCADE"}
}

// ---- the schema's version ------------------------------------------------------

func versionTableCreate(schema string) hook.Statement {
	return hook.Statement{Name: "VersionTableCreate", SQL: "CREATE TABLE IF NOT EXISTS " + ident(schema) +
		".schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"}
}

// versionTableExists reads the catalog as a table, with the statement's
// own snapshot: to_regclass would answer from this connection's catalog
// cache, which a setup that waited on the schema lock has not refreshed
// (an advisory lock takes in no invalidations), and so miss a table
// another session just made.
func versionTableExists(schema string) hook.Statement {
	return hook.Statement{Name: "VersionTableExists", SQL: "SELECT EXISTS (SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace" +
		" WHERE n.nspname = $1 AND c.relname = 'schema_migrations')", Args: []any{schema}}
}

func versionGet(schema string) hook.Statement {
	return hook.Statement{Name: "VersionGet", SQL: "SELECT coalesce(max(version), 0) FROM " + ident(schema) + ".schema_migrations"}
}

func versionAdd(schema string, version int, name string) hook.Statement {
	return hook.Statement{Name: "VersionAdd", SQL: "INSERT INTO " + ident(schema) + ".schema_migrations (version, name) VALUES ($1, $2)", Args: []any{version, name}}
}

func versionRemove(schema string, version int) hook.Statement {
	return hook.Statement{Name: "VersionRemove", SQL: "DELETE FROM " + ident(schema) + ".schema_migrations WHERE version = $1", Args: []any{version}}
}
