package sandbox

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// This file is the sandbox's allow-list: what a reader's statement may
// touch, checked on Postgres's own reading of it — the query tree after
// parse analysis and rewriting, in which every table, function, operator
// and type is resolved to its oid — before anything is planned. Planning
// folds constant expressions (it would run repeat('x', 600000000) while
// the check waits), so the check never plans: nothing the reader wrote
// runs until the tree has passed.
//
// What is not named here is refused, with the name of what was used.

// AllowedFunctions are the functions, in pg_catalog, a reader's statement
// may call, by name (every overload): the clock and intervals, numbers
// and comparisons, text and jsonb. Casts between AllowedTypes, operators
// on them, COALESCE, NULLIF, GREATEST, LEAST and CASE are allowed besides.
var AllowedFunctions = []string{
	// the clock and intervals
	"now", "clock_timestamp", "statement_timestamp", "transaction_timestamp",
	"date_trunc", "date_part", "extract", "date_bin", "age", "isfinite",
	"make_interval", "justify_interval", "justify_hours", "justify_days", "to_timestamp", "timezone",
	// numbers
	"abs", "mod", "div", "sign", "ceil", "ceiling", "floor", "round", "trunc", "num_nulls", "num_nonnulls",
	// aggregates
	"count", "max", "min", "sum", "bool_and", "bool_or", "every",
	// text
	"length", "char_length", "character_length", "lower", "upper", "initcap",
	"btrim", "ltrim", "rtrim", "left", "right", "substr", "substring", "strpos", "position",
	"starts_with", "concat", "concat_ws", "split_part", "to_char", "textlen",
	// jsonb (and json)
	"to_jsonb", "to_json", "jsonb_build_object", "jsonb_build_array", "json_build_object", "json_build_array",
	"jsonb_object", "jsonb_set", "jsonb_set_lax", "jsonb_insert", "jsonb_extract_path", "jsonb_extract_path_text",
	"jsonb_typeof", "jsonb_strip_nulls", "jsonb_array_length", "jsonb_object_field", "jsonb_object_field_text",
	"jsonb_array_element", "jsonb_array_element_text", "json_extract_path_text", "json_object_field_text",
}

// AllowedTypes are the types a statement's values may have, with their
// arrays, besides the types of the run's jobs and deliveries columns.
var AllowedTypes = []string{
	"boolean", "smallint", "integer", "bigint", "numeric", "real", "double precision",
	"text", "character varying", "character", "name", "unknown", "record",
	"interval", "timestamp with time zone", "timestamp without time zone", "date", "time without time zone",
	"jsonb", "json",
	// the polymorphic types operators are declared over (text || anynonarray, = ANY (anyarray))
	"anyelement", "anynonarray", "anyarray", "anycompatible", "anycompatiblearray", "anycompatiblenonarray",
}

// maxSQLValueClock bounds the SQL-standard value functions (CURRENT_TIMESTAMP,
// LOCALTIME…) allowed: the clock's, by their number in Postgres's
// SQLValueFunctionOp (0–8); CURRENT_USER, SESSION_USER, CURRENT_SCHEMA
// and the rest are not.
const maxSQLValueClock = 8

// regTypes are the types whose input function looks a name up in the
// catalog while the statement is parsed, before the tree can be read:
// refused by name in the text, so that not even the lookup happens.
var regTypes = []string{"regclass", "regproc", "regprocedure", "regoper", "regoperator", "regtype",
	"regrole", "regnamespace", "regconfig", "regdictionary", "regcollation"}

