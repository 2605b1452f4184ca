package sandbox_test

import (
	"errors"
	"testing"

	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/sandbox"
)

// TestLineColumn: a position is counted in code points, lines by "\n",
// both from 1; a character past U+FFFF is one column, as the page shows it.
func TestLineColumn(t *testing.T) {
	for _, tc := range []struct {
		text      string
		pos       int
		line, col int
	}{
		{"UPDATE jobs", 1, 1, 1},
		{"UPDATE jobs", 8, 1, 8},
		{"UPDATE jobs\n   SET x", 13, 2, 1},
		{"UPDATE jobs\n   SET x", 16, 2, 4},
		{"-- 🦀🦀\nWHERE WHERE", 13, 2, 7},
		{"a\n\n\nb", 5, 4, 1},
		{"short", 99, 1, 6},
	} {
		if l, c := sandbox.LineColumn(tc.text, tc.pos); l != tc.line || c != tc.col {
			t.Errorf("LineColumn(%q, %d) = %d:%d, want %d:%d", tc.text, tc.pos, l, c, tc.line, tc.col)
		}
	}
}

// TestLoad_ARefusalSaysItsLineAndColumn: the refusal a statement's text
// earns carries where it is, for the page and the terminal to print.
func TestLoad_ARefusalSaysItsLineAndColumn(t *testing.T) {
	_, err := sandbox.Load(sandbox.Complete, "UPDATE jobs\n   SET owner = $1\n WHERE id = :id", judge.Schemas{Jobs: "fl_ab12_7_j", Receiver: "fl_ab12_7_r"})
	var e *sandbox.Error
	if !errors.As(err, &e) {
		t.Fatalf("Load: %v, want a refusal", err)
	}
	d := e.ErrorDetail().(sandbox.Detail)
	if e.Code != sandbox.CodePositional || d.Line != 2 || d.Column != 16 {
		t.Errorf("the refusal: %s at line %d, column %d (position %d); want %s at line 2, column 16", e.Code, d.Line, d.Column, d.Position, sandbox.CodePositional)
	}
}
