#!/usr/bin/env python3
"""A correct fencelab worker that raises when it is fenced, as the article says:
"When no row matches, raise and drop the result."

It is correct.py with one difference: its commit (or its fail) runs in a
transaction, and when the compare-and-set matches no row it raises, so the
transaction is rolled back and the process exits with status 1. The check
judges what reached the database, never the exit status, so this worker
passes.

Run it under `fencelab check --worker 'python3 raises_when_fenced.py'`;
WORKERS.md at the top of the repository is the contract.
"""
import sys

from fencelab_worker import main

if __name__ == "__main__":
    sys.exit(main(raise_when_fenced=True))
