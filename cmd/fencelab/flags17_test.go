package main

import (
	"strings"
	"testing"
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
