#!/usr/bin/env python3
"""A BROKEN fencelab worker, on purpose: a compare-and-set with no epoch.

Its claim is correct, and its complete and fail are compare-and-sets on
status and owner, but not on the epoch:

    UPDATE jobs SET status = 'done', ... WHERE id = %(id)s
       AND status = 'running' AND owner = %(owner)s

With two distinct owner names that hides the missing epoch check: the
zombie's owner no longer matches the row. When the new owner has the
zombie's own name (a restarted pod with the same hostname), the zombie's
commit matches and lands: `fencelab check` shows it failing same-identity
(complete-fence) and zombie-fails (fail-fence), and passing the rest.
"""
import sys

from fencelab_worker import COMPLETE, FAIL, main, without

# The bug: the epoch (the fencing token) is not compared.
EPOCH = "\n   AND epoch = %(epoch)s\n"

if __name__ == "__main__":
    sys.exit(main(complete=without(COMPLETE, EPOCH), fail=without(FAIL, EPOCH)))
