package judge

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencelab/fencelab/engine"
)

// A check's probes set a lab queue's jobs to a state of their own, as the
// server, then run a reader's statements or worker on them and read how
// each row changed: the statements' own questions, which no run's
// ordering asks (server/run/check's probes of statements, cmd/internal/harness's of
// a worker program).

// JobState is a state a probe puts a job in.
type JobState struct {
	Status engine.Status
	Owner  string // "" is none
	Epoch  int64
	// Lease is how long from now() on the database clock the lease runs:
	// negative, one that ran out that long ago; 0, no lease (NULL).
	Lease                 time.Duration
	Attempts, MaxAttempts int
}

// SetJob puts job id of the lab queue in schema in the state, its result
// and error cleared.
func SetJob(ctx context.Context, db engine.DB, schema string, id int64, st JobState) error {
	if err := engine.ValidateSchemaName(schema); err != nil {
		return fmt.Errorf("set a job: %w", err)
	}
	var lease *int64
	if st.Lease != 0 {
		ms := st.Lease.Milliseconds()
		lease = &ms
	}
	q := jobSet(schema)
	tag, err := db.Exec(ctx, q.SQL, id, string(st.Status), st.Owner, st.Epoch, lease, st.Attempts, st.MaxAttempts)
	if err != nil {
		return dbErr("set a job", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("set a job: there is no job %d", id)
	}
	return nil
}

// JobRow is what a probe reads of a job.
type JobRow struct {
	Status, Owner, Result, Error string
	Epoch                        int64
	Lease                        string
	Attempts                     int
}

// JobRows reads every job of the lab queue in schema, by id.
func JobRows(ctx context.Context, db engine.DB, schema string) (map[int64]JobRow, error) {
	if err := engine.ValidateSchemaName(schema); err != nil {
		return nil, fmt.Errorf("read the jobs: %w", err)
	}
	q := jobRowsList(schema)
	rs, err := db.Query(ctx, q.SQL)
	if err != nil {
		return nil, dbErr("read the jobs", err)
	}
	defer rs.Close()
	out := map[int64]JobRow{}
	for rs.Next() {
		var id int64
		var r JobRow
		if err := rs.Scan(&id, &r.Status, &r.Owner, &r.Epoch, &r.Lease, &r.Attempts, &r.Result, &r.Error); err != nil {
			return nil, dbErr("read the jobs", err)
		}
		out[id] = r
	}
	if err := rs.Err(); err != nil {
		return nil, dbErr("read the jobs", err)
	}
	return out, nil
}

// Diff says how the row changed into b, column by column: "status running
// → done, epoch 5 → 0"; "" when it did not.
func (a JobRow) Diff(b JobRow) string {
	var d []string
	add := func(col string, x, y any) {
		if x != y {
			d = append(d, fmt.Sprintf("%s %v → %v", col, x, y))
		}
	}
	add("status", a.Status, b.Status)
	add("owner", a.Owner, b.Owner)
	add("epoch", a.Epoch, b.Epoch)
	add("lease_until", a.Lease, b.Lease)
	add("attempts", a.Attempts, b.Attempts)
	add("result", a.Result, b.Result)
	add("error", a.Error, b.Error)
	return strings.Join(d, ", ")
}

// EpochWentDown names a job whose epoch is lower in after than in before,
// in words ("job 1's epoch down from 2 to 0"); "" when none is.
func EpochWentDown(before, after map[int64]JobRow) string {
	for id, r := range after {
		if b, ok := before[id]; ok && r.Epoch < b.Epoch {
			return fmt.Sprintf("job %d's epoch down from %d to %d", id, b.Epoch, r.Epoch)
		}
	}
	return ""
}
