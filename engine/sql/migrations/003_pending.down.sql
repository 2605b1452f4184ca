-- Back to migration 2's claim index: pending and running rows, in run_at order.
DROP INDEX IF EXISTS {{schema}}.jobs_pending;
CREATE INDEX IF NOT EXISTS jobs_claimable ON {{schema}}.jobs (run_at, id)
    WHERE status IN ('pending', 'running');
