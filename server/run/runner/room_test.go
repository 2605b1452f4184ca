package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/runner"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestRoomFor_WaitsForItsAnswer: when the server's pool is busy (its one
// connection held 3 s, as a loaded machine holds them), RoomFor waits for
// the answer rather than refuse a run it has room for. At a 2 s bound it
// said "could not ask Postgres for room": a 503 for no lack of room.
func TestRoomFor_WaitsForItsAnswer(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	held, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(3 * time.Second)
		held.Release()
	}()
	start := time.Now()
	if err := runner.RoomFor(context.Background(), pool, 1, "a test's worker"); err != nil {
		t.Fatalf("RoomFor after %v: %v; want room, once the pool's connection is free", time.Since(start).Round(time.Millisecond), err)
	}
}
