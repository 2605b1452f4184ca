package class

// The classes' statements: the server's own bookkeeping, not the queue's.
// The schema does not start with fl_, so the sweep of gone instances' run
// schemas never drops it.

const (
	setupSQL = `CREATE SCHEMA IF NOT EXISTS fencelab_classes;
CREATE TABLE IF NOT EXISTS fencelab_classes.classes (
    id      text        PRIMARY KEY,
    code    text        NOT NULL,
    teacher bytea       NOT NULL,
    created timestamptz NOT NULL DEFAULT now(),
    used    timestamptz NOT NULL DEFAULT now(),
    ended   timestamptz,
    client  text        NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS classes_open_code ON fencelab_classes.classes (code) WHERE ended IS NULL;
CREATE TABLE IF NOT EXISTS fencelab_classes.students (
    id      text        PRIMARY KEY,
    class   text        NOT NULL REFERENCES fencelab_classes.classes (id) ON DELETE CASCADE,
    name    text        NOT NULL,
    token   bytea       NOT NULL UNIQUE,
    joined  timestamptz NOT NULL DEFAULT now(),
    session text
);
CREATE UNIQUE INDEX IF NOT EXISTS students_name ON fencelab_classes.students (class, lower(name));
CREATE INDEX IF NOT EXISTS students_session ON fencelab_classes.students (session);
-- Names are unique by what a person reads (NameKey: "Аda" in Cyrillic is "Ada").
-- Added after the table, so a database set up by an older server gets it too.
ALTER TABLE fencelab_classes.students ADD COLUMN IF NOT EXISTS name_key text;
CREATE UNIQUE INDEX IF NOT EXISTS students_name_key ON fencelab_classes.students (class, name_key);
-- The student's check in the class's line: its job in the line's queue,
-- and what it plays (statements and lease), which a later check waiting
-- in the same place replaces.
ALTER TABLE fencelab_classes.students ADD COLUMN IF NOT EXISTS line_job bigint;
ALTER TABLE fencelab_classes.students ADD COLUMN IF NOT EXISTS line_check jsonb;
CREATE TABLE IF NOT EXISTS fencelab_classes.checks (
    id       bigserial   PRIMARY KEY,
    student  text        NOT NULL REFERENCES fencelab_classes.students (id) ON DELETE CASCADE,
    at       timestamptz NOT NULL DEFAULT now(),
    pass     boolean     NOT NULL,
    solution jsonb       NOT NULL,
    report   jsonb       NOT NULL
);
CREATE INDEX IF NOT EXISTS checks_student ON fencelab_classes.checks (student, id DESC);`

	// readySQL says whether setupSQL has nothing to do: the last thing it
	// makes on each table is there (students_name_key needs the name_key
	// column it adds; line_check is the last column it adds). It reads the
	// catalog as tables (pgsetup.Once).
	readySQL = `SELECT (SELECT count(*) = 2 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'fencelab_classes' AND c.relname IN ('students_name_key', 'checks_student'))
   AND EXISTS (SELECT FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'fencelab_classes' AND c.relname = 'students' AND a.attname = 'line_check' AND NOT a.attisdropped)`

	// clientLockSQL makes one client's classes open one at a time, so
	// that opens at once count each other.
	clientLockSQL = `SELECT pg_advisory_xact_lock(hashtext('fencelab_classes client ' || $1))`
	createSQL     = `INSERT INTO fencelab_classes.classes (id, code, teacher, client)
SELECT $1, $2, $3, $4 WHERE $4 = '' OR (SELECT count(*) FROM fencelab_classes.classes WHERE client = $4 AND ended IS NULL) < $5
RETURNING created, used`
	teacherSQL    = `SELECT id, code, teacher, created, used, ended FROM fencelab_classes.classes WHERE id = $1`
	openByCodeSQL = `SELECT id FROM fencelab_classes.classes WHERE code = $1 AND ended IS NULL`
	// lockOpenSQL holds an open class's row while a student joins it, so
	// that joins at once count each other.
	lockOpenSQL = `SELECT 1 FROM fencelab_classes.classes WHERE id = $1 AND ended IS NULL FOR UPDATE`
	joinSQL     = `INSERT INTO fencelab_classes.students (id, class, name, token, name_key)
SELECT $1, $2, $3, $4, $6 WHERE (SELECT count(*) FROM fencelab_classes.students WHERE class = $2) < $5
RETURNING joined`
	studentSQL = `SELECT s.id, s.class, s.name, s.joined, s.session
  FROM fencelab_classes.students s JOIN fencelab_classes.classes c ON c.id = s.class
 WHERE s.token = $1 AND c.ended IS NULL`
	studentsSQL   = `SELECT id, name, joined, coalesce(session, '') FROM fencelab_classes.students WHERE class = $1 ORDER BY joined, id`
	sessionOfSQL  = `SELECT coalesce(session, '') FROM fencelab_classes.students WHERE id = $1`
	setSessionSQL = `UPDATE fencelab_classes.students SET session = $2 WHERE id = $1`
	endSQL        = `UPDATE fencelab_classes.classes SET ended = now() WHERE id = $1 AND ended IS NULL`
	endIdleSQL    = `UPDATE fencelab_classes.classes SET ended = now() WHERE ended IS NULL AND used < now() - make_interval(secs => $1)`
	forgetSQL     = `DELETE FROM fencelab_classes.classes WHERE ended < now() - make_interval(secs => $1)`
	touchSQL      = `UPDATE fencelab_classes.classes SET used = now() WHERE id = $1`
	// boardSQL is each student of a class, in the order they joined, with
	// their last check.
	boardSQL = `SELECT s.id, s.name, s.joined, coalesce(s.session, ''), l.at, l.solution, l.report
  FROM fencelab_classes.students s
  LEFT JOIN LATERAL (SELECT k.at, k.solution, k.report FROM fencelab_classes.checks k
                      WHERE k.student = s.id ORDER BY k.id DESC LIMIT 1) l ON true
 WHERE s.class = $1
 ORDER BY s.joined, s.id`
	// historySQL is every check of a class's students, each student's
	// oldest first, with the first requirement it named broken (a
	// report's broken requirements are in the article's order).
	historySQL = `SELECT k.student, k.at, k.pass, coalesce(k.report->'broken'->0->>'requirement', '')
  FROM fencelab_classes.checks k JOIN fencelab_classes.students s ON s.id = k.student
 WHERE s.class = $1
 ORDER BY k.student, k.id`
)

