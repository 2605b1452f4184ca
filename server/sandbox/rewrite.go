package sandbox

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxTextBytes is the longest statement a reader may send, in bytes. The
// engine's own longest statement is under 1 KiB.
const MaxTextBytes = 8 << 10

// rewritten is a reader's statement with its named parameters replaced by
// Postgres's positional ones.
type rewritten struct {
	sql    string
	params []string // params[i] is the name of $i+1
	// orig[i] is the index, in code points, in the reader's text of the
	// i-th code point of sql: how a Postgres error position is taken back
	// to what the reader typed.
	orig  []int
	first string // the statement's first keyword, upper-cased ("" if none)
	// names are the identifiers outside literals and comments, quoted
	// ones unquoted, unquoted ones lower-cased, with their places (from 1).
	names []nameAt
}

type nameAt struct {
	name string
	pos  int
}

// origPosition converts a Postgres error position (1-based, in code points
// of the SQL sent) to a 1-based position in the reader's text; 0 stays 0.
func (rw *rewritten) origPosition(p int) int {
	switch {
	case p <= 0 || len(rw.orig) == 0:
		return 0
	case p > len(rw.orig):
		return rw.orig[len(rw.orig)-1] + 2 // just past the end
	}
	return rw.orig[p-1] + 1
}

// rewrite checks a reader's text and replaces its named parameters
// (":name", from allowed) with $1, $2, … in order of first use. Names are
// only looked for outside string literals ('…', E'…', U&'…'), quoted
// identifiers ("…"), comments (-- and nested /* */) and dollar-quoted
// strings ($$…$$, $tag$…$tag$); a "::" cast is left alone, as is ":="
// (named function arguments). It refuses: text over MaxTextBytes, invalid
// UTF-8 (which includes a lone surrogate's encoding), a NUL, a positional
// $n, a name not in allowed, an unterminated literal or comment, and a
// second statement after a ';'.
// invisible finds the first character of the text that is not shown as
// itself: a control character other than tab and the line ends, a format
// character (the bidirectional overrides and isolates, zero-width ones),
// a line or paragraph separator. It returns its place (from 1, in
// characters) and the character; 0 when there is none.
func invisible(text string) (int, rune) {
	i := 0
	for _, r := range text {
		i++
		switch {
		case r == '\t' || r == '\n' || r == '\r':
		case unicode.Is(unicode.Cc, r), unicode.Is(unicode.Cf, r), unicode.Is(unicode.Zl, r), unicode.Is(unicode.Zp, r):
			return i, r
		}
	}
	return 0, 0
}

