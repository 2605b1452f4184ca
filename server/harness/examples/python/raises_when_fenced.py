#!/usr/bin/env python3
"""A correct fencelab worker that raises when it is fenced, as the article says:
"When no row matches, raise and drop the result."

It is correct.py with one difference: its commit runs in a transaction, and
when the compare-and-set matches no row it raises, so the transaction is
rolled back and the process exits with status 1. The check judges what
reached the database, never the exit status, so this worker passes.

It keeps the article's three rules:
  1. the claim is ONE statement, FOR UPDATE SKIP LOCKED, that bumps the epoch
     (the fencing token) and starts a lease on the database clock, now();
  2. leases are judged on the database clock, so FENCELAB_CLOCK_SKEW_MS
     (how far this machine's clock runs ahead) changes nothing here;
  3. the commit is a compare-and-set on status, owner AND epoch: a zombie
     whose job was taken over matches no row, and its result is dropped.

Run it under `fencelab check --worker 'python3 raises_when_fenced.py'`; WORKERS.md at
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

COMPLETE = """
UPDATE jobs
   SET status = 'done', result = %(result)s, lease_until = NULL, updated_at = now()
 WHERE id = %(id)s
   AND status = 'running'
   AND owner = %(owner)s
   AND epoch = %(epoch)s
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
        with conn.transaction():
            cur = conn.execute(COMPLETE, {"result": result, "id": job_id, "owner": owner, "epoch": epoch})
            if cur.rowcount != 1:
                raise Fenced(f"the commit at epoch {epoch} matched no row: another worker holds job {job_id}")
        log(f"committed job {job_id} at epoch {epoch}")
    return 0


class Fenced(Exception):
    """The compare-and-set matched no row: this worker's lease was taken over."""


if __name__ == "__main__":
    sys.exit(main())
