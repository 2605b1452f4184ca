package sandbox

import (
	"errors"
	"strings"
	"testing"
)

func TestRewrite_NamedParametersOnlyOutsideQuotes(t *testing.T) {
	allowed := []string{"id", "owner", "epoch", "result"}
	for _, tc := range []struct {
		in, want string
		params   []string
	}{
		{"UPDATE jobs SET owner = :owner WHERE id = :id AND owner = :owner", "UPDATE jobs SET owner = $1 WHERE id = $2 AND owner = $1", []string{"owner", "id"}},
		{"UPDATE jobs SET result = :result::jsonb", "UPDATE jobs SET result = $1::jsonb", []string{"result"}},
		{"UPDATE jobs SET error = ':id' || E'\\' :id' || \":id\" WHERE id = :id", "UPDATE jobs SET error = ':id' || E'\\' :id' || \":id\" WHERE id = $1", []string{"id"}},
		{"UPDATE jobs SET error = $$ :id $$ || $x$ :owner $ $x$ -- :epoch\n WHERE id = :id /* :a /* :b */ */", "UPDATE jobs SET error = $$ :id $$ || $x$ :owner $ $x$ -- :epoch\n WHERE id = $1 /* :a /* :b */ */", []string{"id"}},
		{"UPDATE jobs SET error = 'it''s :owner' WHERE id = :id;", "UPDATE jobs SET error = 'it''s :owner' WHERE id = $1;", []string{"id"}},
		{"UPDATE jobs SET error = U&'d\\0061t :a' WHERE epoch=:epoch", "UPDATE jobs SET error = U&'d\\0061t :a' WHERE epoch=$1", []string{"epoch"}},
		{"UPDATE jobs SET error = 'é' WHERE id = :id", "UPDATE jobs SET error = 'é' WHERE id = $1", []string{"id"}},
	} {
		rw, err := rewrite(Complete, tc.in, allowed)
		if err != nil {
			t.Errorf("rewrite(%q): %v", tc.in, err)
			continue
		}
		if rw.sql != tc.want || strings.Join(rw.params, ",") != strings.Join(tc.params, ",") {
			t.Errorf("rewrite(%q)\n = %q %v\nwant %q %v", tc.in, rw.sql, rw.params, tc.want, tc.params)
		}
		if rw.first != "UPDATE" {
			t.Errorf("rewrite(%q): first keyword %q", tc.in, rw.first)
		}
	}
}

func TestRewrite_Refusals(t *testing.T) {
	allowed := []string{"id", "owner"}
	for _, tc := range []struct {
		in   string
		code Code
		pos  int
	}{
		{strings.Repeat("x", MaxTextBytes+1), CodeTooLong, 0},
		{"UPDATE jobs SET owner = 'a\x00'", CodeBadText, 27},
		{"UPDATE jobs SET owner = '\xed\xa0\x80'", CodeBadText, 26}, // a lone surrogate, as UTF-8
		{"UPDATE jobs SET owner = '\xff'", CodeBadText, 26},
		{"UPDATE jobs SET owner = 'a' -- \u202e;)di = di EREHW\n", CodeBadText, 32}, // a right-to-left override
		{"UPDATE jobs SET owner = 'a\u2066b'", CodeBadText, 27},                     // a left-to-right isolate
		{"UPDATE jobs SET owner = 'a\u200bb'", CodeBadText, 27},                     // a zero-width space
		{"UPDATE jobs SET owner = 'a\x1bb'", CodeBadText, 27},                       // an escape
		{"UPDATE jobs SET owner = 'a\u2028b'", CodeBadText, 27},                     // a line separator
		{"UPDATE jobs SET owner = :nobody", CodeUnknownParam, 25},
		{"UPDATE jobs SET owner = $1", CodePositional, 25},
		{"UPDATE jobs SET owner = 'x'; DROP TABLE jobs", CodeNotOne, 30},
		{"UPDATE jobs SET owner = 'x' /* open", CodeSyntax, 29},
		{"UPDATE jobs SET owner = 'open", CodeSyntax, 25},
		{"UPDATE jobs SET owner = $q$ open", CodeSyntax, 25},
		{"  -- nothing\n ; ", CodeEmpty, 0},
	} {
		_, err := rewrite(Complete, tc.in, allowed)
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrRefused) {
			t.Errorf("rewrite(%.40q): %v, want a %s refusal", tc.in, err, tc.code)
			continue
		}
		if e.Code != tc.code || e.Position != tc.pos {
			t.Errorf("rewrite(%.40q): %s at %d (%s), want %s at %d", tc.in, e.Code, e.Position, e.Message, tc.code, tc.pos)
		}
		if e.Message == "" || strings.Contains(e.Message, "\n") {
			t.Errorf("rewrite(%.40q): message %q is not one sentence", tc.in, e.Message)
		}
	}
}

func TestRewrite_PositionsMapBackToTheReadersText(t *testing.T) {
	rw, err := rewrite(Complete, "UPDATE jobs SET owner = :owner, épque = 1 WHERE id = :id", []string{"id", "owner"})
	if err != nil {
		t.Fatal(err)
	}
	// "épque" is at code point 33 of the reader's text and 29 of the SQL sent.
	if got := strings.Index(rw.sql, "épque"); len([]rune(rw.sql[:got]))+1 != 29 {
		t.Fatalf("test's own arithmetic: %q", rw.sql)
	}
	if got := rw.origPosition(29); got != 33 {
		t.Errorf("position 29 maps to %d, want 33", got)
	}
	if got := rw.origPosition(25); got != 25 { // the $1 is where :owner was
		t.Errorf("position 25 maps to %d, want 25", got)
	}
}

func TestRewrite_FirstKeyword(t *testing.T) {
	for in, want := range map[string]string{
		"  -- a comment\n /* another */ update jobs": "UPDATE",
		"(UPDATE jobs SET owner = 'x')":              "(",
		":id UPDATE jobs":                            ":",
		"E'x' UPDATE jobs":                           "'",
		"U&'x' UPDATE jobs":                          "U&",
		"$$x$$ UPDATE jobs":                          "$",
		"WITH RECURSIVE n AS (SELECT 1) UPDATE jobs": "WITH",
	} {
		rw, err := rewrite(Complete, in, []string{"id"})
		if err != nil {
			t.Errorf("rewrite(%q): %v", in, err)
			continue
		}
		if rw.first != want {
			t.Errorf("rewrite(%q): first %q, want %q", in, rw.first, want)
		}
	}
}
