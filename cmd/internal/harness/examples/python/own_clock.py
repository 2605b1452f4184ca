#!/usr/bin/env python3
"""A BROKEN fencelab worker, on purpose: it judges leases by its own clock.

Its claim is one statement that bumps the epoch, and its complete and fail
are the full compare-and-set on status, owner and epoch; but the claim
compares lease_until with the time on THIS machine's clock (plus
FENCELAB_CLOCK_SKEW_MS, how far fencelab says this clock runs ahead), not
with the database's now(). A worker whose clock runs ahead sees a live lease
as expired and takes the job while its owner is still working: two workers
hold it at once. `fencelab check` shows it failing clock-skew (db-clock)
and passing the rest.
"""
import sys

from fencelab_worker import CLAIM, main, without

# The bug: the claim's now() is this machine's clock, passed in.
OWN_CLOCK = without(CLAIM, "now()", "%(now)s::timestamptz")

if __name__ == "__main__":
    sys.exit(main(claim=OWN_CLOCK))
