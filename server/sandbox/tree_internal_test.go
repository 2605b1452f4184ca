package sandbox

import (
	"strings"
	"testing"
)

// TestCheckTree_TheSecondLinesHold: clauses of the allow-list that a
// statement cannot reach past the first keyword and the node kinds —
// a MERGE, a utility statement, a FROM item of another kind, an ORDER BY
// with an operator off the list — still refuse, on trees made by hand.
func TestCheckTree_TheSecondLinesHold(t *testing.T) {
	al := &allowList{types: map[uint32]bool{20: true}, funcs: map[uint32]bool{}, ops: map[uint32]bool{410: true},
		tables: map[uint32]write{16386: {Schema: "j", Table: "jobs"}}}
	jobs := `:rtable ({RANGETBLENTRY :rtekind 0 :relid 16386})`
	for _, c := range []struct{ name, tree, refused string }{
		{"a MERGE", `{QUERY :commandType 5 :utilityStmt <> ` + jobs + ` :resultRelation 1}`, "other than UPDATE"},
		{"a utility statement", `{QUERY :commandType 1 :utilityStmt {QUERY :commandType 1 :utilityStmt <>} :rtable <>}`, "utility"},
		{"a FROM item of another kind", `{QUERY :commandType 1 :utilityStmt <> :rtable ({RANGETBLENTRY :rtekind 7 :relid 0})}`, "FROM item"},
		{"an ORDER BY off the list", `{QUERY :commandType 1 :utilityStmt <> :rtable <> :sortClause ({SORTGROUPCLAUSE :eqop 410 :sortop 99999})}`, "operator"},
		{"a write outside the range table", `{QUERY :commandType 2 :utilityStmt <> ` + jobs + ` :resultRelation 2}`, "cannot read"},
	} {
		tree, err := parseTree(c.tree)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_, bad := al.vetTree([]*tnode{tree})
		if bad == nil || !strings.Contains(bad.words+bad.what, c.refused) {
			t.Errorf("%s: %+v, want refused for %q", c.name, bad, c.refused)
		}
	}
	ok, _ := parseTree(`{QUERY :commandType 2 :utilityStmt <> ` + jobs + ` :resultRelation 1 :sortClause ({SORTGROUPCLAUSE :eqop 410 :sortop 410})}`)
	if ws, bad := al.vetTree([]*tnode{ok}); bad != nil || len(ws) != 1 || ws[0].Table != "jobs" || ws[0].Op != "Update" {
		t.Errorf("an update of jobs: %v %+v", ws, bad)
	}
}
