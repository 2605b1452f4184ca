package sandbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/sandbox"
)

var hardenOnce sync.Once

// run is one run's schemas and role, dropped when the test ends.
type run struct {
	pool    *pgxpool.Pool
	schemas judge.Schemas
	role    *sandbox.Role
}

func newRun(t *testing.T) *run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := pgtest.Pool(t)
	hardenOnce.Do(func() {
		if err := sandbox.Harden(ctx, pool); err != nil {
			t.Fatalf("harden: %v", err)
		}
	})
	s := judge.Schemas{Jobs: pgtest.Schema(t), Receiver: pgtest.Schema(t)}
	if err := judge.Setup(ctx, pool, s); err != nil {
		t.Fatalf("setup: %v", err)
	}
	role, err := sandbox.NewRole(ctx, pool, s)
	if err != nil {
		t.Fatalf("new role: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := role.Drop(ctx, pool); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	return &run{pool: pool, schemas: s, role: role}
}

func mustConn(t *testing.T, r *run) *pgx.Conn {
	t.Helper()
	c, err := r.role.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

var peersOnce sync.Once

// makePeers makes the server's own table once: CREATE … IF NOT EXISTS is
// not safe against itself in parallel tests.
func makePeers(t *testing.T, r *run) {
	t.Helper()
	var err error
	peersOnce.Do(func() { _, err = r.pool.Exec(context.Background(), peersSetup) })
	if err != nil {
		t.Fatal(err)
	}
}
