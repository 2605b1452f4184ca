package templates

import (
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestTemplates_TakeViewModels: no template, nor its data, imports the lab:
// the page's words and choices come in the view model web builds, so a
// template can render them but never decide one.
func TestTemplates_TakeViewModels(t *testing.T) {
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := f.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range parsed.Imports {
			if p := strings.Trim(im.Path.Value, `"`); strings.HasPrefix(p, "github.com/fencelab/fencelab/") && p != "github.com/fencelab/fencelab/engine" {
				t.Errorf("%s imports %s: templates take view models and engine types only", name, p)
			}
		}
	}
}
