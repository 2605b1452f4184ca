-- The playground's account of every change to a job: the history table
-- and its trigger, with a NOTIFY per change for whoever listens. lab.Setup
-- adds them to a queue's schema (engine.SetupQueue), which has neither, so
-- that a queue of its own does not pay for them; the lab's verdicts are
-- read from here. {{schema}} is replaced by the quoted schema name and
-- {{channel}} by the quoted NOTIFY channel; both are validated first.

-- job_history is Postgres's own account of every change to a job: what
-- changed, on the database clock, and which connection wrote it. Outcomes
-- and verdicts are read from here, never from what the workers believe.
CREATE TABLE IF NOT EXISTS {{schema}}.job_history (
    seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id          bigint      NOT NULL,
    op              text        NOT NULL,
    at              timestamptz NOT NULL,
    old_status      text,
    new_status      text        NOT NULL,
    old_owner       text,
    new_owner       text,
    old_epoch       bigint,
    new_epoch       bigint      NOT NULL,
    old_lease_until timestamptz,
    new_lease_until timestamptz,
    attempts        integer     NOT NULL,
    result          jsonb,
    app             text        NOT NULL,
    backend_pid     integer     NOT NULL
);

CREATE INDEX IF NOT EXISTS job_history_job ON {{schema}}.job_history (job_id, seq);

CREATE OR REPLACE FUNCTION {{schema}}.job_history_record() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    kind text;
    n    bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kind := 'insert';
    ELSIF NEW.status = 'running' AND (OLD.status <> 'running' OR NEW.attempts > OLD.attempts) THEN
        kind := 'claim';
    ELSIF NEW.status = 'running' THEN
        kind := 'renew';
    ELSIF NEW.status = 'done' THEN
        kind := 'complete';
    -- A claim that finds a job's lease run out on its last attempt ends it
    -- failed, with its epoch bumped so its holder's late writes are fenced:
    -- no failure report of a worker's, which never moves the epoch.
    ELSIF NEW.status = 'failed' AND OLD.status = 'running' AND NEW.epoch > OLD.epoch THEN
        kind := 'expire';
    ELSIF NEW.status = 'failed' THEN
        kind := 'fail';
    ELSIF NEW.status = 'pending' AND OLD.status = 'running' THEN
        kind := 'retry';
    ELSE
        kind := 'update';
    END IF;

    INSERT INTO {{schema}}.job_history (job_id, op, at,
        old_status, new_status, old_owner, new_owner, old_epoch, new_epoch,
        old_lease_until, new_lease_until, attempts, result, app, backend_pid)
    VALUES (NEW.id, kind, now(),
        CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END, NEW.status,
        CASE WHEN TG_OP = 'UPDATE' THEN OLD.owner END, NEW.owner,
        CASE WHEN TG_OP = 'UPDATE' THEN OLD.epoch END, NEW.epoch,
        CASE WHEN TG_OP = 'UPDATE' THEN OLD.lease_until END, NEW.lease_until,
        NEW.attempts, NEW.result,
        coalesce(current_setting('application_name', true), ''), pg_backend_pid())
    RETURNING seq INTO n;

    PERFORM pg_notify({{channel}}, json_build_object(
        'seq', n, 'job_id', NEW.id, 'op', kind, 'at', now(),
        'old', CASE WHEN TG_OP = 'UPDATE' THEN json_build_object(
            'status', OLD.status, 'owner', OLD.owner, 'epoch', OLD.epoch, 'lease_until', OLD.lease_until) END,
        'new', json_build_object(
            'status', NEW.status, 'owner', NEW.owner, 'epoch', NEW.epoch, 'lease_until', NEW.lease_until),
        'app', current_setting('application_name', true))::text);
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS job_history ON {{schema}}.jobs;
CREATE TRIGGER job_history AFTER INSERT OR UPDATE ON {{schema}}.jobs
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.job_history_record();

-- job_writes is Postgres's account of every UPDATE statement on jobs,
-- whatever it matched: a statement-level trigger with a transition table
-- records each one with the number of rows it matched, on the database
-- clock, and the writer's application_name. A fenced commit shows here as
-- a statement by the zombie that matched 0 rows, where job_history, which
-- sees only rows, shows nothing.
CREATE TABLE IF NOT EXISTS {{schema}}.job_writes (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL,
    app         text        NOT NULL,
    backend_pid integer     NOT NULL,
    matched     integer     NOT NULL,
    job_ids     bigint[]    NOT NULL
);

-- A statement whose transaction is rolled back leaves no row in
-- job_writes: a worker that raises when its fenced commit matched nothing
-- (as the article says) rolls it back. A sequence does not roll back, so
-- each of the check's two workers has one, which its every UPDATE on jobs
-- advances: it counts the statements the worker sent, whatever became of
-- them.
CREATE SEQUENCE IF NOT EXISTS {{schema}}.job_writes_sent_a;
CREATE SEQUENCE IF NOT EXISTS {{schema}}.job_writes_sent_b;

CREATE OR REPLACE FUNCTION {{schema}}.job_writes_record() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    app text := coalesce(current_setting('application_name', true), '');
BEGIN
    IF app = 'fencelab worker A' THEN
        PERFORM nextval(format('%I.job_writes_sent_a', TG_TABLE_SCHEMA));
    ELSIF app = 'fencelab worker B' THEN
        PERFORM nextval(format('%I.job_writes_sent_b', TG_TABLE_SCHEMA));
    END IF;
    INSERT INTO {{schema}}.job_writes (at, app, backend_pid, matched, job_ids)
    SELECT now(), app, pg_backend_pid(), count(*), coalesce(array_agg(id ORDER BY id), '{}') FROM matched_rows;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS job_writes ON {{schema}}.jobs;
CREATE TRIGGER job_writes AFTER UPDATE ON {{schema}}.jobs
    REFERENCING NEW TABLE AS matched_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.job_writes_record();
