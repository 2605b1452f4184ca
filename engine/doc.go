// Package engine is a job queue on PostgreSQL whose every write is fenced:
// claim, lease renewal, complete and fail by compare-and-set, and the
// external receiver's rule. It is small enough to read in one sitting, and
// every guard is always on: nothing in its API turns one off. Any Go
// program can import it: ExampleWorkerPool
// (engine/example_workerpool_test.go, and on pkg.go.dev) is the program to
// copy.
//
// # Overview
//
// A worker claims a job under a lease, stalls (a GC pause, a hung call, a
// closed laptop lid), and its lease runs out. A healthy worker reclaims the
// job. Then the first worker wakes up and carries on as if nothing had
// happened: it calls the external receiver and commits, over the new
// owner's work. That first worker is the zombie.
//
// The fix is a fencing token. Every claim bumps the job's epoch, a number
// that only goes up. Every write that depends on owning the job is a
// compare-and-set on owner and epoch, so the zombie's write matches no row
// and is dropped (ErrFenced). And the receiver, which is another system
// the database cannot protect, keeps the newest epoch it has seen per job
// and refuses older ones (ErrStale), while accepting the same epoch again
// so a worker can retry its own call. Workers call the receiver first,
// then commit.
//
// # The rules
//
// The engine keeps four rules; the docs cite them by number.
//
//  1. A claim is ONE statement: UPDATE jobs SET ... WHERE id = (SELECT id
//     FROM jobs WHERE <pending, or running with an expired lease> ... FOR
//     UPDATE SKIP LOCKED LIMIT 1) RETURNING ... (Queue.Claim; ClaimBatch
//     picks up to n the same way). No read-then-write that two claimers
//     could interleave.
//  2. Leases are judged on the database clock, now() in Postgres, never
//     the worker's. Every claim increments epoch, the fencing token.
//  3. Complete and fail succeed only through a compare-and-set on owner
//     AND epoch. When no row matches they return an error
//     (errors.Is(err, ErrFenced)) and the result is dropped.
//  4. The external receiver gets every call's job id and epoch. It keeps
//     the newest epoch per job, refuses anything older, and accepts the
//     same epoch again, so a worker can retry its own call (Receiver).
//     Workers call the receiver first, then commit.
//
// # The jobs table
//
// SetupQueue creates, in the queue's own schema, the table jobs:
//
//	id            bigint, generated      the job's id
//	payload       jsonb                  what the job is about, from Insert
//	status        text                   pending, running, done or failed
//	owner         text                   who holds (or last held) it
//	epoch         bigint ≥ 0             the fencing token: +1 at every claim
//	lease_until   timestamptz            a running job's lease end, on the database clock
//	attempts      integer                claims so far
//	max_attempts  integer, 1 to 100      claims it may have (default 3)
//	run_at        timestamptz            a pending job is not claimed before it
//	result        jsonb                  a done job's result
//	error         text                   the last failure's reason
//	created_at, updated_at timestamptz
//
// with the partial indexes jobs_pending (run_at, id) over pending rows
// and jobs_leased (lease_until) over running rows, the
// table outbox (id, job_id, epoch, owner, payload, created_at, sent_at),
// and schema_migrations, the versions applied (MigrateQueue). The
// receiver's schema (SetupReceiver) holds deliveries, the newest epoch per
// job, and decisions, its log.
//
// # State model
//
//	          claim (epoch+1, attempts+1)        complete (CAS owner, epoch)
//	pending ─────────────────────────▶ running ─────────────────────────────▶ done
//	   ▲                                │  │ ▲
//	   │ fail, attempts left:           │  │ │ renew (CAS owner, epoch):
//	   │ run_at = now() + backoff       │  │ │ lease_until = now() + lease
//	   └────────────────────────────────┘  │ └───┐
//	                                       │     │ lease_until < now(), attempts left:
//	      fail, no attempts left;          │     │ claimable again, and the next
//	      or the lease ran out on          │     │ claim bumps the epoch
//	failed ◀ the last attempt (epoch+1) ───┘     ▼
//	                                  running (new owner, epoch+1)
//
// A running job whose lease has run out on the database clock is as
// claimable as a pending one, while it has attempts left. Claiming it does
// not tell the old owner: the old owner finds out when its next write — a
// renewal or its commit — matches no row. A job whose lease ran out on its
// last attempt (a job that crashes every worker that takes it) is not
// claimed again: the next claim ends it as failed, with the reason, and
// bumps its epoch, because it takes the job from its holder just as a
// claim would. A failed attempt's retry waits for QueueConfig's
// RetryDelayFunc (exponential backoff with jitter by default).
//
// # Invariants
//
// A correct build keeps these:
//
//   - A claim with an older epoch can never write over a newer one: after a
//     job is claimed again, no renewal, commit or failure from an earlier
//     claim lands.
//   - Every claim holds a newer epoch than the claim before it: never two
//     owners at one epoch.
//   - No job is claimed while its lease is live on the database clock.
//   - The receiver's epoch for a job never goes backwards.
//   - A finished job holds its last owner's result, in the row and at the
//     receiver.
//
// fencelab's own tests record every change of a job row with the database time and
// the writer (a history trigger) and the receiver's every decision, and
// tests each invariant against those records, never against what workers
// believe.
//
// # Clocks
//
// Leases are judged on one clock only: the database's now() (rule 2). A
// worker's own clock can run fast or slow, and two workers' clocks
// disagree; if each judged leases by its own, a worker with a fast clock
// would take a lease that is still live. The claim and the renewal
// therefore compute lease_until = now() + lease inside Postgres, and the
// claim compares lease_until < now() there too. A frozen worker's
// heartbeat stops with it, so its lease runs out on the database clock
// while, to the worker, no time passes at all.
//
// # Fenced writes
//
// A renewal, a commit and a failure report are each one statement: it
// locks the job's row, updates it only if every kept guard holds, and
// returns the row as it judged it beside what it wrote. When nothing was
// written and another claim took the job, the caller gets a *FencedError
// whose Reasons (ReasonNotRunning, ReasonOwnerChanged, ReasonEpochChanged)
// and row fields describe that very moment — not a later read, which could
// show a later state. When nothing was written because the holder itself
// had finished the job already (its earlier commit landed, its answer
// lost), the row still holds the caller's owner and epoch, and the error
// is ErrFinished instead: no fence.
//
// A fenced commit protects the queue's row. To fence the application's own
// writes too, make them in the same transaction as the compare-and-set: a
// WorkerPool's HandlerTx returns them as a TxFunc, and the pool runs it
// after the job's row is locked and judged, committing it with the
// completion or not at all (Queue.Outbox is such a TxFunc, for deliveries
// a relay sends only after the commit). On the one-job path, a Queue made
// over a pgx.Tx runs its statements in that transaction: Complete there,
// and commit only if it returned nil. See WorkerPool for what a handler
// may see twice.
//
// # Errors
//
// A few sentinels, tested with errors.Is: ErrNoJob (nothing claimable:
// poll again), ErrFenced (with *FencedError), ErrFinished (with
// *FinishedError), ErrStale (with *StaleError), ErrJobNotFound,
// ErrInvalidInput (with *InputError, a sentence without a prefix),
// ErrUnavailable, and ErrLeaseLost (a handler context's cause). Postgres
// errors are translated in one place, by SQLSTATE: a data exception (a
// NUL or a lone surrogate in JSON, a number out of range) is the caller's
// bad input; a connection failure, a shutdown, too many connections or a
// lock timeout is ErrUnavailable. No message carries the connection
// string.
//
// # Guards
//
// Each guard is one clause of one statement (or of the three
// compare-and-sets, which share theirs), always on:
//
//   - status-check: AND status = 'running' on renew, complete and fail.
//   - owner-check: AND owner = $n on renew, complete and fail.
//   - epoch-check: AND epoch = $n on renew, complete and fail.
//   - epoch-increment: epoch = epoch + 1 in the claim.
//   - receiver-check: WHERE held.epoch <= EXCLUDED.epoch in the
//     receiver's upsert.
//   - db-clock: now() rather than the worker's clock in the claim and the
//     renewal.
//   - skip-locked: SKIP LOCKED in the claim's FOR UPDATE. Without it,
//     claimers wait on each other's row locks; it is a liveness guard, not
//     a safety one.
//
// The guards overlap on purpose. With distinct worker names the owner
// check alone hides a missing epoch check; with the same name (a restarted
// pod with the same hostname) it does not. The status check stops a late
// commit on a job that is already done, but not on one the new owner is
// still running. The well-known queues each keep a different subset, and
// none fences the external receiver.
//
// # Concurrency
//
// Queue and Receiver hold no connection of their own; they are safe for
// concurrent use whenever the DB they are given is (a pgxpool.Pool is).
// The claim's FOR UPDATE SKIP LOCKED lets many claimers run at once
// without waiting on each other. A claim reads the pending jobs by the
// partial index jobs_pending and the running ones whose lease ran out by
// jobs_leased, so it never walks past finished jobs nor past the running
// ones other claimers hold: it costs the same whether ten or ten million
// jobs have finished. Each of those two parts locks at most as many rows
// as the claim takes, so a claim inside a transaction of the caller's
// (Queue on a pgx.Tx) may hold up to twice as many row locks as it took
// jobs, until that transaction ends, while leases have run out. The receiver's upsert serializes
// concurrent deliveries for one job on its row.
package engine