// The line's statements on the class's own tables; the line's jobs are
// the engine's, reached through its API alone.
const (
	// lineMineSQL holds the student's row while their check is put in
	// line, and reads the job of their last one and whether their class
	// has ended. NO KEY UPDATE: a check of theirs being kept meanwhile
	// (its key share) does not wait for it.
	lineMineSQL = `SELECT s.line_job, c.ended IS NOT NULL
  FROM fencelab_classes.students s JOIN fencelab_classes.classes c ON c.id = s.class
 WHERE s.id = $1 FOR NO KEY UPDATE OF s`
	// endedSQL is which of the classes $1 have ended, or are gone.
	endedSQL = `SELECT id FROM unnest($1::text[]) AS q(id)
 WHERE NOT EXISTS (SELECT FROM fencelab_classes.classes c WHERE c.id = q.id AND c.ended IS NULL)`
	lineSetSQL = `UPDATE fencelab_classes.students SET line_job = $2, line_check = $3 WHERE id = $1`
	// lineCheckSQL reads what a check whose turn has come plays, waiting
	// for a Submit that holds the row: a later check that took the first
	// one's place while it waited is the one played.
	lineCheckSQL = `SELECT line_check FROM fencelab_classes.students WHERE id = $1 AND line_job = $2 FOR SHARE`
	// recordStudentSQL keeps a student's check, if their class is open,
	// and marks the class used.
	recordStudentSQL = `WITH kept AS (
  INSERT INTO fencelab_classes.checks (student, pass, solution, report)
  SELECT s.id, $2, $3, $4
    FROM fencelab_classes.students s JOIN fencelab_classes.classes c ON c.id = s.class
   WHERE s.id = $1 AND c.ended IS NULL
  RETURNING student)
UPDATE fencelab_classes.classes SET used = now()
 WHERE id IN (SELECT s.class FROM fencelab_classes.students s JOIN kept ON kept.student = s.id)`
)
