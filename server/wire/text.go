package wire

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/fencelab/fencelab/server/fault"
)

// ValidateText refuses a JSON value that Postgres cannot store as it was
// sent: a string (or an object's key) with a NUL (\u0000), with half of a
// UTF-16 surrogate pair on its own, or with bytes that are not UTF-8.
// Postgres raises a data exception for each of these in jsonb and text,
// and Go's decoder would quietly turn a lone surrogate into U+FFFD, so the
// value is read here as it was written. name is the value's field, such as
// "payload"; the error names where in the value the string is, such as
// payload.items[2]; with no name, raw is a whole body, whose members are
// named by their keys alone. A value that is not valid JSON is refused too.
func ValidateText(name string, raw []byte) error {
	if !json.Valid(raw) {
		return fault.Errorf(fault.Invalid, "%s is not valid JSON", pathName(name))
	}
	s := textScan{b: raw}
	return s.value(name)
}

// pathName is how a message names the value at path: the body itself has
// no path.
func pathName(path string) string {
	if path == "" {
		return "the body"
	}
	return path
}

// textScan walks a valid JSON document, checking each string.
type textScan struct {
	b []byte
	i int
}

func (s *textScan) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// value checks the value at s.i, which is at path, and moves past it.
func (s *textScan) value(path string) error {
	s.space()
	switch s.b[s.i] {
	case '{':
		s.i++
		for {
			s.space()
			if s.b[s.i] == '}' {
				s.i++
				return nil
			}
			start := s.i
			if err := s.text("a key of " + pathName(path)); err != nil {
				return err
			}
			var key string
			_ = json.Unmarshal(s.b[start:s.i], &key) // valid, and checked just now
			s.space()
			s.i++ // the colon
			if err := s.value(member(path, key)); err != nil {
				return err
			}
			s.space()
			if s.b[s.i] == ',' {
				s.i++
			}
		}
	case '[':
		s.i++
		for n := 0; ; n++ {
			s.space()
			if s.b[s.i] == ']' {
				s.i++
				return nil
			}
			if err := s.value(fmt.Sprintf("%s[%d]", pathName(path), n)); err != nil {
				return err
			}
			s.space()
			if s.b[s.i] == ',' {
				s.i++
			}
		}
	case '"':
		return s.text(path)
	}
	// A number, true, false or null: it runs to the next delimiter.
	for s.i < len(s.b) && !isDelim(s.b[s.i]) {
		s.i++
	}
	return nil
}

func isDelim(c byte) bool {
	return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// member is the path of an object's member: path.key for a plain key,
// path["odd key"] for any other.
func member(path, key string) string {
	plain := key != ""
	for _, r := range key {
		if !(r == '_' || r == '-' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') {
			plain = false
			break
		}
	}
	switch {
	case plain && len(key) <= 40 && path == "":
		return key
	case plain && len(key) <= 40:
		return path + "." + key
	case len(key) > 40:
		key = key[:40] + "…"
	}
	return pathName(path) + "[" + strconv.QuoteToASCII(key) + "]"
}

// text checks the string that starts at s.i (its opening quote), which is
// at path, and moves past its closing quote.
func (s *textScan) text(path string) error {
	s.i++
	for {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return nil
		case c == '\\' && s.b[s.i+1] == 'u':
			r := hex4(s.b[s.i+2 : s.i+6])
			s.i += 6
			switch {
			case r == 0:
				return fault.Errorf(fault.Invalid, "%s has a NUL character (\\u0000), which Postgres cannot store", pathName(path))
			case 0xDC00 <= r && r <= 0xDFFF:
				return fault.Errorf(fault.Invalid, "%s has the second half of a UTF-16 surrogate pair (\\u%04x) without the first, which is not text", pathName(path), r)
			case 0xD800 <= r && r <= 0xDBFF:
				if s.i+6 > len(s.b) || s.b[s.i] != '\\' || s.b[s.i+1] != 'u' {
					return fault.Errorf(fault.Invalid, "%s has the first half of a UTF-16 surrogate pair (\\u%04x) without the second, which is not text", pathName(path), r)
				}
				if lo := hex4(s.b[s.i+2 : s.i+6]); lo < 0xDC00 || lo > 0xDFFF {
					return fault.Errorf(fault.Invalid, "%s has the first half of a UTF-16 surrogate pair (\\u%04x) without the second, which is not text", pathName(path), r)
				}
				s.i += 6
			}
		case c == '\\':
			s.i += 2
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, n := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && n == 1 {
				return fault.Errorf(fault.Invalid, "%s is not valid UTF-8", pathName(path))
			}
			s.i += n
		}
	}
}

// hex4 reads the four hex digits of a \u escape (valid JSON has them).
func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(n)
}
