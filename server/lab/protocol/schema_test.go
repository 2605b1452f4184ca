package protocol_test

import (
	"bytes"
	"encoding"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// The JSON Schema of the event protocol is generated from the Go
// declarations (protocol.go and the types it uses) and committed as
// protocol.schema.json. This test fails when the two disagree; run it with
// FENCELAB_UPDATE_SCHEMA=1 to write the file anew.
func TestProtocolSchema_IsUpToDate(t *testing.T) {
	got := generateSchema(t)
	if os.Getenv("FENCELAB_UPDATE_SCHEMA") == "1" {
		if err := os.WriteFile("protocol.schema.json", got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(got, protocol.Schema) {
		t.Fatalf("protocol.schema.json is not what protocol.go declares: run FENCELAB_UPDATE_SCHEMA=1 go test ./server/lab/protocol -run TestProtocolSchema_IsUpToDate and commit it")
	}
}

// codes reads the values of every named string type declared as constants
// in the protocol, experiments, judge, engine and fault packages, from their source, so a new code is in
// the schema the moment it is declared.
func codes(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for pkg, dir := range map[string]string{"protocol": ".", "experiments": "../experiments", "judge": "../judge", "engine": "../../../engine", "fault": "../../fault"} {
		fset := token.NewFileSet()
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range af.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					id, ok := vs.Type.(*ast.Ident)
					if !ok || len(vs.Values) != len(vs.Names) {
						continue
					}
					for _, v := range vs.Values {
						if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							s, _ := strconv.Unquote(lit.Value)
							key := pkg + "." + id.Name
							out[key] = append(out[key], s)
						}
					}
				}
			}
		}
	}
	for k := range out {
		sort.Strings(out[k])
	}
	return out
}

type schemaGen struct {
	t     *testing.T
	codes map[string][]string
	defs  map[string]any
}

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage{})
	textType = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
)

func (g *schemaGen) typeName(t reflect.Type) string {
	pkg := filepath.Base(t.PkgPath())
	return pkg + "." + t.Name()
}

// of returns the schema of a Go type as encoding/json writes it.
func (g *schemaGen) of(t reflect.Type) map[string]any {
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == rawType:
		return map[string]any{}
	case t.Kind() == reflect.Pointer:
		s := g.of(t.Elem())
		return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
	case t == reflect.TypeOf(playground.Guard(0)):
		return map[string]any{"type": "string", "enum": guardNames()}
	case t.Implements(textType):
		return map[string]any{"type": "string"}
	}
	switch t.Kind() {
	case reflect.String:
		if t.Name() != "" && t.Name() != "string" {
			vals, ok := g.codes[g.typeName(t)]
			if !ok {
				g.t.Fatalf("no constants of %s: every code type of the protocol declares its values", g.typeName(t))
			}
			return map[string]any{"type": "string", "enum": vals}
		}
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint8, reflect.Uint16:
		return map[string]any{"type": "integer"}
	case reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		return map[string]any{"anyOf": []any{map[string]any{"type": "array", "items": g.of(t.Elem())}, map[string]any{"type": "null"}}}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.of(t.Elem())}
	case reflect.Struct:
		name := t.Name()
		if _, ok := g.defs[name]; !ok {
			g.defs[name] = nil // a placeholder against recursion
			g.defs[name] = g.object(t)
		}
		return map[string]any{"$ref": "#/$defs/" + name}
	}
	g.t.Fatalf("no schema for %s", t)
	return nil
}

// object is the schema of a struct: a property per exported field, the
// fields without omitempty required, no other properties.
func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				walk(f.Type)
				continue
			}
			if name == "" {
				name = f.Name
			}
			props[name] = g.of(f.Type)
			if !strings.Contains(opts, "omitempty") {
				required = append(required, name)
			}
		}
	}
	walk(t)
	sort.Strings(required)
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func guardNames() []string {
	var out []string
	for _, g := range playground.AllGuards() {
		out = append(out, g.String())
	}
	return out
}

func generateSchema(t *testing.T) []byte {
	g := &schemaGen{t: t, codes: codes(t), defs: map[string]any{}}
	ev := g.object(reflect.TypeOf(protocol.Event{}))
	props := ev["properties"].(map[string]any)
	props["v"] = map[string]any{"const": protocol.ProtocolVersion}
	props["kind"] = map[string]any{"type": "string", "enum": g.codes["protocol.Kind"]}
	// Each kind carries exactly its own payload, the field named like it.
	var rules []any
	for _, k := range protocol.Kinds() {
		others := map[string]any{}
		for _, o := range protocol.Kinds() {
			if o != k {
				others[string(o)] = false
			}
		}
		payload := props[string(k)].(map[string]any)["anyOf"].([]any)[0]
		rules = append(rules, map[string]any{
			"if":   map[string]any{"properties": map[string]any{"kind": map[string]any{"const": string(k)}}},
			"then": map[string]any{"required": []string{string(k)}, "properties": mergeProps(others, string(k), payload)},
		})
	}
	ev["allOf"] = rules
	schema := map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         "https://fencelab.dev/protocol.schema.json",
		"title":       "fencelab event",
		"description": "One event of a fencelab run, protocol version " + strconv.Itoa(protocol.ProtocolVersion) + ". Generated from server/lab/protocol/protocol.go by TestProtocolSchema_IsUpToDate; do not edit by hand. An event's text is narration for people: read the typed fields.",
	}
	for k, v := range ev {
		schema[k] = v
	}
	schema["$defs"] = g.defs
	b, err := json.MarshalIndent(schema, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func mergeProps(m map[string]any, k string, v any) map[string]any {
	out := map[string]any{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

// TestErrorCodes_AreOneClosedSet: every code of server/fault is an
// ErrorCode, in the same words, so a failure an event carries is always
// one of the schema's; and the code that names a requirement is that
// requirement's name.
func TestErrorCodes_AreOneClosedSet(t *testing.T) {
	c := codes(t)
	ours := map[string]bool{}
	for _, v := range c["protocol.ErrorCode"] {
		ours[v] = true
	}
	if len(c["fault.Code"]) == 0 {
		t.Fatal("no codes read from server/fault")
	}
	for _, v := range c["fault.Code"] {
		if !ours[v] {
			t.Errorf("fault's code %q is no protocol.ErrorCode: an event that carries it would break the schema", v)
		}
	}
	if string(protocol.ErrClaimExpired) != string(experiments.ReqTakesExpired) {
		t.Errorf("ErrClaimExpired is %q, the requirement it names %q", protocol.ErrClaimExpired, experiments.ReqTakesExpired)
	}
}
