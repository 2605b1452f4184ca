"""The loop every reference worker runs: claim one job, call the receiver,
commit, exit, as WORKERS.md (at the top of the repository) says. Each
worker is this loop with its own statements: correct.py passes them as
they are here; the broken ones change one thing, on purpose.

The statements are the article's:
  1. the claim is ONE statement, FOR UPDATE SKIP LOCKED, that bumps the
     epoch (the fencing token) and starts a lease on the database clock,
     now(); it also takes a running job whose lease ran out;
  2. leases are judged on the database clock, so FENCELAB_CLOCK_SKEW_MS
     (how far this machine's clock runs ahead) changes nothing;
  3. complete and fail are compare-and-sets on status, owner AND epoch: a
     zombie whose job was taken over matches no row, and its result (or
     its failure) is dropped; fail sends a job with attempts left back for
     a retry and ends one on its last attempt.

Needs psycopg 3 (Debian: python3-psycopg) and the standard library.
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

import psycopg

CLAIM = """
UPDATE jobs
   SET status = 'running',
       owner = %(owner)s,
       epoch = epoch + 1,
       attempts = attempts + 1,
       lease_until = now() + %(lease_ms)s * interval '1 millisecond',
       updated_at = now()
 WHERE id = (
       SELECT id FROM jobs
        WHERE status = 'pending'
           OR (status = 'running' AND lease_until < now())
        ORDER BY id
        LIMIT 1
          FOR UPDATE SKIP LOCKED)
RETURNING id, epoch
"""

COMPLETE = """
UPDATE jobs
   SET status = 'done', result = %(result)s, lease_until = NULL, updated_at = now()
 WHERE id = %(id)s
   AND status = 'running'
   AND owner = %(owner)s
   AND epoch = %(epoch)s
"""

FAIL = """
UPDATE jobs
   SET status = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END,
       error = %(error)s, lease_until = NULL, updated_at = now()
 WHERE id = %(id)s
   AND status = 'running'
   AND owner = %(owner)s
   AND epoch = %(epoch)s
"""

# The receiver's answer that says the handler failed (WORKERS.md): fail the
# job instead of completing it.
HANDLER_FAILED = 500


def without(statement, part, instead="\n"):
    """The statement with part replaced by instead: a broken worker's one
    change. It raises if part is not in the statement, so that a change
    that no longer applies is never a correct worker in disguise."""
    if part not in statement:
        raise ValueError(f"{part!r} is not in the statement")
    return statement.replace(part, instead)


def log(*words):
    print(*words, file=sys.stderr, flush=True)


def deliver(url, body):
    """POST the delivery; return (HTTP status, the receiver's answer)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        # The check holds the receiver's answer for seconds on purpose.
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:
        # 409: refused as stale, a receipt all the same; 500: the handler failed.
        if e.code not in (409, HANDLER_FAILED):
            raise
        return e.code, json.load(e)


class Fenced(Exception):
    """The compare-and-set matched no row: this worker's lease was taken over."""


def main(claim=CLAIM, complete=COMPLETE, fail=FAIL, raise_when_fenced=False):
    """Run one job to its end. The claim may read this machine's clock (as
    skewed by FENCELAB_CLOCK_SKEW_MS) as %(now)s; a correct one does not.
    raise_when_fenced commits in a transaction and raises when the
    compare-and-set matched no row, as the article says: "When no row
    matches, raise and drop the result"."""
    worker = os.environ["FENCELAB_WORKER"]
    owner = os.environ["FENCELAB_OWNER"]
    lease_ms = int(os.environ["FENCELAB_LEASE_MS"])
    skew = timedelta(milliseconds=int(os.environ.get("FENCELAB_CLOCK_SKEW_MS", "0")))
    # autocommit: each statement is its own transaction, as the article's are.
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        while True:
            now = datetime.now(timezone.utc) + skew  # this machine's clock, as skewed
            row = conn.execute(claim, {"owner": owner, "lease_ms": lease_ms, "now": now}).fetchone()
            if row:
                break
            time.sleep(0.05)
        job_id, epoch = row
        log(f"claimed job {job_id} at epoch {epoch} as {owner}")

        output = f"job {job_id} done by worker {worker}"
        status, answer = deliver(os.environ["FENCELAB_RECEIVER_URL"], {
            "job_id": job_id, "epoch": epoch, "owner": owner,
            "payload": {"worker": worker, "output": output},
        })
        log(f"receiver: HTTP {status}, {answer.get('decision') or answer.get('error')}")

        if status == HANDLER_FAILED:
            what, statement = "failure", fail
            args = {"error": answer.get("error") or "the handler failed", "id": job_id, "owner": owner, "epoch": epoch}
        else:
            what, statement = "result", complete
            result = json.dumps({"worker": worker, "owner": owner, "pid": os.getpid(),
                                 "job_id": job_id, "epoch": epoch, "output": output})
            args = {"result": result, "id": job_id, "owner": owner, "epoch": epoch}
        if raise_when_fenced:
            with conn.transaction():
                cur = conn.execute(statement, args)
                if cur.rowcount != 1:
                    raise Fenced(f"the {what} at epoch {epoch} matched no row: another worker holds job {job_id}")
        else:
            cur = conn.execute(statement, args)
        if cur.rowcount >= 1:
            log(f"committed the {what} of job {job_id} at epoch {epoch}")
        else:
            log(f"fenced: the {what} at epoch {epoch} matched no row; it is dropped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
