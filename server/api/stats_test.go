package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// stats reads GET /api/stats as a map, so a missing or extra field shows.
func (ts *testServer) stats(tb testing.TB) (map[string]any, string) {
	tb.Helper()
	a := ts.do("GET", "/api/stats", "", "", "")
	if a.Status != http.StatusOK {
		tb.Fatalf("GET /api/stats: %d %s", a.Status, a.Body)
	}
	if ct := a.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		tb.Errorf("GET /api/stats: Content-Type %q", ct)
	}
	var m map[string]any
	a.json(tb, &m)
	return m, string(a.Body)
}

// TestStats_CountsAndNothingElse: /api/stats has exactly its eight counts,
// each a number; memory, connections and goroutines are never zero on a
// live server; sessions and runs follow what the server holds; and the
// body names no connection string, socket path, user or database.
func TestStats_CountsAndNothingElse(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	want := []string{"db_connections", "goroutines", "loads", "prestarted", "rss_bytes", "runs", "sessions", "spare_runs", "workers"}

	m, body := ts.stats(t)
	var keys []string
	for k, v := range m {
		keys = append(keys, k)
		if _, ok := v.(float64); !ok {
			t.Errorf("%s = %v (%T), want a number", k, v, v)
		}
	}
	slices.Sort(keys)
	if !slices.Equal(keys, want) {
		t.Errorf("fields %v, want exactly %v\n%s", keys, want, body)
	}
	for _, k := range []string{"rss_bytes", "db_connections", "goroutines"} {
		if n, _ := m[k].(float64); n <= 0 {
			t.Errorf("%s = %v, want more than 0\n%s", k, m[k], body)
		}
	}
	// More than a few MiB: a count in kB or pages would be far less.
	if n, _ := m["rss_bytes"].(float64); n < 4<<20 {
		t.Errorf("rss_bytes = %v: not the server's resident bytes", n)
	}
	if m["sessions"] != 0.0 || m["runs"] != 0.0 {
		t.Errorf("a new server has sessions=%v runs=%v, want 0 and 0", m["sessions"], m["runs"])
	}

	// A session with a run in step mode holds its run slot until it ends,
	// and its workers' connections to the database.
	s := ts.newSession()
	s.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":1000}`)
	m, body = ts.stats(t)
	if m["sessions"] != 1.0 || m["runs"] != 1.0 {
		t.Errorf("with one session running one run: sessions=%v runs=%v\n%s", m["sessions"], m["runs"], body)
	}
	// The workers, the run's listener and the pool: Postgres counts each.
	if n, _ := m["db_connections"].(float64); n < 3 {
		t.Errorf("db_connections = %v during a run, want at least 3 (the pool's, the instance lock's, the workers')", n)
	}
	s.cmd(`{"action":"reset"}`)
	deadline := time.Now().Add(10 * time.Second)
	for m["runs"] != 0.0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		m, body = ts.stats(t)
	}
	if m["runs"] != 0.0 {
		t.Errorf("runs = %v after the reset, want 0", m["runs"])
	}

	// Nothing about where the database is or who connects to it.
	dsn := pgtest.DSN(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{"the DSN": dsn, "the host or socket path": cfg.Host, "the user": cfg.User,
		"the database": cfg.Database, "the password": cfg.Password} {
		if s != "" && strings.Contains(body, s) {
			t.Errorf("the body carries %s (%q):\n%s", what, s, body)
		}
	}
	for _, s := range []string{"postgres://", "postgresql://", "host=", "/tmp", ".s.PGSQL"} {
		if strings.Contains(body, s) {
			t.Errorf("the body carries %q:\n%s", s, body)
		}
	}
}
