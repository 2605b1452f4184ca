package session

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/instances"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/servertest"
	"github.com/fencelab/fencelab/server/session/runschemas"
)

// TestMain gives the tests one Postgres, and removes the fencelab binary
// servertest built for the worker processes once they are done.
func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	servertest.Cleanup()
	os.Exit(code)
}

// TestSweepOrphans_DropsAGoneServersSandboxRoles: a server killed before
// it could clean up leaves its runs' schemas and their sandbox roles; the
// next server to start drops both, and leaves a live server's alone.
func TestSweepOrphans_DropsAGoneServersSandboxRoles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := pgtest.Pool(t)
	if err := sandbox.Harden(ctx, pool); err != nil {
		t.Fatal(err)
	}
	gone := judge.Schemas{Jobs: runschemas.Prefix + "g0ne_1_1_j", Receiver: runschemas.Prefix + "g0ne_1_1_r"}
	live := judge.Schemas{Jobs: runschemas.Prefix + "l1ve_1_1_j", Receiver: runschemas.Prefix + "l1ve_1_1_r"}
	for _, s := range []judge.Schemas{gone, live} {
		if err := judge.Setup(ctx, pool, s); err != nil {
			t.Fatal(err)
		}
		if _, err := sandbox.NewRole(ctx, pool, s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, s := range []judge.Schemas{gone, live} {
			_ = sandbox.DropRole(context.Background(), pool, sandbox.RoleName(s))
			_ = judge.Drop(context.Background(), pool, s)
		}
	})
	// The live server holds its instance lock.
	hold, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Release()
	if _, err := hold.Exec(ctx, "SELECT pg_advisory_lock($1)", instances.Key("l1ve")); err != nil {
		t.Fatal(err)
	}
	defer hold.Exec(context.Background(), "SELECT pg_advisory_unlock_all()") //nolint:errcheck

	m, err := NewManager(ctx, Config{Pool: pool, Limits: Limits{GoneAfter: 200 * time.Millisecond, SweepEvery: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var roles []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		roles, err = sandbox.ListRoles(ctx, pool, runschemas.Prefix)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(roles, sandbox.RoleName(gone)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gone server's role %s outlived it", sandbox.RoleName(gone))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !slices.Contains(roles, sandbox.RoleName(live)) {
		t.Errorf("the live server's role %s was dropped", sandbox.RoleName(live))
	}
}

// TestSweep_AKilledPeersSchemasGoWhileTheOthersRun: an instance killed
// with SIGKILL leaves its row in fencelab_peers.instances (seen no more),
// its schemas, and a free lock; a server already running drops them
// within a couple of sweeps, not only at the next server's start. (Which
// instances count as gone is package instances' to test.)
func TestSweep_AKilledPeersSchemasGoWhileTheOthersRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := pgtest.Pool(t)
	m, err := NewManager(ctx, Config{Pool: pool, Limits: Limits{GoneAfter: 300 * time.Millisecond, SweepEvery: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	dead := judge.Schemas{Jobs: runschemas.Prefix + "d3ad_1_1_j", Receiver: runschemas.Prefix + "d3ad_1_1_r"}
	if err := judge.Setup(ctx, pool, dead); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = judge.Drop(context.Background(), pool, dead) })
	if _, err := pool.Exec(ctx, `INSERT INTO fencelab_peers.instances (id, url, seen) VALUES ('d3ad', '', now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DELETE FROM fencelab_peers.instances WHERE id = 'd3ad'`)
	})
	deadline := time.Now().Add(15 * time.Second)
	for _, name := range []string{dead.Jobs, dead.Receiver} {
		for {
			var n int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", name).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a killed peer's schema %s outlived it while the server ran", name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
