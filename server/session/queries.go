package session

import "github.com/fencelab/fencelab/engine/playground"

// The statement the session manager runs to find the schemas its runs
// leave (the instances' own are in package instances).

// schemaList lists the schemas whose names start with prefix.
func schemaList(prefix string) playground.Statement {
	return playground.Statement{
		Name: "SchemaList",
		SQL:  "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY nspname",
		Args: []any{prefix},
	}
}
