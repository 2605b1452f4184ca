#!/usr/bin/env python3
"""A BROKEN fencelab worker, on purpose: a compare-and-set with no epoch.

Its claim is correct, and its commit is a compare-and-set on status and
owner, but not on the epoch:

    UPDATE jobs SET status = 'done', ... WHERE id = %(id)s
       AND status = 'running' AND owner = %(owner)s

With two distinct owner names that hides the missing epoch check: the
zombie's owner no longer matches the row. When the new owner has the
zombie's own name (a restarted pod with the same hostname), the zombie's
commit matches and lands: `fencelab check` shows it failing same-name
(complete-fence) and passing the rest.

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

# The bug: the epoch (the fencing token) is not compared.
COMPLETE = """
UPDATE jobs
   SET status = 'done', result = %(result)s, lease_until = NULL, updated_at = now()
 WHERE id = %(id)s
   AND status = 'running'
   AND owner = %(owner)s
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
