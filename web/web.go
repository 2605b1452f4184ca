// Package web serves the playground's pages: it renders templates with the
// session's state and serves the embedded static files under a content
// version, cacheable for a year. Routes:
//
//	GET /                      a new session's playground, as its driver (setup from the query)
//	GET /s/:id                 an existing session's playground (a viewer, unless the page holds its token)
//	GET /s/:id/runs/:run/replay.html   one run as a self-contained HTML file that replays it offline
//	GET /build                 Build it's editors and check table, an HTML fragment the page loads when the reader opens it
//	GET /join                  a student's way into a class (?code=ABC234 fills the code in)
//	GET /join/qr.svg           the join link of this server as a QR code, ?code=ABC234
//	GET /classes/new           the teacher's "Start a class"
//	GET /classes/:id           the teacher's board (the teacher's token rides in the fragment, never to here)
//	GET /static/:version/*     CSS, ES modules, icons
package web

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/class"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/session"
	"github.com/fencelab/fencelab/server/wire"
	"github.com/fencelab/fencelab/static"
	"github.com/fencelab/fencelab/templates"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

// Options configures the pages.
type Options struct {
	// FrameAncestors, if set, restricts which origins (such as
	// https://blog.example.com) may embed the page in an iframe; the
	// server's own always may. Unset, any site may: the embed code works
	// as pasted.
	FrameAncestors []string
	// CommandOrigins lists the host pages allowed to drive an embedded page
	// by postMessage (setup, run). Any page may frame it; only these may
	// command it.
	CommandOrigins []string
	// NoCustomSQL says the server does not run readers' SQL
	// (--no-custom-sql): the page's Build it section says so, and its
	// Check button is disabled.
	NoCustomSQL bool

	// netFunc, if set, is the machine's network as the watch link's
	// address is chosen from (see chooseAddrs); tests set it.
	netFunc func() netView
}

// Register adds the page routes to e. It is the server's Config.PagesFunc.
func Register(opts Options) func(e *echo.Echo, s *api.Server) {
	return func(e *echo.Echo, s *api.Server) {
		h := &handler{s: s, opts: opts}
		// Pages and their files go compressed to whoever accepts it: a
		// phone on a slow network loads a third of the bytes.
		gz := middleware.GzipWithConfig(middleware.GzipConfig{MinLength: 1024})
		e.GET("/", h.index, gz)
		e.GET("/s/:id", h.sessionPage, gz)
		e.GET("/s/:id/runs/:run/replay.html", h.replay, gz)
		e.GET("/s/:id/qr.svg", h.qr, gz)
		e.GET("/build", h.build, gz)
		e.GET("/join", h.joinPage, gz)
		e.GET("/join/qr.svg", h.joinQR, gz)
		e.GET("/classes/new", h.newClassPage, gz)
		e.GET("/classes/:id", h.boardPage, gz)
		e.GET("/static/:version/*", h.static, gz)
	}
}

type handler struct {
	s    *api.Server
	opts Options
}

// pageState is what the script starts from.
type pageState struct {
	Session   session.Snapshot `json:"session"`
	Events    []protocol.Event `json:"events"`
	Token     string           `json:"token,omitempty"`
	Scenarios any              `json:"scenarios"`
	Setup     setupJSON        `json:"setup"`
	Embed     bool             `json:"embed"`
	Present   bool             `json:"present"`
	Version   string           `json:"version"`
	Ignored   []string         `json:"ignored,omitempty"`
	// EmbedOrigins are the host pages allowed to drive an embedded page by
	// postMessage.
	EmbedOrigins []string `json:"embed_origins"`
	Busy         bool     `json:"busy,omitempty"`
	// WatchURL is the session's watch link as a phone on the local network
	// would open it, and Reachable whether one can.
	WatchURL  string `json:"watch_url,omitempty"`
	Reachable bool   `json:"reachable"`
	// Addresses are this machine's addresses the presenter may pick for
	// the watch link instead, the default first (qr.svg?addr=IP).
	Addresses watchAddresses `json:"addresses"`
}

type setupJSON struct {
	Ordering     experiments.Ordering `json:"ordering"`
	Mode         protocol.Mode        `json:"mode"`
	Broken       []string             `json:"broken"`
	Style        string               `json:"style"`
	SameIdentity bool                 `json:"same_identity"`
	Delivery     experiments.Delivery `json:"delivery"`
	LeaseMS      int64                `json:"lease_ms"`
	PaceMS       int64                `json:"pace_ms"`
	SkewMS       int64                `json:"skew_ms"`
}

