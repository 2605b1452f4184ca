package session

import (
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/jackc/pgx/v5"
)

// The statements the session manager runs to tell instances apart on a
// shared database: each instance's advisory lock, and the schemas its
// runs leave. (The peers' tables' statements are in peers.go.)

// advisoryLock takes a session-level advisory lock and holds it for as
// long as the connection lives. Processes that share a database use it to
// say "I am alive and these schemas are mine".
func advisoryLock(key int64) playground.Statement {
	return playground.Statement{Name: "AdvisoryLock", SQL: "SELECT pg_advisory_lock($1)", Args: []any{key}}
}

// advisoryTryLock takes an advisory lock if nobody holds it: a lock that
// is free means the process that held it is gone.
func advisoryTryLock(key int64) playground.Statement {
	return playground.Statement{Name: "AdvisoryTryLock", SQL: "SELECT pg_try_advisory_lock($1)", Args: []any{key}}
}

// advisoryUnlock gives back a lock taken with advisoryTryLock.
func advisoryUnlock(key int64) playground.Statement {
	return playground.Statement{Name: "AdvisoryUnlock", SQL: "SELECT pg_advisory_unlock($1)", Args: []any{key}}
}

// schemaList lists the schemas whose names start with prefix.
func schemaList(prefix string) playground.Statement {
	return playground.Statement{
		Name: "SchemaList",
		SQL:  "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY nspname",
		Args: []any{prefix},
	}
}

// schemaDrop drops one schema and everything in it: one a gone instance's
// run left.
func schemaDrop(name string) playground.Statement {
	return playground.Statement{Name: "SchemaDrop", SQL: "DROP SCHEMA IF EXISTS " + pgx.Identifier{name}.Sanitize() + " CASCADE"}
}
