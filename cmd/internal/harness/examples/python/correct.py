#!/usr/bin/env python3
"""A correct fencelab worker: claim one job, call the receiver, commit (or,
when the receiver says the handler failed, fail), exit.

It is fencelab_worker.py's loop with the article's statements as they are
there: one claim, FOR UPDATE SKIP LOCKED, that bumps the epoch and judges
leases on the database clock; complete and fail by compare-and-set on
status, owner AND epoch.

Run it under `fencelab check --worker 'python3 correct.py'`; WORKERS.md at
the top of the repository is the contract.
"""
import sys

from fencelab_worker import main

if __name__ == "__main__":
    sys.exit(main())
