-- The external receiver's schema: another system, so another schema. It
-- keeps the newest epoch per job and a log of every decision it made.

CREATE SCHEMA IF NOT EXISTS {{schema}};

CREATE TABLE IF NOT EXISTS {{schema}}.deliveries (
    job_id      bigint      PRIMARY KEY,
    epoch       bigint      NOT NULL,
    owner       text        NOT NULL,
    payload     jsonb       NOT NULL,
    -- prev_epoch and prev_owner hold what the last accepted delivery replaced,
    -- so the upsert can say which epoch it superseded in the same statement.
    prev_epoch  bigint,
    prev_owner  text,
    accepted    integer     NOT NULL DEFAULT 1,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS {{schema}}.decisions (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      bigint      NOT NULL,
    epoch       bigint      NOT NULL,
    owner       text        NOT NULL,
    payload     jsonb       NOT NULL,
    decision    text        NOT NULL,
    held_epoch  bigint,
    prev_epoch  bigint,
    at          timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS decisions_job ON {{schema}}.decisions (job_id, seq);