// maxInitialEvents bounds the events rendered into the first page; the
// socket brings the rest.
const maxInitialEvents = 5000

func nonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// parseSetup reads the permalink's query; what it cannot use it ignores,
// and says so.
func parseSetup(c echo.Context) (Setup, []string) {
	q := c.QueryParams()
	st := Setup{Ordering: experiments.ZombieFirst, Mode: protocol.ModeAuto, LeaseMS: 1000, PaceMS: 900, Style: "fencelab"}
	var ignored []string
	if v := q.Get("ordering"); v != "" {
		if o, err := experiments.ParseOrdering(v); err == nil {
			st.Ordering = o
		} else {
			ignored = append(ignored, fmt.Sprintf("ordering %q", v))
		}
	}
	if v := q.Get("mode"); v != "" {
		if v == string(protocol.ModeAuto) || v == string(protocol.ModeStep) {
			st.Mode = protocol.Mode(v)
		} else {
			ignored = append(ignored, fmt.Sprintf("mode %q", v))
		}
	}
	if v := q.Get("style"); v != "" {
		if s, err := experiments.StyleByName(v); err == nil {
			st.Style, st.Broken = s.Name, s.Broken
		} else {
			ignored = append(ignored, fmt.Sprintf("style %q", v))
		}
	}
	if v := q.Get("break"); v != "" {
		for _, n := range strings.Split(v, ",") {
			if g, err := playground.ParseGuard(strings.TrimSpace(n)); err == nil {
				st.Broken = st.Broken.Break(g)
			} else {
				ignored = append(ignored, fmt.Sprintf("guard %q", n))
			}
		}
	}
	if v := q.Get("same"); v == "1" || v == "true" {
		st.SameIdentity = true
	}
	if v := q.Get("delivery"); v != "" {
		if d, err := experiments.ParseDelivery(v); err == nil {
			st.Delivery = d
		} else {
			ignored = append(ignored, fmt.Sprintf("delivery %q", v))
		}
	}
	num := func(name string, lo, hi int64, dst *int64) {
		v := q.Get(name)
		if v == "" {
			return
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			ignored = append(ignored, fmt.Sprintf("%s %q (want %d to %d)", name, v, lo, hi))
			return
		}
		*dst = n
	}
	num("lease", experiments.RunLease.Min.Milliseconds(), 5000, &st.LeaseMS)
	num("pace", 0, 3000, &st.PaceMS)
	num("skew", 0, 10000, &st.SkewMS)
	return st, ignored
}

const busyNotice = "The live demo is busy right now: too many people are running it at once. Here is a recorded run instead; try again in a minute."

func (h *handler) index(c echo.Context) error {
	return h.fresh(c, http.StatusOK, "")
}

// fresh renders a new session's page, as its driver; when the server has
// no session left to give, the page still comes, with a notice, and plays
// recorded runs.
func (h *handler) fresh(c echo.Context, status int, notice string) error {
	sess, err := h.s.Sessions.CreateFor(session.ClientKey(c.RealIP()))
	if fault.CodeOf(err) == fault.Busy {
		return h.render(c, wire.Status(err), nil, "", busyNotice)
	}
	if err != nil {
		return err
	}
	return h.render(c, status, sess, sess.Token, notice)
}

func (h *handler) sessionPage(c echo.Context) error {
	sess, err := h.s.Sessions.Get(c.Param("id"))
	if err != nil {
		return h.fresh(c, http.StatusNotFound, "There is no such session here any more: sessions end after a while without use, and when the server restarts. Here is a new one.")
	}
	sess.Touch()
	return h.render(c, http.StatusOK, sess, "", "")
}

