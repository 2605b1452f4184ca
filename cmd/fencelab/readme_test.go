package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// layoutRoom is a layout table row's first cell: one room, as `path/`.
var layoutRoom = regexp.MustCompile("^\\| `([a-z0-9_/]+)/`")

// TestREADME_Layout keeps the README's layout section true to the code:
// every package of `go list ./...` is a row of its table, every row is a
// package, and the imports of each package's own
// code (not its tests') point only down the table, to rows below its own.
func TestREADME_Layout(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no \"## Layout\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := map[string]int{} // room → its row, counted from the top
	for line := range strings.SplitSeq(section, "\n") {
		m := layoutRoom.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, dup := row[m[1]]; dup {
			t.Errorf("README.md's layout lists %s twice", m[1])
		}
		row[m[1]] = len(row)
	}
	if len(row) == 0 {
		t.Fatal("README.md's layout section has no table of rooms (rows starting | `path/`)")
	}

	const module = "github.com/fencelab/fencelab/"
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	imports := map[string][]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		for _, im := range fields[1:] {
			if own, ok := strings.CutPrefix(im, module); ok {
				imports[pkg] = append(imports[pkg], own)
			}
		}
		if _, ok := imports[pkg]; !ok {
			imports[pkg] = nil
		}
	}

	for pkg := range imports {
		if _, ok := row[pkg]; !ok {
			t.Errorf("README.md's layout has no row for %s/: add it, with what it owns, below every room that imports it", pkg)
		}
	}
	for room := range row {
		if _, ok := imports[room]; !ok {
			t.Errorf("README.md's layout lists %s/, which is no package of go list ./...", room)
		}
	}
	for pkg, ims := range imports {
		if _, ok := row[pkg]; !ok {
			continue
		}
		for _, im := range ims {
			if r, ok := row[im]; ok && r <= row[pkg] {
				t.Errorf("%s imports %s, which README.md's layout lists above it: the imports point down the table", pkg, im)
			}
		}
	}
}
