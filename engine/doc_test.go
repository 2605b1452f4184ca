package engine_test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
)

// TestDoc_TheQueueAlone: what a Go developer reads of the engine (go doc
// -all ./engine, everything exported and the package's doc) names the
// queue, its guards and its rules, and nothing of the playground built on
// it: no way to break a guard, no hook, no scenario, verdict or lesson.
func TestDoc_TheQueueAlone(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goTool, "doc", "-all", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go doc -all: %v\n%s", err, out)
	}
	if len(out) < 10_000 {
		t.Fatalf("go doc -all said %d bytes: not the engine's doc", len(out))
	}
	playground := regexp.MustCompile(`(?i)\b(playground|engine/playground|internal/hook|hooks?|broken|break(s|ing)?|server/lab|scenarios?|verdicts?|lessons?|page|readers?|sessions?|timeline)\b`)
	for _, m := range playground.FindAllIndex(out, -1) {
		from, to := max(0, m[0]-80), min(len(out), m[1]+80)
		t.Errorf("go doc ./engine names %q: …%s…", out[m[0]:m[1]], out[from:to])
	}
}
