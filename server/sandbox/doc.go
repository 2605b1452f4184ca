// Package sandbox runs a reader's own SQL — the claim, complete, fail and
// the receiver's rule — as a Postgres role made for that run alone.
package sandbox
