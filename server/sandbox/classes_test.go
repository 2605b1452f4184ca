package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/class"
)

// TestRole_CannotReadTheClasses: a reader's role reaches neither the
// classes' tables (their students, tokens' hashes and checks, other
// students' statements among them) nor the line their checks wait in,
// made as the server makes them (class.Open, Store.OpenLine), on the
// database a server hardened.
func TestRole_CannotReadTheClasses(t *testing.T) {
	t.Parallel()
	r := newRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := class.Open(ctx, class.Config{Pool: r.pool})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.OpenLine(ctx, class.LineConfig{Owner: engine.UniqueOwner("test"), Play: func(context.Context, class.Turn) (class.Played, error) {
		return class.Played{}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	conn := mustConn(t, r)
	for _, sql := range []string{
		"SELECT * FROM fencelab_classes.classes",
		"SELECT * FROM fencelab_classes.students",
		"SELECT * FROM fencelab_classes.checks",
		"SELECT * FROM fencelab_checkline.jobs",
		"UPDATE fencelab_checkline.jobs SET payload = '{}'",
		"SELECT query_to_xml('SELECT * FROM fencelab_classes.checks', true, true, '')",
	} {
		if _, err := conn.Exec(ctx, sql); err == nil {
			t.Errorf("as the role, %q ran", sql)
		}
	}
}
