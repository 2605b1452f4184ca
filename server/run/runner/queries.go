package runner

import (
	"fmt"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/jackc/pgx/v5"
)

// The runner's own SQL, beside what it runs through the engine and the
// lab: the database clock, and the numbering of a run's jobs.

// clockNow reads the database clock.
func clockNow() playground.Statement {
	return playground.Statement{Name: "ClockNow", SQL: "SELECT clock_timestamp()"}
}

// jobIDRestart makes a jobs schema number its jobs from start, so job ids
// from different schemas never meet at a shared receiver.
func jobIDRestart(schema string, start int64) playground.Statement {
	return playground.Statement{Name: "JobIDRestart", SQL: fmt.Sprintf("ALTER TABLE %s.jobs ALTER COLUMN id RESTART WITH %d", pgx.Identifier{schema}.Sanitize(), start)}
}
