package servertest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// DocumentedRoutes reads the routes that REFERENCE.md's API table names,
// as echo spells them ("GET /api/sessions/:id"): each `METHOD /path` in a
// row's first cell, {name} as :name, a trailing … as *, a query ([?…] or
// ?…) left off, and `…/tail` as the cell's path before it with its last
// element replaced. A test holds them to the routes a server registers.
func DocumentedRoutes(tb testing.TB) map[string]bool {
	tb.Helper()
	section := ReferenceSection(tb, "### API")
	route := regexp.MustCompile("`(?:(GET|POST|PUT|PATCH|DELETE) (/[^` ]*)|…(/[^` ]*))`")
	out := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell, _, _ := strings.Cut(line[2:], " | ")
		method, last := "", ""
		for _, m := range route.FindAllStringSubmatch(cell, -1) {
			path := m[2]
			if m[1] != "" {
				method = m[1]
			} else {
				path = last[:strings.LastIndex(last, "/")] + m[3]
			}
			last = path
			out[method+" "+echoPath(path)] = true
		}
	}
	if len(out) == 0 {
		tb.Fatal("REFERENCE.md's API table names no route")
	}
	return out
}

var param = regexp.MustCompile(`\{([a-z_]+)\}`)

// echoPath spells a documented path as echo does.
func echoPath(p string) string {
	if i := strings.IndexAny(p, "[?"); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimSuffix(p, "…") + map[bool]string{true: "*"}[strings.HasSuffix(p, "…")]
	return param.ReplaceAllString(p, ":$1")
}

// ReferenceSection is the text of REFERENCE.md from the line that is
// heading to the next heading of level 3 or higher (### , ## , # ).
func ReferenceSection(tb testing.TB, heading string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(tb), "REFERENCE.md"))
	if err != nil {
		tb.Fatal(err)
	}
	text := "\n" + string(b)
	start := strings.Index(text, "\n"+heading+"\n")
	if start < 0 {
		tb.Fatalf("REFERENCE.md has no heading %q", heading)
	}
	section := text[start+1:]
	for _, h := range []string{"\n### ", "\n## ", "\n# "} {
		if end := strings.Index(section[len(heading):], h); end >= 0 {
			section = section[:end+len(heading)]
		}
	}
	return section
}

// repoRoot is the folder of the module's go.mod, above the test's own.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			tb.Fatal("no go.mod above " + dir)
		}
	}
}
