package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
)

// TestMigrateCmd_UpDownStatusAndRefusals drives `fencelab migrate` as a
// deploy step would: up to the latest, down a step, the status, and bad
// input that exits 2 and changes nothing.
func TestMigrateCmd_UpDownStatusAndRefusals(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	latest, beyond := engine.LatestVersion, strconv.Itoa(engine.LatestVersion+1)
	steps := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"--schema", schema, "--status"}, 0, fmt.Sprintf("version 0 (this fencelab's latest: %d)", latest)},
		{[]string{"--schema", schema}, 0, fmt.Sprintf("version 0 → %d", latest)},
		{[]string{"--schema", schema}, 0, fmt.Sprintf("at version %d already; nothing to do", latest)},
		{[]string{"--schema", schema, "--to", "1"}, 0, fmt.Sprintf("version %d → 1", latest)},
		{[]string{"--schema", schema, "--status"}, 0, fmt.Sprintf("version 1 (this fencelab's latest: %d)", latest)},
		{[]string{"--schema", schema, "--to", beyond}, 2, fmt.Sprintf("--to %s: this fencelab knows versions 0 to %d", beyond, latest)},
		{[]string{"--schema", schema, "--to", "-1"}, 2, "--to -1"},
		{[]string{"--schema", "Bad-Name"}, 2, "--schema: schema name"},
		{[]string{}, 2, "--schema is required"},
		{[]string{"--schema", schema, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--schema", schema, "--to", "99999999999999999999"}, 2, "value out of range"},
		{[]string{"--schema", schema, "--status"}, 0, fmt.Sprintf("version 1 (this fencelab's latest: %d)", latest)},
	}
	for _, s := range steps {
		stdout, stderr, code := fencelab(t, nil, append([]string{"migrate"}, s.args...)...)
		if code != s.code || !strings.Contains(stdout+stderr, s.out) {
			t.Errorf("fencelab migrate %s: exit %d, %q %q; want exit %d and %q", strings.Join(s.args, " "), code, stdout, stderr, s.code, s.out)
		}
	}
	_, stderr, code := fencelab(t, []string{"DATABASE_URL="}, "migrate", "--schema", schema)
	if code != 2 || !strings.Contains(stderr, "set DATABASE_URL") {
		t.Errorf("without DATABASE_URL: exit %d, %q", code, stderr)
	}
}
