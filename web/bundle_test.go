package web

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/static"
)

// TestBundle_DeclaresEveryNameItsModulesImport: the offline replay's one
// script declares every name its modules import from each other, so that
// a module added beneath replay.js (dom.js was, and the export's replay
// threw "byTest is not defined") comes along; and it keeps no import.
func TestBundle_DeclaresEveryNameItsModulesImport(t *testing.T) {
	js, err := bundle()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(js, "\nimport ") {
		t.Error("the bundle keeps an import line")
	}
	names := regexp.MustCompile(`^import \{([^}]*)\} from`)
	checked := 0
	err = fs.WalkDir(static.FS, "js", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		src, _ := fs.ReadFile(static.FS, p)
		if first, _, _ := strings.Cut(string(src), "\n"); !strings.Contains(js, first+"\n") {
			return nil // not in the replay's bundle (each module's first line is its name's comment)
		}
		for _, line := range strings.Split(string(src), "\n") {
			m := names.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			for _, n := range strings.Split(m[1], ",") {
				n = strings.TrimSpace(strings.Split(strings.TrimSpace(n), " as ")[0])
				decl := regexp.MustCompile(`(?m)^(const|let|function|class|async function) ` + regexp.QuoteMeta(n) + `\b`)
				if !decl.MatchString(js) {
					t.Errorf("%s imports %s, which the bundle does not declare", p, n)
				}
				checked++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("only %d imported names checked: the test reads the modules wrong", checked)
	}
}
