-- run_at: when a pending job may be claimed. A job inserted to run later
-- waits for it, and a failed attempt's retry waits out its backoff.
ALTER TABLE {{schema}}.jobs ADD COLUMN IF NOT EXISTS run_at timestamptz NOT NULL DEFAULT now();

-- The claim now picks in run_at order, so its index leads with run_at; it
-- still holds only pending and running rows.
DROP INDEX IF EXISTS {{schema}}.jobs_claimable;
CREATE INDEX jobs_claimable ON {{schema}}.jobs (run_at, id)
    WHERE status IN ('pending', 'running');

-- The running jobs by lease end: the claim's first part finds the spent
-- ones (their lease ran out on their last attempt) here, among the running
-- rows only.
CREATE INDEX IF NOT EXISTS jobs_leased ON {{schema}}.jobs (lease_until)
    WHERE status = 'running';
