package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencelab/fencelab/engine/lab"
)

// Checked is a reader's statement that passed Check: safe to hand to Exec
// on a connection of the same role.
type Checked struct {
	Kind Kind
	// Text is what the reader wrote.
	Text string
	// SQL is Text with its named parameters as $1, $2, …: what runs, and
	// what a timeline shows.
	SQL string
	// Params names $1, $2, … in order.
	Params []string
	// Columns are the names of the columns it returns, in order.
	Columns []string

	oids     []uint32
	rw       *rewritten
	resetSQL string // what Exec sends first
}

// resetSQL puts a role's session back to its settings, whatever the
// statements before did: the server's own text, in one simple query.
func resetSQL(s lab.Schemas) string {
	var b strings.Builder
	b.WriteString("RESET ALL")
	for _, st := range Settings {
		if st.Name == "temp_file_limit" {
			continue // a superuser's setting: the role can change it neither way
		}
		b.WriteString("; SET " + st.Name + " = '" + st.Value + "'")
	}
	b.WriteString("; SET search_path = " + pgx.Identifier{s.Jobs}.Sanitize() + ", " + pgx.Identifier{s.Receiver}.Sanitize())
	return b.String()
}

// checkName is the prepared statement Check describes and explains, on a
// connection of its own.
const checkName = "sandbox_check"

// Check decides whether a reader's statement may run as the role for
// kind, without running it:
//
//  1. the text: at most MaxTextBytes, UTF-8, no NUL, one statement, only
//     the kind's named parameters (rewritten to $n);
//  2. its first keyword is one the kind allows (an UPDATE or WITH for the
//     workers' three, also INSERT for the receiver): this alone turns away
//     SET, RESET, COPY, LOCK, LISTEN, NOTIFY, DO, CREATE, PREPARE and
//     every other utility statement before Postgres sees them;
//  3. Postgres prepares it, as the role, on a connection of its own: a
//     syntax error, a second statement, a schema or table the role may not
//     use is refused here, with its position in the reader's text;
//  4. Postgres plans it, generically (EXPLAIN EXECUTE with plan_cache_mode
//     force_generic_plan: PG15 has no EXPLAIN (GENERIC_PLAN)), and the plan
//     must write the kind's table in the run's schema (jobs, or
//     deliveries) and no other; planning also checks the role's rights on
//     every table and function the plan uses;
//  5. it returns the columns the workers read back (the claim's id, owner,
//     epoch, lease_until), with types they can read.
//
// Nothing is executed, so nothing is left behind. Every refusal is an
// *Error; other errors (the database is down) are not. It is safe to call
// concurrently: each call has its own connection.
func (r *Role) Check(ctx context.Context, kind Kind, text string) (*Checked, error) {
	spec, ok := SpecOf(kind)
	if !ok {
		return nil, fmt.Errorf("check: no statement kind %d", int(kind))
	}
	rw, err := rewrite(kind, text, spec.paramNames())
	if err != nil {
		return nil, err
	}
	if !slices.Contains(spec.Verbs, rw.first) {
		return nil, newError(CodeWrongKind, kind, firstPosition(rw), "the %s must be %s; this statement starts with %s",
			kind, verbList(spec), quoteWord(rw.first))
	}
	c := &Checked{Kind: kind, Text: text, SQL: rw.sql, Params: rw.params, rw: rw, resetSQL: resetSQL(r.schemas)}
	for _, p := range rw.params {
		c.oids = append(c.oids, spec.param(p).oid)
	}
	conn, err := r.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background()) //nolint:errcheck // a connection of its own: nothing to keep
	desc, err := conn.PgConn().Prepare(ctx, checkName, c.SQL, c.oids)
	if err != nil {
		return nil, c.pgError(err, "prepare")
	}
	for _, f := range desc.Fields {
		c.Columns = append(c.Columns, f.Name)
	}
	if err := c.checkColumns(spec, desc.Fields); err != nil {
		return nil, err
	}
	writes, err := c.explain(ctx, conn)
	if err != nil {
		return nil, err
	}
	if err := c.checkWrites(spec, r.schemas, writes); err != nil {
		return nil, err
	}
	return c, nil
}

func firstPosition(rw *rewritten) int {
	for i, p := range rw.orig {
		if !isSpace([]rune(rw.sql)[i]) {
			return p + 1
		}
	}
	return 0
}

func verbList(s Spec) string {
	switch s.Kind {
	case Receiver:
		return "an INSERT into (or UPDATE of) deliveries, or a WITH … that does one"
	default:
		return "an UPDATE of jobs, or a WITH … that does one"
	}
}

func quoteWord(w string) string {
	if len(w) > 20 {
		w = w[:20] + "…"
	}
	return "“" + w + "”"
}

// checkColumns holds the statement to the columns the kind's reader reads.
func (c *Checked) checkColumns(spec Spec, fields []pgconn.FieldDescription) error {
	var missing []string
	for _, want := range spec.Columns {
		i := slices.IndexFunc(fields, func(f pgconn.FieldDescription) bool { return f.Name == want.Name })
		if i < 0 {
			missing = append(missing, want.Name)
			continue
		}
		if !slices.Contains(want.oids, fields[i].DataTypeOID) {
			return newError(CodeMissingColumn, c.Kind, 0, "the %s returns %s as a type the workers cannot read; it must be %s",
				c.Kind, want.Name, strings.Join(want.Types, " or "))
		}
	}
	if len(missing) > 0 {
		names := make([]string, len(spec.Columns))
		for i, col := range spec.Columns {
			names[i] = col.Name
		}
		return newError(CodeMissingColumn, c.Kind, 0, "the %s must return %s (RETURNING %s); it does not return %s",
			c.Kind, strings.Join(names, ", "), strings.Join(names, ", "), strings.Join(missing, ", "))
	}
	return nil
}

