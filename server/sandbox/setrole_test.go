package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

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
	makePeers(t, r)
	if _, err := r.pool.Exec(ctx, "INSERT INTO "+r.schemas.Jobs+".jobs (payload) VALUES ('{}')"); err != nil {
		t.Fatal(err)
	}
	// The statement is one fair-looking UPDATE of jobs, which a
	// prepare-only rule lets through; Check refuses its calls, so it is
	// sent here without Check.
	escape := "UPDATE " + r.schemas.Jobs + ".jobs SET error = set_config('role', 'none', false) || query_to_xml('SELECT count(*) FROM fencelab_peers.sessions', true, true, '')::text WHERE id = $1"
	if _, err := r.role.Vet(ctx, sandbox.Complete, strings.Replace(escape, "$1", ":id", 1)); !errors.Is(err, sandbox.ErrRefused) {
		t.Errorf("Check let the escape through: %v", err)
	}
	run := func(conn *pgx.Conn) error {
		_, err := conn.PgConn().ExecParams(ctx, escape, [][]byte{[]byte("1")}, nil, nil, nil).Close()
		return err
	}

	// As the role itself: refused.
	if err := run(mustConn(t, r)); err == nil {
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
	if err := run(server); err != nil {
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
