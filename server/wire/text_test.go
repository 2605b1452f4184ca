package wire_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/wire"
)

func TestValidateText(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":"\u0000"}`:                  "p.a has a NUL",
		`{"a":{"b":[0,"x\u0000"]}}`:       "p.a.b[1] has a NUL",
		`{"\u0000":1}`:                    "a key of p has a NUL",
		`{"a":"\ud800"}`:                  "p.a has the first half",
		`{"a":"\ud800\u0041"}`:            "p.a has the first half",
		`{"a":"\ud800\\udc00"}`:           "p.a has the first half",
		`{"a":"\udc00"}`:                  "p.a has the second half",
		`["\ud83d\ude00","\ude00"]`:       "p[1] has the second half",
		`{"odd key":"\u0000"}`:            `p["odd key"] has a NUL`,
		"{\"a\":\"\xc3\"}":                "p.a is not valid UTF-8",
		`{"a":1`:                          "p is not valid JSON",
		`{"a":"ok"} {"b":"\u0000"}`:       "p is not valid JSON",
		` [ 1 , true , null , "\u0000" ]`: "p[3] has a NUL",
	} {
		err := wire.ValidateText("p", []byte(in))
		if err == nil || !strings.Contains(err.Error(), want) || fault.CodeOf(err) != fault.Invalid {
			t.Errorf("ValidateText(%s) = %v, want an invalid error with %q", in, err, want)
		}
	}
	for _, in := range []string{`{}`, `[]`, `""`, `0`, `-1.5e3`, `null`, `{"a":"\\u0000"}`, `{"a":"\\ud800"}`, `{"a":"\ud83d\ude00"}`,
		`{"a":"caf\u00e9 ☕ \"q\" \\ \/ \b\f\n\r\t"}`, `{"a":[{"b":{"c":[[],{}]}}],"d":"é"}`, "{\"a\":\"\u2028\"}"} {
		if err := wire.ValidateText("p", []byte(in)); err != nil {
			t.Errorf("ValidateText(%s) = %v, want nil", in, err)
		}
	}
}

// FuzzValidateText: any input is refused as invalid or passed, never a panic;
// what passes is valid JSON whose strings decode without a NUL or U+FFFD
// that was not in the input.
func FuzzValidateText(f *testing.F) {
	for _, s := range []string{`{"a":"\u0000"}`, `["\ud800",1]`, `{"a":{"b":"\udc00x"}}`, `"ok"`, `{"k\u00e9y":[true,null,1e5]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := wire.ValidateText("p", b)
		if err != nil {
			if fault.CodeOf(err) != fault.Invalid || err.Error() == "" {
				t.Fatalf("ValidateText(%q) = %v, not an invalid error", b, err)
			}
			return
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if dec.Decode(&v) != nil {
			t.Fatalf("ValidateText passed %q, which is not JSON", b)
		}
		out, _ := json.Marshal(v)
		if strings.Contains(string(out), `\u0000`) || (strings.ContainsRune(string(out), utf8.RuneError) && !strings.ContainsRune(string(b), utf8.RuneError) && !strings.Contains(strings.ToLower(string(b)), `\ufffd`)) {
			t.Fatalf("ValidateText passed %q, which decodes to %s", b, out)
		}
	})
}
