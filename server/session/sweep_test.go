package session

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/pgtest"
	"github.com/fencelab/fencelab/server/sandbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

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
	gone := engine.Schemas{Jobs: schemaPrefix + "g0ne_1_1_j", Receiver: schemaPrefix + "g0ne_1_1_r"}
	live := engine.Schemas{Jobs: schemaPrefix + "l1ve_1_1_j", Receiver: schemaPrefix + "l1ve_1_1_r"}
	for _, s := range []engine.Schemas{gone, live} {
		if err := engine.Setup(ctx, pool, s); err != nil {
			t.Fatal(err)
		}
		if _, err := sandbox.NewRole(ctx, pool, s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, s := range []engine.Schemas{gone, live} {
			_ = sandbox.DropRole(context.Background(), pool, sandbox.RoleName(s))
			_ = engine.Drop(context.Background(), pool, s)
		}
	})
	// The live server holds its instance lock.
	hold, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Release()
	lock := engine.AdvisoryLock(instanceKey("l1ve"))
	if _, err := hold.Exec(ctx, lock.SQL, lock.Args...); err != nil {
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
		roles, err = sandbox.ListRoles(ctx, pool, schemaPrefix)
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
