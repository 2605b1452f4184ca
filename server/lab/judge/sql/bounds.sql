-- What a run's tables take on disk, bounded where Postgres holds it: the
-- run's statements may be a stranger's. {{schema}} is replaced by the
-- quoted name of one of the run's two schemas (the queue's, the
-- receiver's), validated first; {{table}} by that schema's table a
-- reader's statement writes (jobs, deliveries).
--
-- A statement of a reader's role (the sandbox's roles: their names end in
-- _sql) may write at most 1,000 rows and 1 MiB of the table at once; past
-- either the whole statement is refused (SQLSTATE 54000, which the sandbox
-- reads as too-big) and nothing it wrote stays. The article's statements
-- write one row. The server's own statements (a load lab's thousands of
-- jobs) are not counted: session_user is who logged in, which SECURITY
-- DEFINER does not change.
CREATE OR REPLACE FUNCTION {{schema}}.write_bound() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    n bigint;
    b bigint;
BEGIN
    IF session_user::text NOT LIKE '%\_sql' THEN
        RETURN NULL;
    END IF;
    SELECT count(*), coalesce(sum(pg_column_size(w.*)), 0) INTO n, b FROM written w;
    IF n > 1000 THEN
        RAISE EXCEPTION 'a statement may write at most 1000 rows of a run''s table, and this one wrote %', n
            USING ERRCODE = '54000';
    END IF;
    IF b > 1048576 THEN
        RAISE EXCEPTION 'a statement may write at most 1 MiB of a run''s table, and this one wrote % bytes', b
            USING ERRCODE = '54000';
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS write_bound_insert ON {{schema}}.{{table}};
CREATE TRIGGER write_bound_insert AFTER INSERT ON {{schema}}.{{table}}
    REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.write_bound();
DROP TRIGGER IF EXISTS write_bound_update ON {{schema}}.{{table}};
CREATE TRIGGER write_bound_update AFTER UPDATE ON {{schema}}.{{table}}
    REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.write_bound();

-- No WAL for strangers' rows: every table of the schema is UNLOGGED
-- (nothing here is recovered after a crash; a run is judged before it
-- ends). A table another still-logged table references waits its turn.
DO $$
DECLARE
    t regclass;
    more boolean := true;
BEGIN
    WHILE more LOOP
        more := false;
        FOR t IN SELECT c.oid::regclass FROM pg_class c
                  WHERE c.relnamespace = '{{schema}}'::regnamespace AND c.relkind = 'r' AND c.relpersistence = 'p'
                    AND NOT EXISTS (SELECT FROM pg_constraint k JOIN pg_class o ON o.oid = k.conrelid
                                     WHERE k.contype = 'f' AND k.confrelid = c.oid AND o.oid <> c.oid AND o.relpersistence = 'p')
        LOOP
            EXECUTE format('ALTER TABLE %s SET UNLOGGED', t);
            more := true;
        END LOOP;
    END LOOP;
END
$$;
