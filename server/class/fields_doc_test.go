package class_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/class"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/servertest"
)

// TestFields_AsREFERENCESaysThem: every field the board and the hand-ins
// answer is in REFERENCE.md's tables of them, and every field those
// tables name is one they answer. The fields are read from the JSON
// itself (a board and a hand-in with every field set), so a field that
// a custom marshaller adds (class.code_shown) counts too.
func TestFields_AsREFERENCESaysThem(t *testing.T) {
	now, yes := time.Now(), true
	board := class.Board{Class: class.Class{ID: "c", Code: "ABC234", Ended: &now},
		Students: []class.Row{{ID: "s", Name: "Ada", Joined: now, Session: "x", Checks: 1, Checked: &now, Pass: &yes,
			Cases: []class.CaseMark{{Case: "new-owner-first", Mark: "as-correct", Run: "r1"}}, Requirement: "db-clock", Words: "w",
			Since: &now, FirstPassed: &now}},
		Now:     now,
		Summary: class.Summary{Requirements: []class.Named{{Requirement: "db-clock", Students: 1, Words: "w"}}}}
	sol := sandbox.Ours()
	handIns := []class.HandIn{{Student: "Ada", StudentID: "s", Checks: 1, Checked: &now, Pass: &yes, CasesPassed: 6, Cases: 6,
		Requirement: "db-clock", Words: "w", Since: &now, FirstPassed: &now, Solution: &sol,
		History: []class.Attempt{{At: now, Pass: true, Requirement: "db-clock"}}}}

	section := servertest.ReferenceSection(t, "#### The board and the hand-ins, field by field")
	tables := strings.SplitN(section, "handins.json", 2) // the board's table, then the hand-ins'
	if len(tables) != 2 {
		t.Fatal("REFERENCE.md's fields section has no hand-ins table")
	}
	for k, tc := range []struct {
		what string
		v    any
	}{{"the board", board}, {"a hand-in", handIns}} {
		b, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		walkFields(v, "", got)
		documented := documentedFields(tables[k])
		for f := range got {
			if !documented[f] {
				t.Errorf("%s has the field %s, which REFERENCE.md's table does not name", tc.what, f)
			}
		}
		for f := range documented {
			if !got[f] {
				t.Errorf("REFERENCE.md's table names %s of %s, which it does not have", f, tc.what)
			}
		}
	}
}

// walkFields collects the leaf fields of a JSON value as paths: a.b,
// a[].b; a list's items are one ("[]") and a list at the top is left off.
func walkFields(v any, at string, into map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			p := k
			if at != "" {
				p = at + "." + k
			}
			walkFields(x, p, into)
		}
	case []any:
		for _, x := range v {
			if at == "" {
				walkFields(x, "", into)
			} else {
				walkFields(x, at+"[]", into)
			}
		}
	default:
		into[at] = true
	}
}

// documentedFields reads the backticked field paths in the first cell of
// each row of a markdown table.
func documentedFields(table string) map[string]bool {
	out := map[string]bool{}
	name := regexp.MustCompile("`([a-z_\\[\\].]+)`")
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell, _, _ := strings.Cut(line[2:], " | ")
		for _, m := range name.FindAllStringSubmatch(cell, -1) {
			out[m[1]] = true
		}
	}
	return out
}