// allowedNodes are the kinds of node a statement's tree may hold; any
// other is refused (nodeWords names the common ones for the reader).
var allowedNodes = map[string]bool{
	"QUERY": true, "RANGETBLENTRY": true, "RANGETBLFUNCTION": true, "RANGETBLREF": true, "ALIAS": true,
	"FROMEXPR": true, "JOINEXPR": true, "TARGETENTRY": true, "SORTGROUPCLAUSE": true, "ROWMARKCLAUSE": true,
	"COMMONTABLEEXPR": true, "ONCONFLICTEXPR": true, "INFERENCEELEM": true, "SETOPERATIONSTMT": true,
	"VAR": true, "CONST": true, "PARAM": true, "OPEXPR": true, "DISTINCTEXPR": true, "NULLIFEXPR": true,
	"SCALARARRAYOPEXPR": true, "BOOLEXPR": true, "SUBLINK": true, "FUNCEXPR": true, "NAMEDARGEXPR": true, "AGGREF": true,
	"RELABELTYPE": true, "COERCEVIAIO": true, "CASEEXPR": true, "CASEWHEN": true, "CASETESTEXPR": true,
	"ARRAYEXPR": true, "ROWEXPR": true, "COALESCEEXPR": true, "MINMAXEXPR": true, "SQLVALUEFUNCTION": true,
	"NULLTEST": true, "BOOLEANTEST": true, "FIELDSELECT": true, "SUBSCRIPTINGREF": true,
}

// nodeWords names, for a refusal, nodes a reader may write that are not
// allowed.
var nodeWords = map[string]string{
	"WINDOWFUNC": "a window function", "WINDOWCLAUSE": "a window", "TABLESAMPLECLAUSE": "TABLESAMPLE",
	"XMLEXPR": "an XML expression", "GROUPINGSET": "GROUPING SETS", "GROUPINGFUNC": "GROUPING",
	"ROWCOMPAREEXPR": "a row comparison", "ARRAYCOERCEEXPR": "an array cast", "CONVERTROWTYPEEXPR": "a row cast",
	"COERCETODOMAIN": "a domain", "TABLEFUNC": "a table function", "NEXTVALUEEXPR": "a sequence",
}

// typeFields are the fields of the allowed nodes that hold type oids.
var typeFields = []string{"consttype", "vartype", "paramtype", "funcresulttype", "opresulttype", "resulttype",
	"casetype", "coalescetype", "minmaxtype", "array_typeid", "element_typeid", "row_typeid", "aggtype",
	"typeId", "refcontainertype", "refelemtype", "refrestype", "ctecoltypes", "coltypes", "colTypes", "aggargtypes"}

// allowList is the allow-list resolved to oids in one database, for one
// run's tables.
type allowList struct {
	types, funcs, ops map[uint32]bool
	tables            map[uint32]write // the run's jobs and deliveries: schema and table
}

// loadAllowList resolves the allow-list on conn (a connection of the
// run's role: the catalog is readable by every role).
func loadAllowList(ctx context.Context, conn *pgx.Conn, s judge.Schemas) (*allowList, error) {
	jobs := pgx.Identifier{s.Jobs, "jobs"}.Sanitize()
	deliveries := pgx.Identifier{s.Receiver, "deliveries"}.Sanitize()
	var types, funcs, ops []uint32
	var jobsOid, delOid uint32
	err := conn.QueryRow(ctx, `WITH base AS (
  SELECT to_regtype(n)::oid AS oid FROM unnest($1::text[]) n
  UNION SELECT a.atttypid FROM pg_attribute a
   WHERE a.attrelid IN (to_regclass($2)::oid, to_regclass($3)::oid) AND a.attnum > 0 AND NOT a.attisdropped
), t AS (
  SELECT oid FROM base WHERE oid IS NOT NULL
  UNION SELECT reltype FROM pg_class WHERE oid IN (to_regclass($2)::oid, to_regclass($3)::oid)
  UNION SELECT y.typarray FROM pg_type y JOIN base b ON y.oid = b.oid WHERE y.typarray <> 0
)
SELECT (SELECT array_agg(oid) FROM t),
       (SELECT array_agg(p.oid) FROM pg_proc p
         WHERE p.pronamespace = 'pg_catalog'::regnamespace
           AND (p.proname = ANY($4::text[])
                OR p.oid IN (SELECT c.castfunc FROM pg_cast c WHERE c.castsource IN (SELECT oid FROM t) AND c.casttarget IN (SELECT oid FROM t)))),
       (SELECT array_agg(o.oid) FROM pg_operator o
         WHERE o.oprnamespace = 'pg_catalog'::regnamespace
           AND (o.oprleft = 0 OR o.oprleft IN (SELECT oid FROM t)) AND o.oprright IN (SELECT oid FROM t)
           AND o.oprresult IN (SELECT oid FROM t)),
       coalesce(to_regclass($2)::oid, 0), coalesce(to_regclass($3)::oid, 0)`,
		AllowedTypes, jobs, deliveries, AllowedFunctions).Scan(&types, &funcs, &ops, &jobsOid, &delOid)
	if err != nil {
		return nil, fmt.Errorf("check: read the allow-list: %w", err)
	}
	set := func(oids []uint32) map[uint32]bool {
		m := make(map[uint32]bool, len(oids))
		for _, o := range oids {
			m[o] = true
		}
		return m
	}
	al := &allowList{types: set(types), funcs: set(funcs), ops: set(ops), tables: map[uint32]write{}}
	if jobsOid != 0 {
		al.tables[jobsOid] = write{Schema: s.Jobs, Table: "jobs"}
	}
	if delOid != 0 {
		al.tables[delOid] = write{Schema: s.Receiver, Table: "deliveries"}
	}
	return al, nil
}