// render writes the playground page for sess, or with no session at all
// (sess nil) when the server had none to give.
func (h *handler) render(c echo.Context, status int, sess *session.Session, token, notice string) error {
	setup, ignored := parseSetup(c)
	st := pageState{Scenarios: api.Scenarios(), Version: static.Version(), Token: token, Ignored: ignored,
		EmbedOrigins: append([]string{}, h.opts.CommandOrigins...), Busy: sess == nil,
		Embed: c.QueryParam("embed") == "1", Present: c.QueryParam("present") == "1", Events: []protocol.Event{},
		Setup: setupJSON{Ordering: setup.Ordering, Mode: setup.Mode, Broken: setup.Broken.Names(), Style: setup.Style,
			SameIdentity: setup.SameIdentity, Delivery: setup.Delivery, LeaseMS: setup.LeaseMS, PaceMS: setup.PaceMS, SkewMS: setup.SkewMS}}
	if sess != nil {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 5*time.Second)
		defer cancel()
		snap, err := sess.Snapshot(ctx, token != "")
		if err != nil {
			return err
		}
		st.Session = snap
		st.WatchURL, st.Reachable, st.Addresses = h.watchURL(c, sess.ID)
		// The machine's other addresses are for the presenter who made the
		// session, not for every reader of a public server.
		if token == "" {
			st.Addresses = watchAddresses{}
		}
		if st.Session.Run != nil {
			evs, err := sess.Log.Since(0, st.Session.Run.ID, 0)
			if err == nil {
				for _, e := range evs {
					if e.Seq <= st.Session.LastSeq {
						st.Events = append(st.Events, e)
					}
				}
				if over := len(st.Events) - maxInitialEvents; over > 0 {
					st.Events = st.Events[over:]
				}
			}
		}
	}
	if len(ignored) > 0 && notice == "" {
		notice = "Part of the link could not be used and was ignored: " + strings.Join(ignored, ", ") + "."
	}
	n := nonce()
	p := templates.PageData{Title: "fencelab — fencing tokens, for real", Nonce: n, AssetBase: "/static/" + static.Version() + "/",
		Embed: st.Embed, Present: st.Present, View: PageView(setup), State: st, Notice: notice}
	h.pageHeaders(c, n)
	c.Response().WriteHeader(status)
	return templates.Page(p).Render(c.Request().Context(), c.Response())
}

// pageHeaders are every page's: its Content-Security-Policy with the
// nonce of its one script, never cached, no referrer, HTML.
func (h *handler) pageHeaders(c echo.Context, nonce string) {
	hd := c.Response().Header()
	hd.Set("Content-Security-Policy", h.csp(nonce))
	hd.Set("Cache-Control", "no-store")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
}

// build serves Build it's body, the fragment the page loads into its
// folded section when the reader opens it: most readers never do, and the
// page stays light. It is the same for every session of this server.
func (h *handler) build(c echo.Context) error {
	b := build()
	b.NoCustomSQL = h.opts.NoCustomSQL
	hd := c.Response().Header()
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	c.Response().WriteHeader(http.StatusOK)
	return templates.BuildBody(b, columns()).Render(c.Request().Context(), c.Response())
}

// csp is the page's Content-Security-Policy: scripts only from this server
// (and the one JSON block, by nonce), no inline styles, and framing only by
// the allowed origins.
func (h *handler) csp(nonce string) string {
	ancestors := append([]string{"'self'"}, h.opts.FrameAncestors...)
	if len(h.opts.FrameAncestors) == 0 {
		ancestors = []string{"*"} // any site may embed it, as pasted
	}
	return strings.Join([]string{
		"default-src 'self'",
		"script-src 'self' 'nonce-" + nonce + "'",
		"style-src 'self'",
		"img-src 'self' data:",
		"connect-src 'self'",
		"font-src 'self'",
		"object-src 'none'",
		"base-uri 'none'",
		"form-action 'self'",
		"frame-ancestors " + strings.Join(ancestors, " "),
	}, "; ")
}

func (h *handler) static(c echo.Context) error {
	p := path.Clean("/" + c.Param("*"))[1:]
	if p == "" || strings.HasPrefix(p, ".") {
		return echo.NewHTTPError(http.StatusNotFound, "no such file")
	}
	b, err := fs.ReadFile(static.FS, p)
	if err != nil {
		return echo.NewHTTPError(http.StatusNotFound, "no such file: "+p)
	}
	hd := c.Response().Header()
	if c.Param("version") == static.Version() {
		hd.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		hd.Set("Cache-Control", "no-cache") // an old page asking for old files gets today's
	}
	hd.Set("X-Content-Type-Options", "nosniff")
	ct := mime.TypeByExtension(path.Ext(p))
	switch path.Ext(p) {
	case ".js":
		ct = "text/javascript; charset=utf-8"
	case ".css":
		ct = "text/css; charset=utf-8"
	case ".svg":
		ct = "image/svg+xml"
	}
	return c.Blob(http.StatusOK, ct, b)
}

