package engine

import "time"

// ClaimStatement is the one-job claim as Queue.Claim sends it, for the
// tests that EXPLAIN it.
func ClaimStatement(schema string) Statement {
	return jobClaim(schema, 0, "w", time.Minute, time.Now())
}
