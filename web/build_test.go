package web_test

import (
	"context"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/templates"
	"github.com/fencelab/fencelab/web"
)

// TestBuild_EditorsAreTheSandboxs: Build it has an editor per statement
// kind, in the article's order, each starting from the sandbox's
// leases-alone text, with ours beside it and the sandbox's spec of what
// it may use and must give back; and a row per check case.
func TestBuild_EditorsAreTheSandboxs(t *testing.T) {
	b := web.BuildView()
	kinds := sandbox.Kinds()
	if len(b.Editors) != len(kinds) {
		t.Fatalf("%d editors, want %d", len(b.Editors), len(kinds))
	}
	start, ours := sandbox.Start(), sandbox.Ours()
	for i, k := range kinds {
		e, spec := b.Editors[i], must(sandbox.SpecOf(k))
		if e.Kind != k.String() || e.Label == "" || e.Start != start.Text(k) || e.Ours != ours.Text(k) {
			t.Errorf("editor %d is %q %q, want %s from the sandbox's start and ours", i, e.Kind, e.Label, k)
		}
		if e.Writes != spec.Writes || e.Contract != spec.Contract || !slices.Equal(e.Verbs, spec.Verbs) {
			t.Errorf("%s: writes %q, verbs %v, contract %q: not the sandbox's", k, e.Writes, e.Verbs, e.Contract)
		}
		if len(e.Params) != len(spec.Params) || len(e.Returns) != len(spec.Columns) {
			t.Fatalf("%s: %d params and %d columns, want %d and %d", k, len(e.Params), len(e.Returns), len(spec.Params), len(spec.Columns))
		}
		for j, p := range spec.Params {
			if e.Params[j] != (templates.Param{Name: p.Name, Type: p.Type, Doc: p.Doc}) || p.Doc == "" {
				t.Errorf("%s: param %d is %+v, want %+v", k, j, e.Params[j], p)
			}
		}
		for j, c := range spec.Columns {
			if e.Returns[j].Name != c.Name || !slices.Equal(e.Returns[j].Types, c.Types) {
				t.Errorf("%s: column %d is %+v, want %s %v", k, j, e.Returns[j], c.Name, c.Types)
			}
		}
	}
	if b.MaxTextBytes != sandbox.MaxTextBytes {
		t.Errorf("MaxTextBytes %d, want the sandbox's %d", b.MaxTextBytes, sandbox.MaxTextBytes)
	}
	cases := experiments.CheckCases()
	if len(b.Cases) != len(cases) {
		t.Fatalf("%d cases, want %d", len(b.Cases), len(cases))
	}
	for i, c := range cases {
		if b.Cases[i] != (templates.CheckCase{Case: string(c), Title: c.Title()}) {
			t.Errorf("case %d is %+v, want %s %q", i, b.Cases[i], c, c.Title())
		}
	}
}

func must[T any](v T, ok bool) T {
	if !ok {
		panic("no such kind")
	}
	return v
}

// TestBuild_TablesAreTheSchemas: the tables' columns the page lists are
// those a run's schemas hold once set up (every migration applied), in
// order, with their types, read from a real setup's catalog.
func TestBuild_TablesAreTheSchemas(t *testing.T) {
	b := web.BuildView()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s := judge.Schemas{Jobs: pgtest.Schema(t), Receiver: pgtest.Schema(t)}
	if err := judge.Setup(ctx, pool, s); err != nil {
		t.Fatal(err)
	}
	schemaOf := map[string]string{"jobs": s.Jobs, "deliveries": s.Receiver}
	if len(b.Tables) != len(schemaOf) {
		t.Fatalf("%d tables, want %d", len(b.Tables), len(schemaOf))
	}
	short := map[string]string{"timestamp with time zone": "timestamptz"}
	for _, tb := range b.Tables {
		rows, err := pool.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
			WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, schemaOf[tb.Name], tb.Name)
		if err != nil {
			t.Fatal(err)
		}
		var want []templates.TableColumn
		for rows.Next() {
			var c templates.TableColumn
			if err := rows.Scan(&c.Name, &c.Type); err != nil {
				t.Fatal(err)
			}
			if s, ok := short[c.Type]; ok {
				c.Type = s
			}
			want = append(want, c)
		}
		rows.Close()
		if len(want) == 0 {
			t.Fatalf("the setup made no table %s", tb.Name)
		}
		if !slices.Equal(tb.Columns, want) {
			t.Errorf("the page lists %s as %v; the setup made %v", tb.Name, tb.Columns, want)
		}
	}
}

// TestBuild_NoCustomSQLSaysSoAndDisablesCheck: a server that runs no
// reader's SQL says so in Build it's body, and its Check button is
// disabled; one that does says nothing of it.
func TestBuild_NoCustomSQLSaysSoAndDisablesCheck(t *testing.T) {
	for _, off := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := startWith(t, ln, nil, web.Options{NoCustomSQL: off})
		_, page := get(t, base+"/build")
		says := strings.Contains(page, "This server does not run readers") && strings.Contains(page, "(--no-custom-sql).")
		disabled := regexp.MustCompile(`<button[^>]*data-testid="build-check"[^>]*disabled`).MatchString(page)
		if says != off || disabled != off {
			t.Errorf("NoCustomSQL %v: the page says so %v, Check disabled %v", off, says, disabled)
		}
		if !strings.Contains(page, `data-testid="build-claim-text"`) {
			t.Errorf("NoCustomSQL %v: no claim editor", off)
		}
	}
}

// TestBuild_BodyCarriesEveryTestID: the page has Build it folded, naming
// where its body is; the body, from GET /build, has every element
// build.js and the browser tests read, for every kind and every case.
func TestBuild_BodyCarriesEveryTestID(t *testing.T) {
	base := start(t)
	_, page := get(t, base+"/")
	for _, want := range []string{`data-testid="build"`, `data-testid="build-body"`, `data-src="/build"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(page, `data-testid="build-claim-text"`) {
		t.Error("the page carries Build it's body: it is for the readers who open it")
	}
	resp, body := get(t, base+"/build")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /build: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	want := []string{"build-root", "build-note", "build-reset", "build-compare", "build-link", "build-tables", "build-table-jobs", "build-table-deliveries",
		"build-check", "build-progress", "build-result", "build-words", "build-broken", "build-broken-h"}
	for _, k := range sandbox.Kinds() {
		for _, part := range []string{"", "-text", "-ours", "-error", "-spec", "-params"} {
			want = append(want, "build-"+k.String()+part)
		}
	}
	want = append(want, "build-claim-returns")
	for _, c := range experiments.CheckCases() {
		for _, part := range []string{"", "-state", "-call", "-commit", "-final", "-open"} {
			want = append(want, "build-case-"+string(c)+part)
		}
	}
	for _, id := range want {
		if !strings.Contains(body, `data-testid="`+id+`"`) {
			t.Errorf("Build it's body lacks data-testid=%q", id)
		}
	}
}