// allowList returns the role's allow-list, read from the catalog on conn
// the first time and kept: the run's tables and their types do not change
// while the role lives, and a solution's four checks need it four times.
func (r *Role) allowList(ctx context.Context, conn *pgx.Conn) (*allowList, error) {
	r.allowMu.Lock()
	defer r.allowMu.Unlock()
	if r.allow == nil {
		al, err := loadAllowList(ctx, conn, r.schemas)
		if err != nil {
			return nil, err
		}
		r.allow = al
	}
	return r.allow, nil
}

// treeSettings make Postgres send the rewritten query tree of what it
// parses to the client, as a LOG message, on the check's own connection.
var treeSettings = []string{"SET debug_print_rewritten = on", "SET debug_pretty_print = off", "SET client_min_messages = log"}

const treeHeader = "rewritten parse tree:"

// refusedName is what a statement used that the allow-list lacks: its
// kind ("call", "use") and the oid to name it by, or words.
type refusedName struct {
	what  string // "function", "operator", "type", "relation", or "" for words
	oid   uint32
	words string
	pos   int // the byte offset in the SQL sent, or -1
}

// MaxQueries and MaxNodes bound a statement's shape: the queries in it
// (itself, its sub-selects and CTEs together) and the nodes of its query
// tree. Ours use at most 2 queries and 261 to 553 nodes (the claim); the
// node bound is some 20 times that, near what 8 KiB of text can hold. A statement that nests a sub-select doubling a text 20 times
// has 22 queries: Postgres folds such constants while it plans (BIND),
// where the statement timeout is slow to reach it, so the shape is
// refused before it runs. Nested 10 times, all the bound lets through,
// it builds 16 KiB; a (VALUES …) in FROM is a query too, so the bound
// leaves room for cross joins of a few of them. The backend's memory cap
// is the floor under what any shape builds at run time.
const (
	MaxQueries = 12
	MaxNodes   = 10000
)

