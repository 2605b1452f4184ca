package playground_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

// The playground's package holds the hooks alone: what breaks a guard,
// gives a worker its own clock, traces statements, puts a rule in the
// receiver's place, and what it reads of a queue beyond its API. What the
// server needs beside the engine that is no hook (schema locks and drops,
// error translation, input errors) is the engine's own API or the
// server's; a name added here is added to this list on purpose.
func TestPlayground_HoldsHooksOnly(t *testing.T) {
	hooks := []string{
		"AllGuards", "Broken", "Claimable", "DBClock", "EpochCheck", "EpochIncrement", "Expired",
		"Guard", "Guards", "NewQueue", "NewReceiver", "OwnerCheck", "ParseBroken", "ParseGuard",
		"QueueHooks", "ReceiverBroken", "ReceiverCheck", "ReceiverHooks", "Rule", "SkipLocked",
		"Statement", "StatusCheck", "Trace", "WithTrace",
	}
	for _, name := range exported(t, ".") {
		if !slices.Contains(hooks, name) {
			t.Errorf("engine/playground exports %s, which is not a hook", name)
		}
	}
}

// The bridge between the engine and the playground is typed: no function
// in engine/internal/hook takes or returns any (it took the queue as any
// and asserted its type at run time), so the compiler checks every use.
// (A format's variadic arguments are not the bridge.)
func TestBridge_NoAny(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, "../internal/hook", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		ast.Inspect(p, func(n ast.Node) bool {
			ft, ok := n.(*ast.FuncType)
			if !ok {
				return true
			}
			for _, fl := range []*ast.FieldList{ft.Params, ft.Results} {
				if fl == nil {
					continue
				}
				for _, f := range fl.List {
					if isAny(f.Type) {
						t.Errorf("%s: a function of the hook bridge takes or returns any", fset.Position(f.Pos()))
					}
				}
			}
			return true
		})
	}
}

func isAny(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "any"
	case *ast.InterfaceType:
		return e.Methods == nil || len(e.Methods.List) == 0
	case *ast.ArrayType:
		return isAny(e.Elt)
	}
	return false
}

// exported lists the exported top-level names of the package in dir.
func exported(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil && d.Name.IsExported() {
						names = append(names, d.Name.Name)
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() {
								names = append(names, s.Name.Name)
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() {
									names = append(names, n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	return names
}
