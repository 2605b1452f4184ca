-- Migration 001, the queue as it first was. {{schema}} is replaced by the
-- quoted schema name, validated first. Every statement is idempotent, so a
-- schema made before migrations were versioned is taken over as it is.

CREATE SCHEMA IF NOT EXISTS {{schema}};

CREATE TABLE IF NOT EXISTS {{schema}}.jobs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payload      jsonb       NOT NULL,
    status       text        NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'running', 'done', 'failed')),
    owner        text,
    -- epoch is the fencing token: every claim bumps it, it never goes down.
    epoch        bigint      NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    -- lease_until is judged against the database clock, now().
    lease_until  timestamptz,
    attempts     integer     NOT NULL DEFAULT 0,
    max_attempts integer     NOT NULL DEFAULT 3 CHECK (max_attempts BETWEEN 1 AND 100),
    result       jsonb,
    error        text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Only claimable rows are in this index, so a claim never walks past the
-- finished jobs: it costs the same after ten finished jobs or ten million.
CREATE INDEX IF NOT EXISTS jobs_claimable ON {{schema}}.jobs (id)
    WHERE status IN ('pending', 'running');

-- The outbox: a delivery written by the same statement as the commit that
-- earns it (JobCompleteOutbox), and sent to the receiver by a relay only
-- after that commit. A fenced commit writes no row here, so a zombie's
-- delivery is never sent.
CREATE TABLE IF NOT EXISTS {{schema}}.outbox (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     bigint      NOT NULL,
    epoch      bigint      NOT NULL,
    owner      text        NOT NULL,
    payload    jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at    timestamptz
);

CREATE INDEX IF NOT EXISTS outbox_unsent ON {{schema}}.outbox (id) WHERE sent_at IS NULL;
