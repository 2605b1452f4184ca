package sandbox_test

import (
	"context"
	"testing"

	"github.com/fencelab/fencelab/server/sandbox"
)

// TestSetRoleWouldNotHold shows why statements run on a connection that
// logged in as the role, not after SET ROLE on one of the server's: there,
// a statement that passes Check gets the server's rights back halfway
// through itself, and reads the server's own table.
func TestSetRoleWouldNotHold(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	ctx := context.Background()
	if _, err := r.pool.Exec(ctx, peersSetup); err != nil {
		t.Fatal(err)
	}
	if _, err := r.pool.Exec(ctx, "INSERT INTO "+r.schemas.Jobs+".jobs (payload) VALUES ('{}')"); err != nil {
		t.Fatal(err)
	}
	escape := "UPDATE jobs SET error = set_config('role', 'none', false) || query_to_xml('SELECT count(*) FROM fencelab_peers.sessions', true, true, '')::text WHERE id = :id"
	c, err := r.role.Check(ctx, sandbox.Complete, escape)
	if err != nil {
		t.Fatalf("Check: %v", err) // it is a fair-looking UPDATE of jobs
	}

	// As the role itself: refused.
	if _, err := sandbox.Exec(ctx, mustConn(t, r), c, map[string]any{"id": int64(1)}); err == nil {
		t.Fatal("as the role, set_config('role', 'none') worked")
	}

	// After SET ROLE on the server's connection: it escapes.
	pc, err := r.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	server := pc.Hijack()                    // out of the pool: this session is spoiled
	defer server.Close(context.Background()) //nolint:errcheck
	if _, err := server.Exec(ctx, "SET ROLE "+r.role.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.Exec(ctx, server, c, map[string]any{"id": int64(1)}); err != nil {
		t.Fatalf("after SET ROLE, the escape was refused (%v): then SET ROLE would hold, and doc.go is wrong", err)
	}
	var who string
	if err := server.QueryRow(ctx, "SELECT current_user").Scan(&who); err != nil {
		t.Fatal(err)
	}
	if who == r.role.Name() {
		t.Fatalf("current_user is still %s", who)
	}
	t.Logf("after SET ROLE %s, one statement read fencelab_peers and left the session as %s", r.role.Name(), who)
}
