package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// Vetted is a reader's statement that passed Vet: safe to hand to Exec
// on a connection of the same role.
type Vetted struct {
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
	schemas  judge.Schemas // the run's: its names never reach the reader
	rw       *rewritten
	resetSQL string // what Exec sends first
}

// resetSQL puts a role's session back to its settings, whatever the
// statements before did: the server's own text, in one simple query.
func resetSQL(s judge.Schemas) string {
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

// checkName is the prepared statement Vet describes and explains, on a
// connection of its own.
const checkName = "sandbox_check"

// Vet decides whether a reader's statement may run as the role for
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
func (r *Role) Vet(ctx context.Context, kind Kind, text string) (_ *Vetted, err error) {
	defer func() { err = located(err, text) }()
	c, err := Load(kind, text, r.schemas)
	if err != nil {
		return nil, err
	}
	spec, _ := SpecOf(kind)
	if err := regTypeName(c); err != nil {
		return nil, err
	}
	cfg := r.ConnConfig()
	onNotice, notices := collectNotices()
	cfg.OnNotice = onNotice
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect as %s: %w", r, engine.ErrUnavailable)
	}
	defer conn.Close(context.Background()) //nolint:errcheck // a connection of its own: nothing to keep
	for _, s := range treeSettings {
		if _, err := conn.Exec(ctx, s); err != nil {
			return nil, fmt.Errorf("check %s: %w", kind, err)
		}
	}
	desc, err := conn.PgConn().Prepare(ctx, checkName, c.SQL, c.oids)
	if err != nil {
		return nil, c.pgError(err, "prepare")
	}
	writes, err := c.allowCheck(ctx, conn, r, *notices)
	if err != nil {
		return nil, err
	}
	for _, f := range desc.Fields {
		c.Columns = append(c.Columns, f.Name)
	}
	if err := c.validateColumns(spec, desc.Fields); err != nil {
		return nil, err
	}
	if err := c.validateWrites(spec, r.schemas, writes); err != nil {
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

// validateColumns holds the statement to the columns the kind's reader reads.
func (c *Vetted) validateColumns(spec Spec, fields []pgconn.FieldDescription) error {
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

// validateWrites holds the plan to the kind's one table: it must write it,
// and nothing else.
func (c *Vetted) validateWrites(spec Spec, s judge.Schemas, ws []write) error {
	schema := s.Jobs
	if c.Kind == Receiver {
		schema = s.Receiver
	}
	found := false
	for _, w := range ws {
		if w.Schema != schema || w.Table != spec.Writes {
			return newError(CodeWrongTable, c.Kind, 0, "the %s may only write %s; it writes %s", c.Kind, spec.Writes, w.Table)
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
func (c *Vetted) pgError(err error, step string) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return fmt.Errorf("check %s: %s: %w", c.Kind, step, err)
	}
	return c.refusal(pe)
}

func (c *Vetted) refusal(pe *pgconn.PgError) *Error {
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
	if hidesName(pe) {
		// One answer whether the name exists or not, so that no statement
		// learns which schemas, tables and roles there are by trying.
		code = CodeDenied
		msg = "it names a schema, table or role that is not its run's (" + allowedWords + ", by their names alone)"
	}
	if code == CodeTimeout && pe.Code == "57014" {
		msg = "it ran longer than the statement timeout (" + settingValue("statement_timeout") + ")"
	}
	if code == CodeTimeout && pe.Code == "55P03" {
		msg = "it waited for a lock longer than the lock timeout (" + settingValue("lock_timeout") + ")"
	}
	return &Error{Code: code, Kind: c.Kind, SQLState: pe.Code, Position: c.rw.origPosition(int(pe.Position)),
		Message: fmt.Sprintf("Postgres refused the %s: %s", c.Kind, protocol.Cut(c.ownTerms(msg), MaxMessageBytes))}
}

// MaxMessageBytes is the longest Postgres message a refusal carries: a
// message may quote a value the statement built ("invalid input syntax
// for type integer: …" of a 2 MiB text), and a refusal travels in events
// and answers.
const MaxMessageBytes = 1 << 10

// ownTerms puts a Postgres message in the reader's terms: the run's
// schemas, which the reader never names (its statements use jobs and
// deliveries alone), are taken out of it.
func (c *Vetted) ownTerms(msg string) string {
	for _, sc := range []string{c.schemas.Jobs, c.schemas.Receiver} {
		if sc == "" {
			continue
		}
		msg = strings.NewReplacer(`"`+sc+`".`, "", sc+".", "", `"`+sc+`"`, "the run's schema", sc, "the run's schema").Replace(msg)
	}
	return msg
}

// hidesName says whether a Postgres error would tell whether a name outside
// the run's own exists: a schema that does not exist or may not be used, a
// qualified table that does not exist, a role that does not exist.
func hidesName(pe *pgconn.PgError) bool {
	switch pe.Code {
	case "3F000":
		return true
	case "42501":
		return strings.HasPrefix(pe.Message, "permission denied for schema")
	case "42P01":
		return strings.Contains(pe.Message, ".")
	case "42704":
		return strings.HasPrefix(pe.Message, "role ")
	}
	return false
}

func settingValue(name string) string {
	for _, s := range Settings {
		if s.Name == name {
			return s.Value
		}
	}
	return ""
}

// settingDuration is a duration setting of Settings (statement_timeout's
// "2s"), or 0.
func settingDuration(name string) time.Duration {
	d, _ := time.ParseDuration(settingValue(name))
	return d
}
