package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/sandbox"
)

// The engine's own statements, as a reader would type them: fenced, and
// leases alone (the page's starting point).
var fair = []struct {
	name string
	kind sandbox.Kind
	sql  string
}{
	{"claim, fenced", sandbox.Claim, `UPDATE jobs
   SET status = 'running', owner = :owner, epoch = epoch + 1, attempts = attempts + 1,
       lease_until = now() + :lease, updated_at = now()
 WHERE id = (SELECT id FROM jobs
              WHERE status = 'pending' OR (status = 'running' AND lease_until < now())
              ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, owner, epoch, lease_until, attempts, payload`},
	{"claim, leases alone", sandbox.Claim, `UPDATE jobs SET status = 'running', owner = :owner, lease_until = now() + :lease::interval
 WHERE id = (SELECT id FROM jobs WHERE status = 'pending' OR lease_until < now() ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, owner, epoch, lease_until`},
	{"complete, fenced", sandbox.Complete, `UPDATE jobs SET status = 'done', result = :result, lease_until = NULL, updated_at = now()
 WHERE id = :id AND status = 'running' AND owner = :owner AND epoch = :epoch`},
	{"complete, a compare-and-set that locks first", sandbox.Complete, `WITH seen AS (
  SELECT status AS row_status, owner AS row_owner, epoch AS row_epoch FROM jobs WHERE id = :id FOR UPDATE
), done AS (
  UPDATE jobs SET status = 'done', result = :result::jsonb, lease_until = NULL, updated_at = now()
    FROM seen WHERE id = :id AND status = 'running' AND owner = :owner AND epoch = :epoch
  RETURNING epoch AS new_epoch
)
SELECT new_epoch FROM done`},
	{"complete, leases alone", sandbox.Complete, `UPDATE jobs SET status = 'done', result = :result WHERE id = :id`},
	{"fail, fenced", sandbox.Fail, `UPDATE jobs
   SET status = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END,
       error = :error, lease_until = NULL, updated_at = now()
 WHERE id = :id AND status = 'running' AND owner = :owner AND epoch = :epoch`},
	{"fail, leases alone", sandbox.Fail, `UPDATE jobs SET status = 'failed', error = :error WHERE id = :id`},
	{"receiver, newest epoch", sandbox.Receiver, `INSERT INTO deliveries AS held (job_id, epoch, owner, payload)
VALUES (:job_id, :epoch, :owner, :body)
ON CONFLICT (job_id) DO UPDATE
   SET epoch = EXCLUDED.epoch, owner = EXCLUDED.owner, payload = EXCLUDED.payload,
       prev_epoch = held.epoch, prev_owner = held.owner, accepted = held.accepted + 1, updated_at = now()
 WHERE held.epoch <= EXCLUDED.epoch
RETURNING epoch, prev_epoch`},
	{"receiver, leases alone", sandbox.Receiver, `INSERT INTO deliveries (job_id, epoch, owner, payload) VALUES (:job_id, :epoch, :owner, :body)
ON CONFLICT (job_id) DO UPDATE SET epoch = EXCLUDED.epoch, owner = EXCLUDED.owner, payload = EXCLUDED.payload`},
}

