#!/usr/bin/env python3
"""A BROKEN fencelab worker, on purpose: leases alone.

Its claim is correct (one statement, SKIP LOCKED, the epoch bumped, a lease
on the database clock), but its complete and its fail check nothing but the
job's id:

    UPDATE jobs SET status = 'done', ... WHERE id = %(id)s

So a zombie, a worker whose lease ran out while it was frozen and whose job
another worker took over, still commits when it wakes up: in both of the
article's orderings its stale result lands on the row, and in zombie-fails
its stale failure does. `fencelab check` shows it failing new-owner-first,
zombie-first and same-identity (complete-fence) and zombie-fails (fail-fence).
"""
import sys

from fencelab_worker import COMPLETE, FAIL, main, without

# The bug: no compare-and-set at all, only the job's id.
FENCE = """
   AND status = 'running'
   AND owner = %(owner)s
   AND epoch = %(epoch)s
"""

if __name__ == "__main__":
    sys.exit(main(complete=without(COMPLETE, FENCE), fail=without(FAIL, FENCE)))
