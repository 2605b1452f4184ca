package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// The bytes a statement's result may hold: one value, and the whole
// result. A statement can build a value of up to 1 GB from allowed
// expressions (a CTE that doubles a text); what it returns travels in
// events to every reader of the run, so Exec refuses a result over either
// cap and keeps none of it.
const (
	MaxValueBytes  = 8 << 10
	MaxResultBytes = 64 << 10
)

// Result is what one run of a checked statement gave back.
type Result struct {
	Columns []string
	// Rows holds each row's values, decoded as pgx decodes them by default
	// (int64, string, time.Time, map[string]any for JSON, …).
	Rows [][]any
	// RowsAffected is the command tag's count: for an UPDATE or INSERT,
	// the rows it changed; for a WITH … SELECT, the rows it returned.
	RowsAffected int64
}

// Landed says whether the statement changed a row, or, one that ends in a
// SELECT (WITH … SELECT), returned one: the contract of complete, fail and
// the receiver (see Spec.Contract). A statement that returns a row when it
// was fenced (such as the engine's own, which reports what the row held)
// breaks that contract: it must return rows only from what it wrote.
func (r *Result) Landed() bool { return r.RowsAffected > 0 }

// Exec runs a checked statement on conn, which must be a connection of the
// role that checked it (Role.Connect, or Role.ConnConfig in a worker),
// with args by parameter name; a parameter the statement does not use is
// ignored, one it uses and args lacks is NULL.
//
// Before the statement it sends RESET ALL and then sets Settings and the
// search_path again, by value: a statement may change its session's
// settings with set_config — statement_timeout among them — but only for
// itself, since the timeout of the statement running is armed before it
// starts; and a session of the role may change the role's own defaults
// (ALTER ROLE itself SET …, which Vet never lets through), so RESET
// alone would not do. A Postgres refusal (a timeout, a denied right)
// is an *Error with its position in the reader's text. Exec is not safe
// for concurrent use of one conn, as pgx's connections are not.
func Exec(ctx context.Context, conn *pgx.Conn, c *Vetted, args map[string]any) (_ *Result, err error) {
	defer func() { err = located(err, c.Text) }()
	pc := conn.PgConn()
	if err := pc.Exec(ctx, c.resetSQL).Close(); err != nil {
		return nil, fmt.Errorf("run the %s: reset: %w", c.Kind, err)
	}
	m := conn.TypeMap()
	values := make([][]byte, len(c.Params))
	for i, name := range c.Params {
		v, ok := args[name]
		if !ok || v == nil {
			continue
		}
		b, err := m.Encode(c.oids[i], pgtype.TextFormatCode, v, nil)
		if err != nil {
			return nil, fmt.Errorf("run the %s: parameter :%s: %w", c.Kind, name, err)
		}
		if b == nil {
			b = []byte{} // an empty, not NULL, value
		}
		values[i] = b
	}
	rr := pc.ExecParams(ctx, c.SQL, values, c.oids, nil, nil)
	res := &Result{}
	for _, f := range rr.FieldDescriptions() {
		res.Columns = append(res.Columns, f.Name)
	}
	fields := rr.FieldDescriptions()
	var decodeErr error
	var tooBig *Error
	total := 0
	for rr.NextRow() {
		raw := rr.Values()
		if tooBig != nil {
			continue // read to the end, keep nothing
		}
		for i, b := range raw {
			if tooBig != nil {
				break
			}
			total += len(b)
			switch {
			case len(b) > MaxValueBytes:
				tooBig = newError(CodeTooBig, c.Kind, 0, "the %s returned %d bytes in %s; a value may hold at most %d (it ran: what it wrote stays written)",
					c.Kind, len(b), fields[i].Name, MaxValueBytes)
			case total > MaxResultBytes:
				tooBig = newError(CodeTooBig, c.Kind, 0, "the %s returned more than %d bytes in all; a result may hold at most that (it ran: what it wrote stays written)",
					c.Kind, MaxResultBytes)
			}
		}
		if tooBig != nil {
			res.Rows = nil
			continue
		}
		row := make([]any, len(raw))
		for i, b := range raw {
			if b == nil {
				continue
			}
			var v any
			var err error
			if t, ok := m.TypeForOID(fields[i].DataTypeOID); ok {
				v, err = t.Codec.DecodeValue(m, fields[i].DataTypeOID, fields[i].Format, b)
			} else {
				v = string(b)
			}
			if err != nil && decodeErr == nil {
				decodeErr = err
			}
			row[i] = v
		}
		res.Rows = append(res.Rows, row)
	}
	tag, err := rr.Close()
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return nil, c.refusal(pe)
		}
		return nil, fmt.Errorf("run the %s: %w", c.Kind, err)
	}
	if tooBig != nil {
		return nil, tooBig
	}
	if decodeErr != nil {
		return nil, fmt.Errorf("run the %s: read its result: %w", c.Kind, decodeErr)
	}
	res.RowsAffected = tag.RowsAffected()
	return res, nil
}

// Args returns args in the order of the statement's parameters ($1, $2,
// …): what a timeline shows beside its SQL.
func (c *Vetted) Args(args map[string]any) []any {
	out := make([]any, len(c.Params))
	for i, p := range c.Params {
		out[i] = args[p]
	}
	return out
}