// bundle inlines the replay's modules into one script for a file that must
// work alone, offline: replay.js and every module it imports, each after
// the modules it imports (read from their import lines, so a module
// added to any of them comes along), with their import lines dropped and
// their exports made plain declarations.
func bundle() (string, error) {
	var order []string
	seen := map[string]bool{}
	var visit func(f string) error
	visit = func(f string) error {
		if seen[f] {
			return nil
		}
		seen[f] = true
		src, err := fs.ReadFile(static.FS, f)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(src), "\n") {
			if m := importFrom.FindStringSubmatch(line); m != nil {
				if err := visit(path.Join(path.Dir(f), m[1])); err != nil {
					return err
				}
			}
		}
		order = append(order, f)
		return nil
	}
	if err := visit("js/replay.js"); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, f := range order {
		src, _ := fs.ReadFile(static.FS, f)
		for _, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(line, "import ") {
				continue
			}
			line = strings.TrimPrefix(line, "export ")
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return strings.ReplaceAll(b.String(), "</script", `<\/script`), nil
}

// importFrom is a module's import line, with the module it names.
var importFrom = regexp.MustCompile(`^import .* from "(\./[a-z]+\.js)";`)

// replayData is the JSON a replay file starts from.
type replayData struct {
	Summary   protocol.RunInfo `json:"summary"`
	Events    []protocol.Event `json:"events"`
	Scenarios any              `json:"scenarios"`
}

// replay serves one run as a self-contained HTML file to download: it
// replays the run offline, with the server gone.
func (h *handler) replay(c echo.Context) error {
	sess, rs, evs, err := h.s.RunEvents(c)
	if err != nil {
		return err
	}
	page, err := Replay(fmt.Sprintf("Run %s of a fencelab session", rs.ID), rs, evs)
	if err != nil {
		return err
	}
	hd := c.Response().Header()
	// The file renders only its own inline content; served, it is a download.
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:")
	hd.Set(echo.HeaderContentDisposition, fmt.Sprintf(`attachment; filename="fencelab-%s-%s.html"`, sess.ID[:8], rs.ID))
	hd.Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	c.Response().WriteHeader(http.StatusOK)
	return page.Render(c.Request().Context(), c.Response())
}

// Replay is one run as a self-contained HTML file that replays it
// offline, with no server: the page's own modules and styles inlined,
// the run's events its data. what names the run for its first sentence
// ("Run r3 of a fencelab session"). The session's download and
// `fencelab check --report` both write it.
func Replay(what string, rs protocol.RunInfo, evs []protocol.Event) (templ.Component, error) {
	js, err := bundle()
	if err != nil {
		return nil, err
	}
	css, err := fs.ReadFile(static.FS, "css/app.css")
	if err != nil {
		return nil, err
	}
	rs.Workers = nil
	broken := "all guards on"
	if len(rs.Broken) > 0 {
		broken = strings.Join(rs.Broken, ", ") + " off"
	}
	d := templates.ReplayData{
		Title: fmt.Sprintf("fencelab replay: %s, %s", rs.Ordering, broken),
		Intro: fmt.Sprintf("%s: %s, %s. These are the events the real run recorded; this file replays them on its own, offline.", what, experiments.OrderingWords(rs.Ordering).Title, broken),
		CSS:   string(css), JS: js, View: PageView(Setup{Ordering: rs.Ordering, Mode: rs.Mode}),
		Data: replayData{Summary: rs, Events: evs, Scenarios: api.Scenarios()},
	}
	return templates.Replay(d), nil
}

// ---- a class: the join page, the teacher's start and board ----------------

// classState is what a class page's script starts from.
type classState struct {
	// Words are every code's words (the marks' signs, tones and words among
	// them): the board draws a case's mark from here, as build.js does.
	Words protocol.WordTable `json:"words,omitzero"`
	// ClassID is the board's class.
	ClassID string `json:"class_id,omitempty"`
	// JoinBase is this server as a phone in the room opens it (the watch
	// link's address: see watchURL), and Reachable whether a phone can.
	JoinBase  string `json:"join_base,omitempty"`
	Reachable bool   `json:"reachable"`
	// Fields says which of the join form's fields a refusal of the join is
	// about, by its fault code: "code", "name", or "pattern" — the code if
	// the typed code does not match the code's pattern, else the name (the
	// server reads the code first, so a code that parses and an invalid
	// answer mean the name). A code not listed is about the whole form.
	// The API's error answer names no field; this table is where that
	// missing field is decided, once.
	Fields map[fault.Code]string `json:"fields,omitempty"`
}