func TestCheck_FairStatementsPassAndRunAsTheRole(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	ctx := context.Background()
	checked := map[string]*sandbox.Vetted{}
	for _, f := range fair {
		c, err := r.role.Vet(ctx, f.kind, f.sql)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		checked[f.name] = c
	}
	if got := checked["claim, fenced"].Params; !slices.Equal(got, []string{"owner", "lease"}) {
		t.Errorf("claim's parameters %v", got)
	}
	if _, err := r.pool.Exec(ctx, "INSERT INTO "+r.schemas.Jobs+".jobs (payload) VALUES ('{}')"); err != nil {
		t.Fatal(err)
	}
	conn := mustConn(t, r)
	claim, err := sandbox.Exec(ctx, conn, checked["claim, fenced"], map[string]any{"owner": "A", "lease": 30 * time.Second})
	if err != nil || len(claim.Rows) != 1 {
		t.Fatalf("claim: %v %v", claim, err)
	}
	id, epoch := claim.Rows[0][0].(int64), claim.Rows[0][2].(int64)
	if epoch != 1 || claim.Rows[0][1] != "A" {
		t.Fatalf("claim returned %v", claim.Rows[0])
	}
	for _, name := range []string{"complete, fenced", "complete, a compare-and-set that locks first"} {
		late, err := sandbox.Exec(ctx, conn, checked[name], map[string]any{"id": id, "owner": "A", "epoch": epoch - 1, "result": `{"by":"zombie"}`})
		if err != nil || late.Landed() {
			t.Fatalf("%s, with an old epoch: %v %v, want fenced", name, late, err)
		}
	}
	done, err := sandbox.Exec(ctx, conn, checked["complete, a compare-and-set that locks first"], map[string]any{"id": id, "owner": "A", "epoch": epoch, "result": `{"by":"A"}`})
	if err != nil || !done.Landed() || done.Rows[0][0] != int64(1) {
		t.Fatalf("complete: %v %v", done, err)
	}
	for _, e := range []int64{2, 1} {
		d, err := sandbox.Exec(ctx, conn, checked["receiver, newest epoch"], map[string]any{"job_id": id, "epoch": e, "owner": "A", "body": `{}`})
		if err != nil || d.Landed() != (e == 2) {
			t.Fatalf("deliver epoch %d: %v %v", e, d, err)
		}
	}
	// The history trigger recorded the role's writes in a table the role
	// cannot touch.
	var ops string
	if err := r.pool.QueryRow(ctx, "SELECT string_agg(op, ',' ORDER BY seq) FROM "+r.schemas.Jobs+".job_history").Scan(&ops); err != nil {
		t.Fatal(err)
	}
	if ops != "insert,claim,complete" {
		t.Errorf("history %q, want insert,claim,complete", ops)
	}
}

// TestRole_RightsAreTheRunsSchemaAlone asks Postgres what the role may do.
func TestRole_RightsAreTheRunsSchemaAlone(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	other := newRun(t)
	ctx := context.Background()
	name := r.role.Name()
	var usage, create []string
	rows, err := r.pool.Query(ctx, `SELECT nspname, has_schema_privilege($1, oid, 'USAGE'), has_schema_privilege($1, oid, 'CREATE')
 FROM pg_namespace WHERE nspname NOT LIKE 'pg\_toast%' AND nspname NOT LIKE 'pg\_temp%' ORDER BY 1`, name)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		var u, c bool
		if err := rows.Scan(&n, &u, &c); err != nil {
			t.Fatal(err)
		}
		if u {
			usage = append(usage, n)
		}
		if c {
			create = append(create, n)
		}
	}
	rows.Close()
	// public's USAGE is PUBLIC's, which no role can be denied alone; no table there is the role's.
	want := []string{"information_schema", "pg_catalog", "public", r.schemas.Jobs, r.schemas.Receiver}
	slices.Sort(want)
	if !slices.Equal(usage, want) {
		t.Errorf("the role may use schemas %v, want %v", usage, want)
	}
	if len(create) > 0 {
		t.Errorf("the role may create in %v", create)
	}
	for _, s := range []string{other.schemas.Jobs, other.schemas.Receiver} {
		if slices.Contains(usage, s) {
			t.Errorf("the role may use another run's schema %s", s)
		}
	}
	var grantList []string
	if err := r.pool.QueryRow(ctx, `SELECT array_agg(table_schema || '.' || table_name || ':' || privilege_type)
 FROM information_schema.role_table_grants WHERE grantee = $1`, name).Scan(&grantList); err != nil {
		t.Fatal(err)
	}
	slices.Sort(grantList)
	grants := strings.Join(grantList, " ")
	wantList := []string{
		r.schemas.Receiver + ".deliveries:INSERT", r.schemas.Receiver + ".deliveries:SELECT", r.schemas.Receiver + ".deliveries:UPDATE",
		r.schemas.Jobs + ".jobs:SELECT", r.schemas.Jobs + ".jobs:UPDATE"}
	slices.Sort(wantList)
	wantGrants := strings.Join(wantList, " ")
	if grants != wantGrants {
		t.Errorf("the role's table rights:\n %s\nwant\n %s", grants, wantGrants)
	}
	var temp, super, inherit, createRole, createDB bool
	if err := r.pool.QueryRow(ctx, `SELECT has_database_privilege($1, current_database(), 'TEMPORARY'), rolsuper, rolinherit, rolcreaterole, rolcreatedb
 FROM pg_roles WHERE rolname = $1`, name).Scan(&temp, &super, &inherit, &createRole, &createDB); err != nil {
		t.Fatal(err)
	}
	if temp || super || inherit || createRole || createDB {
		t.Errorf("the role: temp %v, superuser %v, inherits %v, createrole %v, createdb %v; want none", temp, super, inherit, createRole, createDB)
	}
	var settings string
	if err := r.pool.QueryRow(ctx, `SELECT array_to_string(s.setconfig, ' ') FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole WHERE r.rolname = $1`, name).Scan(&settings); err != nil {
		t.Fatal(err)
	}
	for _, st := range sandbox.Settings {
		if !strings.Contains(settings, st.Name+"="+st.Value) {
			t.Errorf("the role's settings %q lack %s=%s", settings, st.Name, st.Value)
		}
	}
	if !strings.Contains(settings, "search_path="+r.schemas.Jobs+", "+r.schemas.Receiver) {
		t.Errorf("the role's settings %q lack its search_path", settings)
	}
}

