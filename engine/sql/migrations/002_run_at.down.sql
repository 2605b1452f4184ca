-- Undoes 002: the claimable index by id alone, as 001 made it, and no run_at.
DROP INDEX IF EXISTS {{schema}}.jobs_leased;
DROP INDEX IF EXISTS {{schema}}.jobs_claimable;
CREATE INDEX jobs_claimable ON {{schema}}.jobs (id)
    WHERE status IN ('pending', 'running');
ALTER TABLE {{schema}}.jobs DROP COLUMN IF EXISTS run_at;
