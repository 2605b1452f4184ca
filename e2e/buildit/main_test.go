// Package buildit holds the browser tests of Build it and Check it: the
// reader's statements in the page's editors, a check's cases as they run,
// its verdict on every screen, in a link and after a reload. The harness
// is e2e/e2etest; see the package doc of e2e.
package buildit

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
