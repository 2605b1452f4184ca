package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
)

// TestDropSchemas_AllOrNothing: DropSchemas drops every schema it names,
// and when one name is not a schema name it refuses them all and drops
// nothing.
func TestDropSchemas_AllOrNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := pgtest.Pool(t)
	a, b := pgtest.Schema(t), pgtest.Schema(t)
	for _, s := range []string{a, b} {
		if err := engine.SetupQueue(ctx, pool, s); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(s string) bool {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", s).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	for _, bad := range []string{"", "Bad", "x; DROP SCHEMA public", "pg_catalog", "a\x00b"} {
		err := engine.DropSchemas(ctx, pool, a, bad)
		if !errors.Is(err, engine.ErrInvalidInput) {
			t.Errorf("DropSchemas(%q, %q) = %v, want ErrInvalidInput", a, bad, err)
		}
		if !exists(a) {
			t.Fatalf("a refused DropSchemas(%q, %q) dropped %s", a, bad, a)
		}
	}
	if err := engine.DropSchemas(ctx, pool, a, b); err != nil {
		t.Fatal(err)
	}
	if exists(a) || exists(b) {
		t.Errorf("after DropSchemas(%s, %s): %s there %v, %s there %v", a, b, a, exists(a), b, exists(b))
	}
	if err := engine.DropSchemas(ctx, pool, a); err != nil {
		t.Errorf("dropping a schema that is gone: %v, want nil", err)
	}
}
