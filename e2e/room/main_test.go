// Package room holds the browser tests of the page as a room and a blog use
// it: the guided lesson to its last chapter, present mode, a student
// watching, the embed on another origin and at phone width, sharing,
// permalinks, exports, a busy server. The harness is e2e/e2etest; see the
// package doc of e2e.
package room

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
