package nemesis

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/jackc/pgx/v5"
)

// The effects table, and every statement of this package. A job's handler
// writes two effect rows, each naming the job, the epoch (or attempt) it
// held and the worker that wrote it:
//
//   - a fenced effect ('fenced'), written in the transaction that records
//     the job's completion, so it commits only if the completion does;
//   - an external effect ('external'), written on a connection of its own
//     before the job is recorded, as a call to an outside system that
//     knows nothing of fencing would be.
//
// A queue whose completions are fenced holds exactly one fenced effect per
// job, at the job's final epoch. External effects at older epochs are the
// zombies' calls that got out: counted, since nothing in the queue can
// stop them (DESIGN.md: the receiver's own check is what does).

// Effect kinds.
const (
	EffectFenced   = "fenced"
	EffectExternal = "external"
)

// ident quotes a schema name for SQL.
func ident(schema string) string { return pgx.Identifier{schema}.Sanitize() }

// SetupEffects creates the effects table in schema (which must exist),
// empty. Queues of any kind may share the definition: River's runs put it
// in a schema beside River's tables.
func SetupEffects(ctx context.Context, db engine.DB, schema string) error {
	if err := engine.ValidateSchemaName(schema); err != nil {
		return err
	}
	t := ident(schema) + ".effects"
	for _, sql := range []string{
		"DROP TABLE IF EXISTS " + t,
		"CREATE TABLE " + t + ` (
			id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			job_id bigint NOT NULL,
			epoch  bigint NOT NULL,
			worker text   NOT NULL,
			kind   text   NOT NULL CHECK (kind IN ('fenced', 'external')),
			at     timestamptz NOT NULL DEFAULT clock_timestamp()
		)`,
		"CREATE INDEX ON " + t + " (job_id)",
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			return fmt.Errorf("set up effects in %s: %w", schema, err)
		}
	}
	return nil
}

// EffectInsert returns the statement that writes one effect row: its
// arguments are the job id, the epoch (or attempt), the worker and the kind.
func EffectInsert(schema string) string {
	return "INSERT INTO " + ident(schema) + ".effects (job_id, epoch, worker, kind) VALUES ($1, $2, $3, $4)"
}

// Insert empties schema's jobs table and puts n pending jobs in it, each
// allowed maxAttempts claims, with the queue's bulk insert.
func Insert(ctx context.Context, db engine.DB, schema string, n, maxAttempts int) error {
	if _, err := db.Exec(ctx, "TRUNCATE "+ident(schema)+".jobs"); err != nil {
		return fmt.Errorf("insert %d jobs: %w", n, err)
	}
	q, err := engine.NewQueue(db, engine.QueueConfig{Schema: schema})
	if err != nil {
		return err
	}
	const chunk = 5000
	jobs := make([]engine.NewJob, 0, min(n, chunk))
	for i := 0; i < n; i += chunk {
		jobs = jobs[:0]
		for j := i; j < min(n, i+chunk); j++ {
			jobs = append(jobs, engine.NewJob{Payload: fmt.Appendf(nil, `{"n": %d}`, j), MaxAttempts: maxAttempts})
		}
		if _, err := q.InsertMany(ctx, jobs); err != nil {
			return fmt.Errorf("insert %d jobs: %w", n, err)
		}
	}
	if _, err := db.Exec(ctx, "ANALYZE "+ident(schema)+".jobs"); err != nil {
		return fmt.Errorf("insert %d jobs: %w", n, err)
	}
	return nil
}

// Unfinished counts schema's jobs that are still pending or running.
func Unfinished(ctx context.Context, db engine.DB, schema string) (int, error) {
	var n int
	err := db.QueryRow(ctx, "SELECT count(*) FROM "+ident(schema)+".jobs WHERE status IN ('pending', 'running')").Scan(&n)
	return n, err
}

// countDone counts schema's jobs that are done.
func countDone(ctx context.Context, db engine.DB, schema string) (int, error) {
	var n int
	err := db.QueryRow(ctx, "SELECT count(*) FROM "+ident(schema)+".jobs WHERE status = 'done'").Scan(&n)
	return n, err
}

// DBNow reads the database clock.
func DBNow(ctx context.Context, db engine.DB) (time.Time, error) {
	var t time.Time
	err := db.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t)
	return t, err
}

