// Package engine is fencelab's job queue on PostgreSQL, kept small enough
// to read in one sitting: claim, lease renewal, complete and fail by
// compare-and-set, and the external receiver's rule — each guard of which
// can be broken on purpose to show what it protects. It is a library any
// Go program can import (see the package example for a worker's loop);
// the playground's scenarios, events and verdicts live in engine/lab.
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
// # State model
//
//	          claim (epoch+1)                 complete (CAS owner, epoch)
//	pending ───────────────────▶ running ─────────────────────────────▶ done
//	   ▲                          │  │ ▲
//	   │  fail, attempts left     │  │ │ renew (CAS owner, epoch):
//	   └──────────────────────────┘  │ │ lease_until = now() + lease
//	                                 │ └───┐
//	                                 │     │ lease_until < now():
//	      fail, no attempts left     │     │ claimable again, and the next
//	failed ◀─────────────────────────┘     │ claim bumps the epoch
//	                                       ▼
//	                        running (new owner, epoch+1)
//
// A running job whose lease has run out on the database clock is as
// claimable as a pending one. Claiming it does not tell the old owner: the
// old owner finds out when its next write — a renewal or its commit —
// matches no row.
//
// # Invariants
//
// A correct build keeps these. The queue records what it needs to check
// them — the job_history trigger writes every change of a job row with the
// database time and the writer's application_name (Queue.History), and the
// receiver logs every decision (Receiver.Decisions) — and lab.Check tests
// each one against those records:
//
//   - A claim with an older epoch can never write over a newer one: after a
//     job is claimed again, no renewal, commit or failure from an earlier
//     claim lands (InvStaleWrite).
//   - Every claim holds a newer epoch than the claim before it
//     (InvEpochUnique): never two owners at one epoch.
//   - No job is claimed while its lease is live on the database clock
//     (InvLeaseRespected).
//   - The receiver's epoch for a job never goes backwards
//     (InvReceiverMonotonic).
//   - A finished job holds its last owner's result, in the row and at the
//     receiver (InvRowLastOwner, InvReceiverLastOwner).
//
// # Clocks
//
// Leases are judged on one clock only: the database's now(). A worker's
// own clock can run fast or slow, and two workers' clocks disagree; if
// each judged leases by its own, a worker with a fast clock would take a
// lease that is still live. The claim and the renewal therefore compute
// lease_until = now() + lease inside Postgres, and the claim compares
// lease_until < now() there too. A frozen worker's heartbeat stops with
// it, so its lease runs out on the database clock while, to the worker, no
// time passes at all.
//
// # Fenced writes
//
// A renewal, a commit and a failure report are each one statement: it
// locks the job's row, updates it only if every kept guard holds, and
// returns the row as it judged it beside what it wrote. When nothing was
// written the caller gets a *FencedError whose Reasons (ReasonNotRunning,
// ReasonOwnerChanged, ReasonEpochChanged) and row fields describe that
// very moment — not a later read, which could show a later state.
//
// # Errors
//
// A few sentinels, tested with errors.Is: ErrNoJob (nothing claimable:
// poll again), ErrFenced (with *FencedError), ErrStale (with *StaleError),
// ErrJobNotFound, ErrInvalidInput (with *InputError, a sentence without a
// prefix) and ErrUnavailable. Postgres errors are translated in one place,
// by SQLSTATE: a data exception (a NUL or a lone surrogate in JSON, a
// number out of range) is the caller's bad input; a connection failure, a
// shutdown, too many connections or a lock timeout is ErrUnavailable. No
// message carries the connection string.
//
// # Guards
//
// Each guard is one clause of one statement (or of the three
// compare-and-sets, which share theirs), on by default, and broken by a
// Guards set. A broken guard's clause is replaced by an SQL comment that
// names it, so the statement a person reads is the one that ran:
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
// still running. The well-known queues each keep a different subset
// (lab.Styles), and none fences the external receiver.
//
// # Concurrency
//
// Queue and Receiver hold no connection of their own; they are safe for
// concurrent use whenever the DB they are given is (a pgxpool.Pool is).
// The claim's FOR UPDATE SKIP LOCKED lets many claimers run at once
// without waiting on each other, and the partial index jobs_claimable
// holds only pending and running rows, so a claim costs the same whether
// ten or ten million jobs have finished. The receiver's upsert serializes
// concurrent deliveries for one job on its row.
package engine