// vetTree holds the parsed trees to the allow-list and returns the
// tables they write, or the first thing they use that it lacks.
func (al *allowList) vetTree(trees []*tnode) ([]write, *refusedName) {
	var ws []write
	var bad *refusedName
	var walk func(n *tnode)
	refuse := func(r refusedName) {
		if bad == nil {
			bad = &r
		}
	}
	queries, nodes := 0, 0
	walk = func(n *tnode) {
		if n == nil || bad != nil {
			return
		}
		if nodes++; nodes > MaxNodes {
			refuse(refusedName{words: fmt.Sprintf("more than %d parts (its query tree's nodes): ours use at most 553", MaxNodes), pos: -1})
			return
		}
		if n.tag == "" { // a list
			for _, it := range n.items {
				walk(it)
			}
			return
		}
		if n.tag == scalarTag {
			return
		}
		pos := n.int("location", -1)
		if !allowedNodes[n.tag] {
			w := nodeWords[n.tag]
			if w == "" {
				w = "this kind of expression (" + strings.ToLower(n.tag) + ")"
			}
			refuse(refusedName{words: w, pos: pos})
			return
		}
		switch n.tag {
		case "QUERY":
			if queries++; queries > MaxQueries {
				refuse(refusedName{words: fmt.Sprintf("more than %d queries (itself, its sub-selects and CTEs together)", MaxQueries), pos: -1})
				return
			}
			rtable := n.field("rtable").list()
			switch ct := n.int("commandType", 0); ct {
			case 1: // SELECT
			case 2, 3: // UPDATE, INSERT
				i := n.int("resultRelation", 0)
				if i < 1 || i > len(rtable) {
					refuse(refusedName{words: "a write the check cannot read", pos: -1})
					return
				}
				w := al.tables[rtable[i-1].uint("relid")]
				w.Op = map[int]string{2: "Update", 3: "Insert"}[ct]
				if w.Table == "" {
					w.Table = "another table"
				}
				ws = append(ws, w)
			case 4:
				refuse(refusedName{words: "DELETE", pos: -1})
				return
			default:
				refuse(refusedName{words: "a statement other than UPDATE, INSERT or WITH", pos: -1})
				return
			}
			if !n.field("utilityStmt").null() {
				refuse(refusedName{words: "a utility statement", pos: -1})
				return
			}
		case "RANGETBLENTRY":
			switch n.int("rtekind", -1) {
			case 0: // a relation
				if _, ok := al.tables[n.uint("relid")]; !ok {
					refuse(refusedName{what: "relation", oid: n.uint("relid"), pos: -1})
					return
				}
			case 1, 2, 3, 5, 6: // a subquery, a join, a function, VALUES, a CTE
			default:
				refuse(refusedName{words: "this kind of FROM item", pos: -1})
				return
			}
		case "FUNCEXPR":
			if o := n.uint("funcid"); !al.funcs[o] {
				refuse(refusedName{what: "function", oid: o, pos: pos})
				return
			}
		case "AGGREF":
			if o := n.uint("aggfnoid"); !al.funcs[o] {
				refuse(refusedName{what: "function", oid: o, pos: pos})
				return
			}
		case "OPEXPR", "DISTINCTEXPR", "NULLIFEXPR", "SCALARARRAYOPEXPR":
			if o := n.uint("opno"); !al.ops[o] {
				refuse(refusedName{what: "operator", oid: o, pos: pos})
				return
			}
		case "SORTGROUPCLAUSE":
			for _, f := range []string{"eqop", "sortop"} {
				if o := n.uint(f); o != 0 && !al.ops[o] {
					refuse(refusedName{what: "operator", oid: o, pos: -1})
					return
				}
			}
		case "SQLVALUEFUNCTION":
			if op := n.int("op", -1); op < 0 || op > maxSQLValueClock {
				refuse(refusedName{words: sqlValueName(op), pos: pos})
				return
			}
		}
		for _, f := range typeFields {
			for _, o := range n.oids(f) {
				if o != 0 && !al.types[o] {
					refuse(refusedName{what: "type", oid: o, pos: pos})
					return
				}
			}
		}
		for _, f := range n.fields {
			walk(f.v)
		}
	}
	for _, t := range trees {
		walk(t)
	}
	return ws, bad
}

func sqlValueName(op int) string {
	names := map[int]string{9: "CURRENT_ROLE", 10: "CURRENT_USER", 11: "USER", 12: "SESSION_USER", 13: "CURRENT_CATALOG", 14: "CURRENT_SCHEMA"}
	if n, ok := names[op]; ok {
		return n
	}
	return "this SQL value function"
}