func rewrite(kind Kind, text string, allowed []string) (*rewritten, error) {
	switch {
	case len(text) > MaxTextBytes:
		return nil, newError(CodeTooLong, kind, 0, "the %s is %d bytes long; at most %d are allowed", kind, len(text), MaxTextBytes)
	case !utf8.ValidString(text):
		return nil, newError(CodeBadText, kind, badUTF8Position(text), "the %s is not valid UTF-8 text", kind)
	case strings.IndexByte(text, 0) >= 0:
		return nil, newError(CodeBadText, kind, utf8.RuneCountInString(text[:strings.IndexByte(text, 0)])+1, "the %s contains a NUL character", kind)
	}
	if i, r := invisible(text); i > 0 {
		return nil, newError(CodeBadText, kind, i, "the %s contains U+%04X, an invisible control character: refused, so that a statement (and a link that carries it) shows what it runs", kind, r)
	}
	src := []rune(text)
	rw := &rewritten{}
	var out []rune
	emit := func(from, to int) {
		for i := from; i < to; i++ {
			out = append(out, src[i])
			rw.orig = append(rw.orig, i)
		}
	}
	index := map[string]int{}
	ended := -1 // the index of a statement-ending ';'
	n := len(src)
	for i := 0; i < n; {
		c := src[i]
		switch {
		case c == '-' && i+1 < n && src[i+1] == '-':
			j := i
			for j < n && src[j] != '\n' {
				j++
			}
			emit(i, j)
			i = j
			continue
		case c == '/' && i+1 < n && src[i+1] == '*':
			j, depth := i+2, 1
			for j < n && depth > 0 {
				switch {
				case src[j] == '/' && j+1 < n && src[j+1] == '*':
					depth++
					j += 2
				case src[j] == '*' && j+1 < n && src[j+1] == '/':
					depth--
					j += 2
				default:
					j++
				}
			}
			if depth > 0 {
				return nil, newError(CodeSyntax, kind, i+1, "the comment that starts here is never closed")
			}
			emit(i, j)
			i = j
			continue
		}
		if rw.first == "" && !isSpace(c) && !isIdentStart(c) && c != ';' {
			rw.first = string(c) // a statement that starts with no keyword: "(", a literal, a parameter
		}
		if ended >= 0 && !isSpace(c) {
			return nil, newError(CodeNotOne, kind, i+1, "the %s must be one statement: a second one starts after the ';'", kind)
		}
		switch {
		case isSpace(c):
			emit(i, i+1)
			i++
		case c == ';':
			ended = i
			emit(i, i+1)
			i++
		case c == '\'' || ((c == 'e' || c == 'E') && i+1 < n && src[i+1] == '\'' && !identBefore(src, i)):
			start, j := i, i
			backslash := c != '\''
			if rw.first == "" {
				rw.first = "'"
			}
			if backslash {
				j++
			}
			j, ok := scanQuoted(src, j, '\'', backslash)
			if !ok {
				return nil, newError(CodeSyntax, kind, start+1, "the string that starts here is never closed")
			}
			emit(start, j)
			i = j
		case (c == 'u' || c == 'U') && i+2 < n && src[i+1] == '&' && src[i+2] == '"' && !identBefore(src, i):
			return nil, newError(CodeBadText, kind, i+1, "the %s may not use a U&\"…\" name: write the name itself", kind)
		case (c == 'u' || c == 'U') && i+2 < n && src[i+1] == '&' && src[i+2] == '\'' && !identBefore(src, i):
			if rw.first == "" {
				rw.first = "U&"
			}
			j, ok := scanQuoted(src, i+2, src[i+2], false)
			if !ok {
				return nil, newError(CodeSyntax, kind, i+1, "the quoted text that starts here is never closed")
			}
			emit(i, j)
			i = j
		case c == '"':
			j, ok := scanQuoted(src, i, '"', false)
			if !ok {
				return nil, newError(CodeSyntax, kind, i+1, "the quoted name that starts here is never closed")
			}
			name := strings.ReplaceAll(string(src[i+1:j-1]), `""`, `"`)
			if err := quotedName(kind, name, i+1); err != nil {
				return nil, err
			}
			rw.names = append(rw.names, nameAt{name, i + 1})
			emit(i, j)
			i = j
		case c == '$' && i+1 < n && isDigit(src[i+1]) && !identBefore(src, i):
			return nil, newError(CodePositional, kind, i+1, "use the named parameters (such as :%s), not $1, $2, …", allowed[0])
		case c == '$' && !identBefore(src, i):
			// A dollar quote: $$ or $tag$ up to the same delimiter.
			j := i + 1
			for j < n && isIdentRune(src[j]) {
				j++
			}
			if j >= n || src[j] != '$' {
				emit(i, i+1)
				i++
				continue
			}
			delim := string(src[i : j+1])
			end := strings.Index(string(src[j+1:]), delim)
			if end < 0 {
				return nil, newError(CodeSyntax, kind, i+1, "the dollar-quoted string that starts here is never closed")
			}
			stop := j + 1 + utf8.RuneCountInString(string(src[j+1:])[:end]) + len([]rune(delim))
			emit(i, stop)
			i = stop
		case c == ':' && i+1 < n && src[i+1] == ':':
			emit(i, i+2) // a cast: the type name after it is no parameter
			i += 2
		case c == ':' && i+1 < n && isIdentStart(src[i+1]):
			j := i + 1
			for j < n && isIdentRune(src[j]) {
				j++
			}
			name := string(src[i+1 : j])
			if !contains(allowed, name) {
				return nil, newError(CodeUnknownParam, kind, i+1, "the %s has no parameter :%s; it may use %s", kind, name, paramList(allowed))
			}
			k, ok := index[name]
			if !ok {
				rw.params = append(rw.params, name)
				k = len(rw.params)
				index[name] = k
			}
			for _, r := range "$" + strconv.Itoa(k) {
				out = append(out, r)
				rw.orig = append(rw.orig, i)
			}
			i = j
		case isIdentStart(c):
			j := i
			for j < n && isIdentRune(src[j]) {
				j++
			}
			if rw.first == "" {
				rw.first = strings.ToUpper(string(src[i:j]))
			}
			rw.names = append(rw.names, nameAt{strings.ToLower(string(src[i:j])), i + 1})
			emit(i, j)
			i = j
		default:
			emit(i, i+1)
			i++
		}
	}
	if rw.first == "" {
		return nil, newError(CodeEmpty, kind, 0, "the %s is empty", kind)
	}
	rw.sql = string(out)
	return rw, nil
}

// MaxNameBytes is the longest name Postgres keeps (NAMEDATALEN - 1).
const MaxNameBytes = 63

// quotedName holds a quoted name to what the allow-list's reading of
// Postgres's parse tree needs: at most MaxNameBytes, and none of the
// characters the tree's text escapes (spaces, parentheses, braces,
// backslash), so that every name in it is one token, as Postgres wrote it.
func quotedName(kind Kind, name string, pos int) error {
	switch {
	case name == "":
		return newError(CodeSyntax, kind, pos, "a quoted name must not be empty")
	case len(name) > MaxNameBytes:
		return newError(CodeBadText, kind, pos, "the quoted name here is %d bytes long; at most %d are allowed", len(name), MaxNameBytes)
	}
	if i := strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune("(){}\\", r) }); i >= 0 {
		return newError(CodeBadText, kind, pos, "a quoted name may not hold spaces, parentheses, braces or a backslash; this one holds %q", string([]rune(name[i:])[0]))
	}
	return nil
}

// scanQuoted returns the index just past the quoted text that opens at
// src[i] (the quote q), where a doubled quote stands for itself and, with
// backslash, a backslash escapes the next character.
func scanQuoted(src []rune, i int, q rune, backslash bool) (int, bool) {
	for j := i + 1; j < len(src); j++ {
		switch {
		case backslash && src[j] == '\\':
			j++
		case src[j] == q && j+1 < len(src) && src[j+1] == q:
			j++
		case src[j] == q:
			return j + 1, true
		}
	}
	return 0, false
}

func identBefore(src []rune, i int) bool { return i > 0 && (isIdentRune(src[i-1]) || src[i-1] == '$') }

func isSpace(c rune) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
func isDigit(c rune) bool { return c >= '0' && c <= '9' }
func isIdentStart(c rune) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80
}
func isIdentRune(c rune) bool { return isIdentStart(c) || isDigit(c) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func paramList(names []string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = ":" + n
	}
	return strings.Join(parts, ", ")
}

// badUTF8Position is the 1-based code-point position of the first invalid
// byte in s.
func badUTF8Position(s string) int {
	pos := 1
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			return pos
		}
		i += size
		pos++
	}
	return 0
}