func TestRole_DropLeavesNoRoleAndEndsItsSessions(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	ctx := context.Background()
	conn := mustConn(t, r)
	c, err := r.role.Vet(ctx, sandbox.Complete, "UPDATE jobs SET error = "+burn+" WHERE id = :id")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.pool.Exec(ctx, "INSERT INTO "+r.schemas.Jobs+".jobs (payload) VALUES ('{}')"); err != nil {
		t.Fatal(err)
	}
	running := make(chan error, 1)
	go func() {
		_, err := sandbox.Exec(ctx, conn, c, map[string]any{"id": 1})
		running <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var active int
		if err := r.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND state = 'active'", r.role.Name()).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if active > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the role's statement never started")
		}
	}
	if err := r.role.Drop(ctx, r.pool); err != nil {
		t.Fatal(err)
	}
	if err := <-running; err == nil {
		t.Error("the role's statement finished although its role was dropped")
	}
	left, err := sandbox.ListRoles(ctx, r.pool, r.schemas.Jobs)
	if err != nil || len(left) > 0 {
		t.Errorf("roles left: %v %v", left, err)
	}
	var n int
	if err := r.pool.QueryRow(ctx, "SELECT count(*) FROM pg_roles WHERE rolname = $1", r.role.Name()).Scan(&n); err != nil || n != 0 {
		t.Errorf("the role is still there (%d, %v)", n, err)
	}
	if err := r.role.Drop(ctx, r.pool); err != nil {
		t.Errorf("a second drop: %v", err)
	}
}

func TestRole_ListRolesFindsThemByPrefix(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	got, err := sandbox.ListRoles(context.Background(), r.pool, r.schemas.Jobs[:10])
	if err != nil || !slices.Contains(got, r.role.Name()) {
		t.Fatalf("ListRoles: %v %v, want %s among them", got, err, r.role.Name())
	}
}

func TestCheck_SixAtOnce(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := fair[i%len(fair)]
			if _, err := r.role.Vet(context.Background(), f.kind, f.sql); err != nil {
				errs <- err
			}
			if _, err := r.role.Vet(context.Background(), sandbox.Complete, "UPDATE jobs SET error = pg_read_file('/etc/passwd') WHERE id = :id"); !errors.Is(err, sandbox.ErrRefused) {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

var _ = os.Getenv

func TestRole_PasswordIsShownNowhere(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	pw := r.role.ConnConfig().Password
	if len(pw) < 40 {
		t.Fatalf("password %d characters long", len(pw))
	}
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("made", "role", r.role)
	var settings string
	if err := r.pool.QueryRow(context.Background(), "SELECT rolpassword FROM pg_authid WHERE rolname = $1", r.role.Name()).Scan(&settings); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprint(r.role), fmt.Sprintf("%v %+v %#v %s", r.role, r.role, r.role, r.role), logged.String(), settings} {
		if strings.Contains(s, pw) {
			t.Errorf("the password shows in %q", s)
		}
	}
	if !strings.HasPrefix(settings, "SCRAM-SHA-256$4096:") {
		t.Errorf("Postgres holds %.20q…, want a SCRAM verifier", settings)
	}
}
