-- The claim reads the pending jobs and the jobs whose lease ran out apart,
-- each by its own partial index, so it never walks past the running jobs
-- other claimers hold: an index of pending rows alone, in run_at order,
-- replaces the one of pending and running rows (jobs_leased, from
-- migration 2, finds the running ones by lease end). A claimed row is no
-- longer written into a claim index either.
DROP INDEX IF EXISTS {{schema}}.jobs_claimable;
CREATE INDEX IF NOT EXISTS jobs_pending ON {{schema}}.jobs (run_at, id)
    WHERE status = 'pending';
