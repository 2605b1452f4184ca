package sandbox

import (
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestRefusal_IsInTheReadersTerms: a Postgres message that names the run's
// schemas reaches the reader without them.
func TestRefusal_IsInTheReadersTerms(t *testing.T) {
	s := judge.Schemas{Jobs: "fl_ab12_7_j", Receiver: "fl_ab12_7_r"}
	c, err := Load(Complete, "UPDATE jobs SET error = 'x' WHERE id = :id", s)
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{
		`new row for relation "fl_ab12_7_j.jobs" violates check constraint "jobs_status_check"`,
		`permission denied for table fl_ab12_7_r.deliveries`,
		`schema "fl_ab12_7_j" is busy`,
	} {
		got := c.refusal(&pgconn.PgError{Code: "23514", Message: msg}).Message
		if strings.Contains(got, "fl_ab12") {
			t.Errorf("%q reached the reader as %q", msg, got)
		}
	}
}
