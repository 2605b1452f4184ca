// Package loadlab holds the browser test of the load lab: its chart and
// table against the checkers' own counts. The harness is e2e/e2etest; see
// the package doc of e2e.
package loadlab

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