// joinFields is classState.Fields for POST /api/classes/join: no open
// class with that code (not_found) and a full class (limit) are the
// code's; a name taken (conflict) is the name's.
var joinFields = map[fault.Code]string{
	fault.NotFound: "code",
	fault.Limit:    "code",
	fault.Conflict: "name",
	fault.Invalid:  "pattern",
}

// classPage writes a class page: the playground page's headers and
// Content-Security-Policy, and a state no one but this response's script
// reads.
func (h *handler) classPage(c echo.Context, p templates.ClassPageData, body func(templates.ClassPageData) templ.Component) error {
	n := nonce()
	p.Nonce, p.AssetBase = n, "/static/"+static.Version()+"/"
	h.pageHeaders(c, n)
	c.Response().WriteHeader(http.StatusOK)
	return body(p).Render(c.Request().Context(), c.Response())
}

// joinPage serves a student's join: GET /join, ?code=ABC234 to fill the
// code in (as the board's QR code does). A code that is not one is not
// echoed into the page: the field stays empty.
func (h *handler) joinPage(c echo.Context) error {
	code := ""
	if v := c.QueryParam("code"); v != "" {
		if parsed, err := class.ParseCode(v); err == nil {
			code = class.FormatCode(parsed)
		}
	}
	j := templates.JoinView{Code: code, CodePattern: class.CodePattern(), MaxName: class.MaxName}
	p := templates.ClassPageData{Title: "Join a class — fencelab", Script: "js/class.js", State: classState{Fields: joinFields}}
	return h.classPage(c, p, func(p templates.ClassPageData) templ.Component { return templates.JoinPage(p, j) })
}

// newClassPage serves the teacher's "Start a class".
func (h *handler) newClassPage(c echo.Context) error {
	p := templates.ClassPageData{Title: "Start a class — fencelab", Script: "js/class.js", State: classState{}}
	return h.classPage(c, p, templates.NewClassPage)
}

// boardPage serves a class's board. It knows nothing of the class: the
// teacher's token is in the fragment, which never reaches a server, and
// the page's script reads the board with it from the API. An id that
// could be no class's (the API's ids are short, URL-safe base64) is a 404
// here, so the page never carries a stranger's text.
func (h *handler) boardPage(c echo.Context) error {
	id := c.Param("id")
	if !class.IDForm(id) {
		return fault.Errorf(fault.NotFound, "there is no class %q", id)
	}
	base, reachable := h.joinAddress(c)
	column := func(k experiments.CheckCase) templates.CheckCase {
		return templates.CheckCase{Case: string(k), Title: k.Title()}
	}
	b := templates.BoardView{ClassID: id}
	for _, k := range experiments.CheckCases() {
		b.Cases = append(b.Cases, column(k))
	}
	for _, k := range experiments.ProbeCases() {
		b.Probes = append(b.Probes, column(k))
	}
	st := classState{Words: protocol.Words(), ClassID: id, JoinBase: base, Reachable: reachable}
	p := templates.ClassPageData{Title: "Class board — fencelab", Script: "js/board.js", State: st}
	return h.classPage(c, p, func(p templates.ClassPageData) templ.Component { return templates.BoardPage(p, b) })
}

// joinAddress is this server's address as a phone in the room opens it,
// such as http://192.168.1.20:8080, and whether a phone can at all: the
// watch link's, chosen the same way (watchURL), without its path.
func (h *handler) joinAddress(c echo.Context) (string, bool) {
	link, reachable, _ := h.watchURL(c, "x")
	return strings.TrimSuffix(link, "/s/x"), reachable
}

// joinQR serves the join link of a class as an SVG QR code: GET
// /join/qr.svg?code=ABC234 draws http://ADDRESS/join?code=ABC234 at this
// server's address as a phone reaches it. Only a code is drawn, never
// other text, so it cannot be made to point anywhere else.
func (h *handler) joinQR(c echo.Context) error {
	code, err := class.ParseCode(c.QueryParam("code"))
	if err != nil {
		return err
	}
	base, _ := h.joinAddress(c)
	return serveQR(c, base+"/join?code="+code)
}
