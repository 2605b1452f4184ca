package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/api"
)

// TestServe_MaxSocketsPerClientIsChecked: --max-sockets-per-client is a
// flag of serve, and a value that is no cap is one line and exit 2.
func TestServe_MaxSocketsPerClientIsChecked(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0", "-3", "100001"} {
		_, stderr, code := fencelab(t, nil, "serve", "--addr", "127.0.0.1:0", "--max-sockets-per-client", v)
		if code != 2 || !strings.Contains(stderr, "--max-sockets-per-client "+v+" must be between 1 and 100000") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("--max-sockets-per-client %s: exit %d, %q", v, code, stderr)
		}
	}
}

// TestServe_PrestartedWorkersIsChecked: a count of prestarted workers
// out of bounds, or no number, is one line and exit 2.
func TestServe_PrestartedWorkersIsChecked(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]string{"-2": "--prestarted-workers -2 must be between 0 and 2000", "2001": "--prestarted-workers 2001 must be between 0 and 2000",
		"99999999999999999999": "prestarted-workers", "x": "prestarted-workers"} {
		_, stderr, code := fencelab(t, nil, "serve", "--addr", "127.0.0.1:0", "--prestarted-workers", v)
		if code != 2 || !strings.Contains(stderr, want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("--prestarted-workers %s: exit %d, %q", v, code, stderr)
		}
	}
}

// TestOpenDB_AClusterOfItsOwnIsNotLoggedWhere: starting a private cluster
// logs, at info level, that it is ready, but not its folder, its socket
// nor its connection string; nor does the serve log's wrapper let them by.
func TestOpenDB_AClusterOfItsOwnIsNotLoggedWhere(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return ""
		}
		return os.Getenv(k)
	}
	dsn, _, closeDB, err := openDBSized(context.Background(), getenv, log, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	closeDB()
	wrapped := slog.New(api.RedactHandler(slog.NewTextHandler(&buf, nil), getenv("DATABASE_URL")))
	wrapped.Warn("could not connect", "err", errors.New("failed to connect to `"+dsn+"`: dial unix: no such file"))
	out := buf.String()
	if !strings.Contains(out, "pgcluster: PostgreSQL") {
		t.Fatalf("the cluster's start is not logged:\n%s", out)
	}
	for _, where := range []string{"/tmp/fencelab-pg", "fencelab-pg-", "host=", ".s.PGSQL"} {
		if strings.Contains(out, where) {
			t.Errorf("the log says %q:\n%s", where, out)
		}
	}
}
