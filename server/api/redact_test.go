package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/postgres/pgcluster"
	"github.com/fencelab/fencelab/server/servertest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestLog_NoLineSaysWhereTheDatabaseIs: a server on a private cluster of
// its own logs, at info level, its start and every /readyz (and
// /api/stats) of an outage, and no line — nor any answer — names the
// cluster's folder, its socket or a connection string.
func TestLog_NoLineSaysWhereTheDatabaseIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl, err := pgcluster.Start(ctx, pgcluster.Options{MaxConnections: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Stop() })
	pool, err := pgxpool.New(ctx, cl.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var logged servertest.LogBuffer
	ts := startServer(t, func(c *api.Config) {
		c.Pool, c.DatabaseURL = pool, cl.DSN()
		c.Log = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	s := ts.newSession()
	s.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":2000}`)

	down := make(chan error, 1)
	go func() { down <- cl.Restart(ctx, 4*time.Second) }()
	var answers []string
	saw503 := false
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline) && !saw503; {
		for _, p := range []string{"/readyz", "/api/stats"} {
			resp, err := http.Get(ts.base + p)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers = append(answers, string(b))
			saw503 = saw503 || p == "/readyz" && resp.StatusCode == http.StatusServiceUnavailable
		}
		time.Sleep(100 * time.Millisecond)
	}
	for range 3 { // and a few more while it is down
		resp, err := http.Get(ts.base + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers = append(answers, string(b))
		}
	}
	if err := <-down; err != nil {
		t.Fatal(err)
	}
	if !saw503 {
		t.Fatal("/readyz never said the database was down during its restart")
	}
	log := logged.String()
	if !strings.Contains(log, "readyz: the database does not answer") {
		t.Fatalf("the outage is not in the log:\n%s", log)
	}
	for _, where := range []string{"/tmp/fencelab-pg", "fencelab-pg-", cl.Dir(), "host=", ".s.PGSQL", "postgres://"} {
		if strings.Contains(log, where) {
			for _, line := range strings.Split(log, "\n") {
				if strings.Contains(line, where) {
					t.Errorf("a log line says %q: %s", where, line)
					break
				}
			}
		}
		for _, a := range answers {
			if strings.Contains(a, where) {
				t.Errorf("an answer says %q: %s", where, a)
			}
		}
	}
	// The scrubber keeps the rest of a line as it is.
	if got := api.Redact("dial unix " + cl.Dir() + "/sock/.s.PGSQL.5432: connect: refused; see http://127.0.0.1:8080/readyz"); strings.Contains(got, "fencelab-pg") || !strings.Contains(got, "connect: refused; see http://127.0.0.1:8080/readyz") {
		t.Errorf("Redact: %q", got)
	}
}