// allowCheck reads Postgres's tree of the statement prepared on conn and
// holds it to the allow-list, before anything is planned or run. It
// returns the tables the statement writes.
func (c *Vetted) allowCheck(ctx context.Context, conn *pgx.Conn, r *Role, notices []string) ([]write, error) {
	var trees []*tnode
	for _, n := range notices {
		t, ok := strings.CutPrefix(n, treeHeader+"\n")
		if !ok {
			continue
		}
		tree, err := parseTree(t)
		if err != nil {
			return nil, newError(CodeForbiddenCall, c.Kind, 0, "the %s could not be read by the check (%v); write it more plainly", c.Kind, err)
		}
		trees = append(trees, tree)
	}
	if len(trees) == 0 {
		return nil, fmt.Errorf("check %s: Postgres sent no query tree", c.Kind)
	}
	al, err := r.allowList(ctx, conn)
	if err != nil {
		return nil, err
	}
	ws, bad := al.vetTree(trees)
	if bad == nil {
		return ws, nil
	}
	pos := 0
	if bad.pos >= 0 && bad.pos <= len(c.SQL) {
		pos = c.rw.origPosition(utf8.RuneCountInString(c.SQL[:bad.pos]) + 1)
	}
	name := bad.words
	if bad.what != "" {
		name = al.name(ctx, conn, bad.what, bad.oid)
	}
	return nil, newError(CodeForbiddenCall, c.Kind, pos, "the %s may not use %s: %s", c.Kind, name, allowedWords)
}

// allowedWords says what a statement may use, in one clause.
const allowedWords = "a statement may read and write only its run's jobs and deliveries, and use only the clock, intervals, numbers, comparisons, COALESCE and CASE, and text and jsonb functions"

// name names an oid for a refusal, as Postgres prints it.
func (al *allowList) name(ctx context.Context, conn *pgx.Conn, what string, oid uint32) string {
	q := map[string]string{
		"function": "SELECT $1::oid::regprocedure::text",
		"operator": "SELECT $1::oid::regoperator::text",
		"type":     "SELECT format_type($1::oid, NULL)",
		"relation": "SELECT $1::oid::regclass::text",
	}[what]
	var s string
	if err := conn.QueryRow(ctx, q, oid).Scan(&s); err != nil || s == "" {
		s = "oid " + strconv.FormatUint(uint64(oid), 10)
	}
	words := map[string]string{"function": "the function", "operator": "the operator", "type": "the type", "relation": "the relation"}[what]
	return words + " " + s
}

// regTypeName refuses a reg* type named anywhere in the text (see regTypes).
func regTypeName(c *Vetted) error {
	for _, n := range c.rw.names {
		if slices.Contains(regTypes, strings.ToLower(n.name)) {
			return newError(CodeForbiddenCall, c.Kind, n.pos, "the %s may not use the type %s: %s", c.Kind, strings.ToLower(n.name), allowedWords)
		}
	}
	return nil
}

// collectNotices returns a notice handler that keeps the LOG messages a
// connection receives, and the list they go to.
func collectNotices() (func(*pgconn.PgConn, *pgconn.Notice), *[]string) {
	var got []string
	return func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if n.Severity == "LOG" && n.Message == treeHeader {
			got = append(got, n.Message+"\n"+n.Detail)
		}
	}, &got
}

// scalarTag is the tag of a scalar token's tnode: no node is named so.
const scalarTag = "\x00scalar"

// tnode is a node of Postgres's text form of a tree (outfuncs.c): a node
// {TAG :field value …}, a list ( … ), or a scalar token.
type tnode struct {
	tag    string // "" for a list, scalarTag for a scalar
	text   string // a scalar's token
	fields []tfield
	items  []*tnode
}

type tfield struct {
	name string
	v    *tnode
}

