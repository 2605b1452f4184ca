package engine

import (
	"time"

	"github.com/fencelab/fencelab/engine/internal/hook"
)

// ClaimStatement is the one-job claim as Queue.Claim sends it, for the
// tests that EXPLAIN it.
func ClaimStatement(schema string) hook.Statement {
	return jobClaim(schema, 0, "w", time.Minute, time.Now())
}
