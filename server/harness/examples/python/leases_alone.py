#!/usr/bin/env python3
"""A BROKEN fencelab worker, on purpose: leases alone.

Its claim is correct (one statement, SKIP LOCKED, the epoch bumped, a lease
on the database clock), but its commit checks nothing but the job's id:

    UPDATE jobs SET status = 'done', ... WHERE id = %(id)s

So a zombie, a worker whose lease ran out while it was frozen and whose job
another worker took over, still commits when it wakes up: in both of the
article's orderings its stale result lands on the row. `fencelab check`
shows it failing new-owner-first, zombie-first and same-name
(complete-fence).

Run it under `fencelab check --worker 'python3 correct.py'`; WORKERS.md at
the top of the repository is the contract. Needs psycopg 3 (Debian:
python3-psycopg) and the standard library.
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request

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

# The bug: no compare-and-set at all, only the job's id.
COMPLETE = """
UPDATE jobs
   SET status = 'done', result = %(result)s, lease_until = NULL, updated_at = now()
 WHERE id = %(id)s
"""


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
        if e.code != 409:  # 409: refused as stale, a receipt all the same
            raise
        return e.code, json.load(e)


def main():
    worker = os.environ["FENCELAB_WORKER"]
    owner = os.environ["FENCELAB_OWNER"]
    lease_ms = int(os.environ["FENCELAB_LEASE_MS"])
    # autocommit: each statement is its own transaction, as the article's are.
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        while True:
            row = conn.execute(CLAIM, {"owner": owner, "lease_ms": lease_ms}).fetchone()
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
        log(f"receiver: HTTP {status}, {answer.get('decision')}")

        result = json.dumps({"worker": worker, "owner": owner, "pid": os.getpid(),
                             "job_id": job_id, "epoch": epoch, "output": output})
        cur = conn.execute(COMPLETE, {"result": result, "id": job_id, "owner": owner, "epoch": epoch})
        if cur.rowcount == 1:
            log(f"committed job {job_id} at epoch {epoch}")
        else:
            log(f"fenced: the commit at epoch {epoch} matched no row; the result is dropped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