// Verdict is how a run ended, read from SQL alone once every worker has
// stopped. The field names are the same for River's runs, where a job's
// epoch is River's attempt and its owner the client that made that attempt.
type Verdict struct {
	Jobs       int // rows in the jobs table
	Done       int // jobs that ended done (River: completed)
	Failed     int // jobs that ended failed (River: discarded or cancelled)
	Unfinished int // jobs still pending or running: stuck
	Reclaimed  int // jobs claimed more than once: the nemesis bit them
	MaxEpoch   int64
	// WrongResult counts done jobs whose result is not the final epoch's:
	// the result's epoch or worker is not the row's final epoch and owner.
	WrongResult int
	// FencedEffects counts fenced effect rows; ZombieCompletions those
	// whose epoch or worker is not their job's final one: a completion
	// that landed for a claim that had been superseded.
	FencedEffects     int
	ZombieCompletions int
	// NotOnce counts done jobs that do not hold exactly one fenced effect.
	NotOnce int
	// ExternalEffects counts external effect rows; StaleEffects those
	// whose epoch is older than their job's final one (a zombie's call
	// that got out), and FutureEffects those newer, which cannot happen.
	ExternalEffects int
	StaleEffects    int
	FutureEffects   int
	// Last is the database time the last job was recorded.
	Last time.Time
}

// verdictSQL reads a Verdict from a table of final job states, final(id,
// status, epoch, owner, result_epoch, result_worker, finished_at) with
// status in done, failed or unfinished, and the effects table.
const verdictSQL = `
WITH final AS (%s),
eff AS (
	SELECT e.kind, e.epoch, e.worker, f.id, f.status, f.epoch AS final_epoch, f.owner AS final_owner
	  FROM %s.effects e LEFT JOIN final f ON f.id = e.job_id
), once AS (
	SELECT f.id, count(e.job_id) FILTER (WHERE e.kind = 'fenced') AS n
	  FROM final f LEFT JOIN %s.effects e ON e.job_id = f.id
	 WHERE f.status = 'done'
	 GROUP BY f.id
)
SELECT
	(SELECT count(*) FROM final),
	(SELECT count(*) FROM final WHERE status = 'done'),
	(SELECT count(*) FROM final WHERE status = 'failed'),
	(SELECT count(*) FROM final WHERE status = 'unfinished'),
	(SELECT count(*) FROM final WHERE epoch > 1),
	(SELECT coalesce(max(epoch), 0) FROM final),
	(SELECT count(*) FROM final WHERE status = 'done'
	    AND (result_epoch IS DISTINCT FROM epoch OR result_worker IS DISTINCT FROM owner)),
	(SELECT count(*) FROM eff WHERE kind = 'fenced'),
	(SELECT count(*) FROM eff WHERE kind = 'fenced'
	    AND (id IS NULL OR epoch <> final_epoch OR worker IS DISTINCT FROM final_owner)),
	(SELECT count(*) FROM once WHERE n <> 1),
	(SELECT count(*) FROM eff WHERE kind = 'external'),
	(SELECT count(*) FROM eff WHERE kind = 'external' AND epoch < final_epoch),
	(SELECT count(*) FROM eff WHERE kind = 'external' AND (id IS NULL OR epoch > final_epoch)),
	(SELECT coalesce(max(finished_at), '-infinity') FROM final)`

// JudgeSQL reads a Verdict given a query of the final job states (see
// verdictSQL) and the schema of the effects table: the River benchmark's
// entry, with River's tables.
func JudgeSQL(ctx context.Context, db engine.DB, final, effectsSchema string) (Verdict, error) {
	var v Verdict
	e := ident(effectsSchema)
	err := db.QueryRow(ctx, fmt.Sprintf(verdictSQL, final, e, e)).Scan(&v.Jobs, &v.Done, &v.Failed, &v.Unfinished, &v.Reclaimed, &v.MaxEpoch,
		&v.WrongResult, &v.FencedEffects, &v.ZombieCompletions, &v.NotOnce, &v.ExternalEffects, &v.StaleEffects, &v.FutureEffects, &v.Last)
	if err != nil {
		return Verdict{}, fmt.Errorf("read the verdict: %w", err)
	}
	return v, nil
}

// Judge reads the verdict of a fencelab run on schema (jobs and effects).
func Judge(ctx context.Context, db engine.DB, schema string) (Verdict, error) {
	final := `SELECT id, CASE WHEN status IN ('pending', 'running') THEN 'unfinished' ELSE status END AS status, epoch, owner,
		(result->>'epoch')::bigint AS result_epoch, result->>'worker' AS result_worker,
		CASE WHEN status IN ('done', 'failed') THEN updated_at END AS finished_at
	  FROM ` + ident(schema) + `.jobs`
	return JudgeSQL(ctx, db, final, schema)
}