func (n *tnode) field(name string) *tnode {
	if n == nil {
		return nil
	}
	for _, f := range n.fields {
		if f.name == name {
			return f.v
		}
	}
	return nil
}

func (n *tnode) null() bool { return n == nil || (n.tag == scalarTag && n.text == "<>") }

func (n *tnode) list() []*tnode {
	if n == nil || n.tag != "" {
		return nil
	}
	return n.items
}

func (n *tnode) int(name string, def int) int {
	v := n.field(name)
	if v == nil || v.tag != scalarTag {
		return def
	}
	i, err := strconv.Atoi(v.text)
	if err != nil {
		return def
	}
	return i
}

func (n *tnode) uint(name string) uint32 {
	i := n.int(name, 0)
	if i < 0 {
		return 0
	}
	return uint32(i)
}

// oids returns a field's oid, or its list of oids.
func (n *tnode) oids(name string) []uint32 {
	v := n.field(name)
	switch {
	case v == nil:
		return nil
	case v.tag == scalarTag:
		if i, err := strconv.ParseUint(v.text, 10, 32); err == nil {
			return []uint32{uint32(i)}
		}
	case v.tag == "":
		var out []uint32
		for _, it := range v.items {
			if i, err := strconv.ParseUint(it.text, 10, 32); err == nil {
				out = append(out, uint32(i))
			}
		}
		return out
	}
	return nil
}

// parseTree reads one tree in outfuncs.c's text form. A token ends at
// white space or a bracket; a backslash escapes the character after it.
// Quoted names cannot hold white space, brackets or backslashes (the
// rewrite refuses them), so Postgres's line wrapping, which breaks at
// spaces, never splits a token.
func parseTree(s string) (*tnode, error) {
	toks := tokens(s)
	i := 0
	var value func(depth int) (*tnode, error)
	value = func(depth int) (*tnode, error) {
		if depth > 1000 {
			return nil, fmt.Errorf("nested too deeply")
		}
		if i >= len(toks) {
			return nil, fmt.Errorf("it ends early")
		}
		t := toks[i]
		i++
		switch {
		case t == "(":
			l := &tnode{}
			for i < len(toks) && toks[i] != ")" {
				v, err := value(depth + 1)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, v)
			}
			if i >= len(toks) {
				return nil, fmt.Errorf("a list is never closed")
			}
			i++
			return l, nil
		case t == "{":
			if i >= len(toks) {
				return nil, fmt.Errorf("it ends early")
			}
			n := &tnode{tag: toks[i]}
			i++
			for i < len(toks) && toks[i] != "}" {
				name, ok := strings.CutPrefix(toks[i], ":")
				if !ok {
					return nil, fmt.Errorf("a field without a name (%.20q)", toks[i])
				}
				i++
				if name == "constvalue" && i < len(toks) && toks[i] != "<>" {
					// a length, then the datum's bytes: [ b b … ]
					i++
					if i < len(toks) && toks[i] == "[" {
						for i < len(toks) && toks[i] != "]" {
							i++
						}
						i++
					}
					n.fields = append(n.fields, tfield{name: name})
					continue
				}
				v, err := value(depth + 1)
				if err != nil {
					return nil, err
				}
				n.fields = append(n.fields, tfield{name: name, v: v})
			}
			if i >= len(toks) {
				return nil, fmt.Errorf("a node is never closed")
			}
			i++
			return n, nil
		case t == ")" || t == "}":
			return nil, fmt.Errorf("an unexpected %s", t)
		}
		return &tnode{tag: scalarTag, text: t}, nil
	}
	v, err := value(0)
	if err != nil {
		return nil, err
	}
	if i != len(toks) {
		return nil, fmt.Errorf("more follows the tree")
	}
	return v, nil
}

func tokens(s string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case ' ', '\n', '\t', '\r':
			flush()
		case '(', ')', '{', '}':
			flush()
			out = append(out, string(c))
		case '\\':
			if i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			}
		default:
			cur.WriteByte(c)
		}
	}
	flush()
	return out
}
