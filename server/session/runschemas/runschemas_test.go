package runschemas_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/session/runschemas"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A schema or role name says whose it is; a name of no server's is no
// one's.
func TestInstanceOf(t *testing.T) {
	for name, want := range map[string]string{
		"fl_ab12_1_2_j": "ab12", "fl_ab12_s3_r": "ab12", runschemas.Pair("cd34", "x").Jobs: "cd34",
		"fl_": "", "fl_ab12": "", "flx_ab12_1_j": "", "public": "", "fencelab_classes": "",
	} {
		if got := runschemas.InstanceOf(name); got != want {
			t.Errorf("InstanceOf(%q) = %q, want %q", name, got, want)
		}
	}
}

// Spares are made while the server is quiet, up to their number, not one
// more; a taken pair is made again; DropAll leaves none of them behind,
// nor the one being made when Fill was told to stop.
func TestSpares_MadeWhileQuietAndDroppedAll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := pgtest.Pool(t)
	instance := "sp" + pgtest.Schema(t)[2:8]
	count := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)", runschemas.Prefix+instance+"_").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	quiet := func() time.Duration { return 0 }
	s := runschemas.NewSpares(pool, instance, 3, quiet, slog.New(slog.DiscardHandler))
	fill, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Fill(fill) }()
	wait := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not in 30 s: %s", what)
			}
		}
	}
	wait("three pairs", func() bool { return s.Len() == 3 })
	time.Sleep(200 * time.Millisecond)
	if n := count(); n != 6 {
		t.Fatalf("%d schemas with three pairs made, want 6", n)
	}
	p, ok := s.Take()
	if !ok || runschemas.InstanceOf(p.Jobs) != instance {
		t.Fatalf("took %+v %v", p, ok)
	}
	wait("the pair made again", func() bool { return s.Len() == 3 })
	runschemas.Drop(pool, slog.New(slog.DiscardHandler), p)
	stop()
	<-done
	s.DropAll()
	if n := count(); n != 0 || s.Len() != 0 {
		t.Errorf("after DropAll: %d schemas, %d pairs, want none", n, s.Len())
	}
}

// A server that is never quiet makes no spare.
func TestSpares_NoneWhileBusy(t *testing.T) {
	pool := pgtest.Pool(t)
	s := runschemas.NewSpares(pool, "busy"+pgtest.Schema(t)[2:6], 2, func() time.Duration { return time.Hour }, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	s.Fill(ctx)
	if n := s.Len(); n != 0 {
		t.Errorf("%d spares made while busy", n)
	}
}
