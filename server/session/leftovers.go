package session

import (
	"context"
	"strings"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/jackc/pgx/v5"
)

// leftovers is what a server's instance leaves in its Postgres beside the
// instances' rows: its runs' schemas (fl_<instance>_…) and their sandbox
// roles. Package instances finds which instances are gone and asks these
// to be dropped (instances.Leftovers).
type leftovers struct{ m *Manager }

// Owners are the instances whose schemas or sandbox roles there are.
func (l leftovers) Owners(ctx context.Context) ([]string, error) {
	names, err := l.schemas(ctx, schemaPrefix)
	if err != nil {
		return nil, err
	}
	roles, err := sandbox.ListRoles(ctx, l.m.cfg.Pool, schemaPrefix)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, n := range append(names, roles...) {
		if id := instanceOf(n); id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

// Forget drops instance id's schemas and its runs' roles.
func (l leftovers) Forget(ctx context.Context, id string) (int, error) {
	names, err := l.schemas(ctx, schemaPrefix+id+"_")
	if err != nil {
		return 0, err
	}
	// One schema per transaction: a gone instance may have left many, and
	// one transaction dropping them all could outgrow the lock table.
	for i, n := range names {
		if err := engine.DropSchemas(ctx, l.m.cfg.Pool, n); err != nil {
			return i, err
		}
	}
	roles, err := sandbox.ListRoles(ctx, l.m.cfg.Pool, schemaPrefix+id+"_")
	if err != nil {
		return len(names), err
	}
	for _, r := range roles {
		if err := sandbox.DropRole(ctx, l.m.cfg.Pool, r); err != nil {
			return len(names), err
		}
	}
	return len(names), nil
}

// schemas lists the schemas whose names start with prefix.
func (l leftovers) schemas(ctx context.Context, prefix string) ([]string, error) {
	st := schemaList(prefix)
	rows, err := l.m.cfg.Pool.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// instanceOf is the instance a schema or role name of a server's belongs
// to: fl_<instance>_….
func instanceOf(name string) string {
	parts := strings.SplitN(strings.TrimPrefix(name, schemaPrefix), "_", 2)
	if len(parts) != 2 || !strings.HasPrefix(name, schemaPrefix) {
		return ""
	}
	return parts[0]
}
