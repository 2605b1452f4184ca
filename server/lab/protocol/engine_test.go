package protocol

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/engine"
)

// Every status, decision and fence reason the engine declares has its
// name in the protocol, read from the engine's source: a value the engine
// adds is not sent as "" until the seam names it. Today each is sent
// under the engine's own spelling, so the page's JSON is what it was.
func TestSeam_EveryEngineValueHasItsName(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, "../../../engine", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, p := range pkgs {
		if strings.HasSuffix(p.Name, "_test") {
			continue
		}
		for _, f := range p.Files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, s := range g.Specs {
					v := s.(*ast.ValueSpec)
					typ, ok := v.Type.(*ast.Ident)
					if !ok || len(v.Values) != len(v.Names) {
						continue
					}
					for i, n := range v.Names {
						lit, ok := v.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						val := strings.Trim(lit.Value, "\"`")
						var got string
						switch typ.Name {
						case "Status":
							got = string(StatusOf(engine.Status(val)))
						case "Decision":
							got = string(DecisionOf(engine.Decision(val)))
						case "FenceReason":
							got = string(FenceReasonsOf([]engine.FenceReason{engine.FenceReason(val)})[0])
						default:
							continue
						}
						seen[typ.Name]++
						if got != val {
							t.Errorf("engine.%s (%s %q) is %q in the protocol, want %q", n.Name, typ.Name, val, got, val)
						}
					}
				}
			}
		}
	}
	if seen["Status"] != 4 || seen["Decision"] != 6 || seen["FenceReason"] != 3 {
		t.Errorf("read from the engine's source: %v, want 4 statuses, 6 decisions, 3 reasons", seen)
	}
}
