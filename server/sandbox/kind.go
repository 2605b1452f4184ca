package sandbox

import (
	"errors"
	"fmt"

	"github.com/fencelab/fencelab/engine"
	"github.com/jackc/pgx/v5/pgtype"
)

// Kind is one of the four statements a reader's solution is made of.
type Kind int

const (
	Claim    Kind = iota + 1 // takes a job: an UPDATE of jobs
	Complete                 // records a result by compare-and-set: an UPDATE of jobs
	Fail                     // records a failure by compare-and-set: an UPDATE of jobs
	Receiver                 // the receiver's rule for one delivery: an INSERT into deliveries
)

// Kinds lists every kind, in the article's order.
func Kinds() []Kind { return []Kind{Claim, Complete, Fail, Receiver} }

// String is the kind's name: claim, complete, fail, receiver.
func (k Kind) String() string {
	switch k {
	case Claim:
		return "claim"
	case Complete:
		return "complete"
	case Fail:
		return "fail"
	case Receiver:
		return "receiver"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// ParseKind is String's inverse.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds() {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("no statement kind %q (claim, complete, fail, receiver)", s)
}

// Param is a named parameter a kind's statement may use, with the type
// Postgres is told it has: the reader need not cast it (a cast such as
// :result::jsonb does no harm).
type Param struct {
	Name string
	Type string // the Postgres type, such as "bigint"
	oid  uint32
	Doc  string
}

// Column is a column the caller reads back from a kind's statement.
type Column struct {
	Name  string
	Types []string // the Postgres types it may have
	oids  []uint32
}

// Spec is what a kind's statement may use and must give back.
type Spec struct {
	Kind Kind
	// Params are the named parameters it may use; it need not use them all
	// (a leases-alone complete has no :epoch).
	Params []Param
	// Verbs are the statement's possible first keywords.
	Verbs []string
	// Writes is the table it must write (in the run's jobs or receiver
	// schema), and the only one it may.
	Writes string
	// Columns are those it must return, by name, whatever else it returns.
	Columns []Column
	// Contract says, in one sentence, how its result is read.
	Contract string
}

var (
	pText   = Param{Name: "", Type: "text", oid: pgtype.TextOID}
	pBigint = Param{Type: "bigint", oid: pgtype.Int8OID}
	pJSONB  = Param{Type: "jsonb", oid: pgtype.JSONBOID}
	pIntvl  = Param{Type: "interval", oid: pgtype.IntervalOID}
	pTime   = Param{Type: "timestamptz", oid: pgtype.TimestamptzOID}
)

func param(p Param, name, doc string) Param { p.Name, p.Doc = name, doc; return p }

var intTypes = Column{Types: []string{"bigint", "integer"}, oids: []uint32{pgtype.Int8OID, pgtype.Int4OID}}

func col(c Column, name string) Column { c.Name = name; return c }

var specs = map[Kind]Spec{
	Claim: {
		Kind: Claim,
		Params: []Param{
			param(pText, "owner", "the claiming worker's name"),
			param(pIntvl, "lease", "how long the lease lasts"),
			param(pTime, "now", "the worker's own clock, which may run ahead of the database's"),
		},
		Verbs:  []string{"UPDATE", "WITH"},
		Writes: "jobs",
		Columns: []Column{
			col(intTypes, "id"),
			{Name: "owner", Types: []string{"text"}, oids: []uint32{pgtype.TextOID, pgtype.VarcharOID}},
			col(intTypes, "epoch"),
			{Name: "lease_until", Types: []string{"timestamptz"}, oids: []uint32{pgtype.TimestamptzOID}},
		},
		Contract: "one row returned is the job taken, no row means there was none to take",
	},
	Complete: {
		Kind: Complete,
		Params: []Param{
			param(pBigint, "id", "the job's id"),
			param(pText, "owner", "the worker's name"),
			param(pBigint, "epoch", "the epoch the worker's claim returned"),
			param(pJSONB, "result", "the job's result, JSON"),
		},
		Verbs:    []string{"UPDATE", "WITH"},
		Writes:   "jobs",
		Contract: "a row changed (or, for a WITH … SELECT, a row returned) means the result landed, none means it was fenced",
	},
	Fail: {
		Kind: Fail,
		Params: []Param{
			param(pBigint, "id", "the job's id"),
			param(pText, "owner", "the worker's name"),
			param(pBigint, "epoch", "the epoch the worker's claim returned"),
			param(pText, "error", "why the job failed"),
		},
		Verbs:    []string{"UPDATE", "WITH"},
		Writes:   "jobs",
		Contract: "a row changed (or, for a WITH … SELECT, a row returned) means the failure landed, none means it was fenced",
	},
	Receiver: {
		Kind: Receiver,
		Params: []Param{
			param(pBigint, "job_id", "the delivery's job"),
			param(pBigint, "epoch", "the epoch the sender holds"),
			param(pText, "owner", "the sender's name"),
			param(pJSONB, "body", "the delivery's body, JSON"),
		},
		Verbs:    []string{"INSERT", "UPDATE", "WITH"},
		Writes:   "deliveries",
		Contract: "a row changed (or, for a WITH … SELECT, a row returned) means the delivery was accepted, none means it was refused",
	},
}

// SpecOf returns what a kind's statement may use and must give back.
func SpecOf(k Kind) (Spec, bool) {
	s, ok := specs[k]
	return s, ok
}

func (s Spec) paramNames() []string {
	names := make([]string, len(s.Params))
	for i, p := range s.Params {
		names[i] = p.Name
	}
	return names
}

func (s Spec) param(name string) Param {
	for _, p := range s.Params {
		if p.Name == name {
			return p
		}
	}
	return Param{}
}

// Code says what is wrong with a reader's statement, for programs; the
// message says it for people.
type Code string

const (
	CodeTooLong       Code = "too-long"          // over MaxTextBytes
	CodeBadText       Code = "bad-text"          // invalid UTF-8, a NUL
	CodeEmpty         Code = "empty"             // no statement at all
	CodeUnknownParam  Code = "unknown-param"     // a :name the kind does not have
	CodePositional    Code = "positional-param"  // $1 instead of a name
	CodeNotOne        Code = "not-one-statement" // a second statement after a ';'
	CodeWrongKind     Code = "wrong-kind"        // not the verb the kind needs (a SET, a COPY, a SELECT…)
	CodeWrongTable    Code = "wrong-table"       // writes no table it must, or one it must not
	CodeMissingColumn Code = "missing-column"    // does not return a column the workers read
	CodeForbiddenCall Code = "forbidden-call"    // calls set_config, or a function that runs SQL from text
	CodeSyntax        Code = "syntax"            // Postgres could not parse it
	CodeUnknownName   Code = "unknown-name"      // a table, column or function that does not exist
	CodeDenied        Code = "denied"            // the run's role may not do it
	CodeTimeout       Code = "timeout"           // it ran past statement_timeout, or waited past lock_timeout
	CodeTooBig        Code = "too-big"           // it used more than a cap allows (temp_file_limit, memory)
	CodeRefused       Code = "refused"           // any other refusal by Postgres
)

// ErrRefused matches every *Error with errors.Is.
var ErrRefused = errors.New("sandbox: statement refused")

// Error is why a reader's statement was refused: a code, the statement's
// kind, one sentence for the reader, where in their text (when known) and,
// when Postgres refused it, the SQLSTATE. The message never holds a
// password or a connection string.
type Error struct {
	Code Code
	Kind Kind
	// Message is one sentence naming what is wrong.
	Message string
	// Position is 1-based, in Unicode code points of the reader's own text
	// (before the parameter rewrite); 0 when there is none. An editor that
	// counts UTF-16 units must convert it for characters past U+FFFF.
	Position int
	// Line and Column are where Position falls in the reader's text,
	// both 1-based, in code points; 0 when there is no Position. The
	// server owns this rule: the page and the terminal print these.
	Line, Column int
	// SQLState is Postgres's error code, when Postgres refused it.
	SQLState string
}

func (e *Error) Error() string { return e.Message }

// LineColumn is where a 1-based code-point position falls in text: its
// line and column, both 1-based, in code points.
func LineColumn(text string, position int) (line, col int) {
	line, col = 1, 1
	i := 0
	for _, r := range text {
		if i+1 >= position {
			break
		}
		i++
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// located gives a refusal of text's, when err is one with a Position, its
// Line and Column.
func located(err error, text string) error {
	var e *Error
	if errors.As(err, &e) && e.Position > 0 && e.Line == 0 {
		e.Line, e.Column = LineColumn(text, e.Position)
	}
	return err
}

// Is matches ErrRefused, and engine.ErrInvalidInput: a refused statement
// is bad input, answered with a 400 that starts nothing.
func (e *Error) Is(target error) bool {
	return target == ErrRefused || target == engine.ErrInvalidInput
}

// Detail is what an API answer carries besides the message, for an
// editor to mark: the kind, the code, the position and the SQLSTATE.
type Detail struct {
	Kind     string `json:"kind"`
	Code     Code   `json:"code"`
	Position int    `json:"position"`
	Line     int    `json:"line,omitempty"`
	Column   int    `json:"column,omitempty"`
	SQLState string `json:"sqlstate,omitempty"`
}

// ErrorDetail returns the refusal's Detail (wire puts it in the answer).
func (e *Error) ErrorDetail() any {
	return Detail{Kind: e.Kind.String(), Code: e.Code, Position: e.Position, Line: e.Line, Column: e.Column, SQLState: e.SQLState}
}

func newError(code Code, kind Kind, pos int, format string, a ...any) *Error {
	return &Error{Code: code, Kind: kind, Position: pos, Message: fmt.Sprintf(format, a...)}
}