// write is one table a plan writes.
type write struct{ Op, Schema, Table string }

// explain plans the prepared statement generically, without running it,
// and returns the tables its plan writes.
func (c *Checked) explain(ctx context.Context, conn *pgx.Conn) ([]write, error) {
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		return nil, fmt.Errorf("check %s: %w", c.Kind, err)
	}
	args := make([]string, len(c.Params))
	for i := range args {
		args[i] = "NULL"
	}
	q := "EXPLAIN (FORMAT JSON, VERBOSE) EXECUTE " + checkName
	if len(args) > 0 {
		q += "(" + strings.Join(args, ", ") + ")"
	}
	var out []byte
	if err := conn.QueryRow(ctx, q, pgx.QueryExecModeSimpleProtocol).Scan(&out); err != nil {
		return nil, c.pgError(err, "plan")
	}
	// A utility statement (SET, COPY, LISTEN…) has no plan: EXPLAIN gives
	// a string where a plan would be. The first-keyword check turns these
	// away before; this holds without it.
	var plans []struct {
		Plan *planNode `json:"Plan"`
	}
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) == 0 || plans[0].Plan == nil {
		return nil, newError(CodeWrongKind, c.Kind, 0, "the %s must be %s; this statement has no plan that writes a table", c.Kind, verbList(specs[c.Kind]))
	}
	if m := forbiddenCall.FindSubmatch(out); m != nil {
		return nil, newError(CodeForbiddenCall, c.Kind, 0, "the %s may not call %s: it changes the session's settings or runs SQL from text",
			c.Kind, string(m[1]))
	}
	var ws []write
	for _, p := range plans {
		p.Plan.walk(func(n *planNode) {
			if n.NodeType == "ModifyTable" {
				ws = append(ws, write{Op: n.Operation, Schema: n.Schema, Table: n.Relation})
			}
		})
	}
	return ws, nil
}

// forbiddenCall finds, in a verbose plan (where every call is spelled out,
// constants folded), the functions that change the session's settings
// (set_config: application_name names the writer in the history) or run
// SQL given as text (the query_to_xml family, ts_stat, ts_rewrite).
// Postgres's rights hold whatever these run; refusing them keeps a
// statement from passing for another worker, and keeps its SQL the SQL it
// shows. It is a second line, not the sandbox: a list of names, which a
// function that runs SQL and is not on it would pass.
var forbiddenCall = regexp.MustCompile(`\b(set_config|query_to_xml|query_to_xml_and_xmlschema|query_to_xmlschema|cursor_to_xml|cursor_to_xmlschema|ts_stat|ts_rewrite)\(`)

type planNode struct {
	NodeType  string     `json:"Node Type"`
	Operation string     `json:"Operation"`
	Relation  string     `json:"Relation Name"`
	Schema    string     `json:"Schema"`
	Plans     []planNode `json:"Plans"`
}

func (n *planNode) walk(f func(*planNode)) {
	f(n)
	for i := range n.Plans {
		n.Plans[i].walk(f)
	}
}

// checkWrites holds the plan to the kind's one table: it must write it,
// and nothing else.
func (c *Checked) checkWrites(spec Spec, s lab.Schemas, ws []write) error {
	schema := s.Jobs
	if c.Kind == Receiver {
		schema = s.Receiver
	}
	found := false
	for _, w := range ws {
		if w.Schema != schema || w.Table != spec.Writes {
			return newError(CodeWrongTable, c.Kind, 0, "the %s may only write %s; it writes %s.%s", c.Kind, spec.Writes, w.Schema, w.Table)
		}
		if c.Kind != Receiver && w.Op != "Update" {
			return newError(CodeWrongKind, c.Kind, 0, "the %s may only update jobs; it does an %s", c.Kind, strings.ToUpper(w.Op))
		}
		found = true
	}
	if !found {
		return newError(CodeWrongTable, c.Kind, 0, "the %s must write %s; it writes nothing", c.Kind, spec.Writes)
	}
	return nil
}

// pgError turns a Postgres refusal into an *Error, with its position in
// the reader's text; anything else is returned as it is.
func (c *Checked) pgError(err error, step string) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return fmt.Errorf("check %s: %s: %w", c.Kind, step, err)
	}
	return c.refusal(pe)
}

func (c *Checked) refusal(pe *pgconn.PgError) *Error {
	code := CodeRefused
	switch {
	case pe.Code == "42501":
		code = CodeDenied
	case pe.Code == "57014", pe.Code == "55P03":
		code = CodeTimeout
	case pe.Code == "53400", pe.Code == "53200", pe.Code == "54000", pe.Code == "54001":
		code = CodeTooBig
	case pe.Code == "42P01", pe.Code == "42703", pe.Code == "42883", pe.Code == "3F000":
		code = CodeUnknownName
	case strings.HasPrefix(pe.Code, "42"):
		code = CodeSyntax
	}
	msg := pe.Message
	if code == CodeTimeout && pe.Code == "57014" {
		msg = "it ran longer than the statement timeout (" + settingValue("statement_timeout") + ")"
	}
	if code == CodeTimeout && pe.Code == "55P03" {
		msg = "it waited for a lock longer than the lock timeout (" + settingValue("lock_timeout") + ")"
	}
	return &Error{Code: code, Kind: c.Kind, SQLState: pe.Code, Position: c.rw.origPosition(int(pe.Position)),
		Message: fmt.Sprintf("Postgres refused the %s: %s", c.Kind, msg)}
}

func settingValue(name string) string {
	for _, s := range Settings {
		if s.Name == name {
			return s.Value
		}
	}
	return ""
}
