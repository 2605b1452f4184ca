// Package engines runs the core of the page (the Predict reveal, both
// orderings to their verdicts, Build it, the embed on another origin at
// phone width, present mode) in Chromium, WebKit (WebKitWebDriver) and
// Firefox ESR (WebDriver BiDi). The harness is e2e/e2etest; see the
// package doc of e2e.
package engines

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
