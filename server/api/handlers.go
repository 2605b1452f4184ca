package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/control"
	"github.com/fencelab/fencelab/server/session"
	"github.com/fencelab/fencelab/server/session/eventlog"
	"github.com/fencelab/fencelab/server/wire"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"
)

// logRequests logs every request with the status its client got
// (wire.Sent). A handler's error after its header went out does not make
// it a 500: a page whose reader left halfway was a 200, cut short, and is
// logged as one (client_gone, at debug level). An error of the server's
// own after the header is logged here with its cause, at error level,
// since the error handler can no longer answer it and says nothing.
func (s *Server) logRequests(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		status := wire.Sent(c, err)
		level := s.cfg.Log.Debug
		args := []any{"method", c.Request().Method, "path", c.Path(), "status", status, "elapsed", time.Since(start)}
		switch {
		case wire.ClientGone(c, err):
			args = append(args, "client_gone", true)
		case err != nil && c.Response().Committed:
			level = s.cfg.Log.Error
			args = append(args, "err", err, "cut_short", true)
		case status >= 500:
			level = s.cfg.Log.Warn
		}
		level("request", args...)
		return err
	}
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]any{"status": "ok", "uptime_s": int(time.Since(s.started).Seconds())})
}

func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Pool.Ping(ctx); err != nil {
		// A probe needs the status alone; why goes to the log, without
		// the user and database a failed connection names.
		s.cfg.Log.Warn("readyz: the database does not answer", "err", dbDetail(err))
		return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": "unavailable"})
	}
	// An instance that lost its lock with its connection (a restart of
	// Postgres) takes it again within a second of the database's return;
	// until then it starts no run, and says so here.
	if err := s.Sessions.Instances().Healthy(); err != nil {
		return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "reason": err.Error()})
	}
	return c.JSON(http.StatusOK, map[string]any{"status": "ready", "sessions": s.Sessions.Count(), "runs": s.Sessions.RunsInFlight()})
}

// dbDetail is what the log says of a database error. pgconn's error for a
// failed connection starts "failed to connect to `user=… database=…`",
// and a server's FATAL can name the user too, so neither is logged as it
// is: a failed connection is logged by its cause (where it dialled, and
// why it failed), a server's error by its SQLSTATE.
func dbDetail(err error) string {
	if state, ok := fault.SQLState(err); ok {
		return "the database refused (SQLSTATE " + state + ")"
	}
	// A failed dial says why (refused, no such socket, timed out) but not
	// where: the address is a socket path, or the database's host.
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return "failed to connect: " + oe.Op + ": " + oe.Err.Error()
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) && ce.Unwrap() != nil {
		return "failed to connect: " + Redact(ce.Unwrap().Error())
	}
	return Redact(err.Error())
}

// scenarioInfo is what /api/scenarios lists: the lab's catalog and the
// commands a driver may send.
type scenarioInfo struct {
	protocol.Catalog
	Actions []string `json:"actions"`
}

// Scenarios describes the orderings, guards, styles and words, and the
// actions of the API.
func Scenarios() scenarioInfo {
	return scenarioInfo{Catalog: protocol.NewCatalog(), Actions: control.Actions()}
}

func (s *Server) scenarios(c echo.Context) error { return c.JSON(http.StatusOK, Scenarios()) }

func (s *Server) protocolSchema(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/schema+json", protocol.Schema)
}

// created is the answer to POST /api/sessions.
type created struct {
	ID       string           `json:"id"`
	Token    string           `json:"token"`
	WatchURL string           `json:"watch_url"`
	DriveURL string           `json:"drive_url"`
	Snapshot session.Snapshot `json:"snapshot"`
}

func (s *Server) createSession(c echo.Context) error {
	// The body is optional; if there is one it must be an empty object.
	if c.Request().ContentLength != 0 {
		var empty struct{}
		if err := wire.Decode(c, 1024, &empty); err != nil {
			return err
		}
	}
	sess, err := s.Sessions.CreateFor(session.ClientKey(c.RealIP()))
	if err != nil {
		return err
	}
	snap, err := sess.Snapshot(c.Request().Context(), true)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, created{ID: sess.ID, Token: sess.Token,
		WatchURL: "/s/" + sess.ID, DriveURL: "/s/" + sess.ID + "#token=" + sess.Token, Snapshot: snap})
}

// tokenOf reads a control token from the Authorization header (Bearer),
// X-Fencelab-Token, or, for sockets, the token query parameter.
func tokenOf(c echo.Context) string {
	if h := c.Request().Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(t)
		}
		return "\x00bad" // an Authorization header of another scheme is no token
	}
	if t := c.Request().Header.Get("X-Fencelab-Token"); t != "" {
		return t
	}
	return c.QueryParam("token")
}

func (s *Server) session(c echo.Context) (*session.Session, error) {
	id := c.Param("id")
	if !sessionIDForm(id) {
		return nil, fault.Errorf(fault.NotFound, "that is not a session id: a session id is 22 letters, digits, '-' and '_', as POST /api/sessions gives")
	}
	sess, err := s.Sessions.Get(id)
	if err != nil {
		return nil, err
	}
	sess.Touch()
	return sess, nil
}

// driver lets a request through only with the session's control token.
func (s *Server) driver(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		sess, err := s.session(c)
		if err != nil {
			return err
		}
		switch t := tokenOf(c); {
		case t == "":
			return fault.Errorf(fault.Forbidden, "driving this session needs its control token (Authorization: Bearer TOKEN); without it you can watch")
		case !sess.CanDrive(t):
			return fault.Errorf(fault.Forbidden, "that control token is not this session's")
		}
		c.Set("session", sess)
		return next(c)
	}
}

func (s *Server) getSession(c echo.Context) error {
	sess, err := s.session(c)
	if err != nil {
		return err
	}
	t := tokenOf(c)
	if t != "" && !sess.CanDrive(t) {
		return fault.Errorf(fault.Forbidden, "that control token is not this session's")
	}
	snap, err := sess.Snapshot(c.Request().Context(), t != "")
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, snap)
}

func (s *Server) deleteSession(c echo.Context) error {
	if err := s.Sessions.Delete(c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) limits() control.Limits {
	l := s.cfg.Limits
	return control.Limits{MinLease: l.MinLease, MaxLease: l.MaxLease, MaxPace: l.MaxPace}
}

// readCommand reads a request's body as one command, strictly
// (control.Parse) and within the body's cap.
func (s *Server) readCommand(c echo.Context) (control.Command, error) {
	body, err := wire.ReadBody(c, s.cfg.MaxBody)
	if err != nil {
		return control.Command{}, err
	}
	return control.Parse(body, s.limits())
}

func (s *Server) command(c echo.Context) error {
	sess := c.Get("session").(*session.Session)
	cmd, err := s.readCommand(c)
	if err != nil {
		return err
	}
	// The command outlives the request: a person who closes the tab in the
	// middle of a step must not leave the run half-played.
	res, err := sess.Execute(context.WithoutCancel(c.Request().Context()), cmd)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// sinceParam reads the since query parameter: a seq of the session's log,
// 0 or more, and not beyond its last. A since ahead of the log is a
// mistake of the client's, not events that are gone; it is checked before
// the log is read, and the log only ever grows, so it stays true.
func sinceParam(c echo.Context, sess *session.Session) (int64, error) {
	since, err := seqParam(c, "since", 0)
	if err != nil {
		return 0, err
	}
	if last := sess.Log.LastSeq(); since > last {
		return 0, fault.Errorf(fault.Invalid, "since %d is ahead of the log, whose last seq is %d", since, last)
	}
	return since, nil
}

// seqParam reads a non-negative integer query parameter.
func seqParam(c echo.Context, name string, def int64) (int64, error) {
	v := c.QueryParam(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fault.Errorf(fault.Invalid, "%s=%s must be a whole number, 0 or more", name, strconv.QuoteToASCII(shorten(v)))
	}
	return n, nil
}

// runIDRE is the form of a run id: r (l for a load lab) and the run's
// number in base 36.
var runIDRE = regexp.MustCompile(`^[rl][0-9a-z]{1,12}$`)

// validateRunID refuses what cannot be a run id, before it is looked up or
// put anywhere (a file name in a header, a message).
func validateRunID(what, id string) error {
	if !runIDRE.MatchString(id) {
		return fault.Errorf(fault.Invalid, "%s%s is not a run id (they are r1, r2, …; l1, l2, … for load labs)", what, strconv.QuoteToASCII(shorten(id)))
	}
	return nil
}

// runParam reads the run query parameter: "" for every run, else a run
// the session knows — one it remembers, or one whose events its log still
// keeps.
func runParam(c echo.Context, sess *session.Session) (string, error) {
	r := c.QueryParam("run")
	if r == "" {
		return "", nil
	}
	if err := validateRunID("run=", r); err != nil {
		return "", err
	}
	if _, err := sess.Run(r); err == nil {
		return r, nil
	}
	if evs, err := sess.Log.Since(sess.Log.Dropped(r), r, 1); err == nil && len(evs) > 0 {
		return r, nil
	}
	return "", fault.Errorf(fault.NotFound, "no run %q in this session", r)
}

// eventPage is the answer to GET .../events.
type eventPage struct {
	Events  []protocol.Event `json:"events"`
	LastSeq int64            `json:"last_seq"`
	More    bool             `json:"more"`
	// DroppedBefore, when the answer is not whole, is the seq before which
	// the events asked for (the run's, with ?run=) are no longer kept: the
	// events start there, or later.
	DroppedBefore int64 `json:"dropped_before,omitempty"`
}

// droppedHeader says on an export that it is not whole: the seq before
// which the events asked for are no longer kept (the JSON answer's
// dropped_before).
const droppedHeader = "X-Fencelab-Dropped-Before"

func setDropped(c echo.Context, dropped int64) {
	if dropped > 0 {
		c.Response().Header().Set(droppedHeader, strconv.FormatInt(dropped, 10))
	}
}

// keptSince reads the events of run ("" for all) after since, at most limit
// (0: all). A since of 0 asks for everything there is: when the session no
// longer keeps the oldest of them, the answer is every one still kept, and
// dropped is the seq before which they are gone (0 when nothing asked for
// was dropped, such as a newest run whose events are all kept, however
// much of the log before it is gone). A since past 0 resumes a reader
// exactly where it was; if the events after it are gone, the answer is a
// 410 that says which.
func (s *Server) keptSince(sess *session.Session, since int64, run string, limit int) (evs []protocol.Event, dropped int64, err error) {
	for range 3 { // the log may drop more between the two reads: read again
		evs, err = sess.Log.Since(since, run, limit)
		if !errors.Is(err, eventlog.ErrGone) {
			return evs, dropped, err
		}
		gone := sess.Log.Dropped(run)
		if since > 0 {
			return nil, 0, fault.Errorf(fault.Gone, "the events from seq %d to %d are no longer kept (a session keeps only its newest events); since=0 gives every event still kept, from seq %d on",
				since+1, gone, gone+1)
		}
		since, dropped = gone, gone+1
	}
	return nil, 0, fault.Errorf(fault.Busy, "the session drops its oldest events faster than they can be read; try again")
}

// eventsAsked reads what GET .../events and its export ask for: the
// session, since and run.
func (s *Server) eventsAsked(c echo.Context) (sess *session.Session, since int64, run string, err error) {
	if sess, err = s.session(c); err != nil {
		return nil, 0, "", err
	}
	if since, err = sinceParam(c, sess); err != nil {
		return nil, 0, "", err
	}
	if run, err = runParam(c, sess); err != nil {
		return nil, 0, "", err
	}
	return sess, since, run, nil
}

func (s *Server) events(c echo.Context) error {
	sess, since, run, err := s.eventsAsked(c)
	if err != nil {
		return err
	}
	limit, err := seqParam(c, "limit", 1000)
	if err != nil {
		return err
	}
	if limit < 1 || limit > 10000 {
		return fault.Errorf(fault.Invalid, "limit=%d must be between 1 and 10000", limit)
	}
	last := sess.Log.LastSeq()
	evs, dropped, err := s.keptSince(sess, since, run, int(limit)+1)
	if err != nil {
		return err
	}
	setDropped(c, dropped)
	page := eventPage{Events: evs, LastSeq: last, DroppedBefore: dropped}
	if len(evs) > int(limit) {
		page.Events, page.More = evs[:limit], true
	}
	if page.Events == nil {
		page.Events = []protocol.Event{}
	}
	return c.JSON(http.StatusOK, page)
}

func (s *Server) eventsNDJSON(c echo.Context) error {
	sess, since, run, err := s.eventsAsked(c)
	if err != nil {
		return err
	}
	evs, dropped, err := s.keptSince(sess, since, run, 0)
	if err != nil {
		return err
	}
	setDropped(c, dropped)
	name := "fencelab-" + sess.ID[:8]
	if run != "" {
		name += "-" + run
	}
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "application/x-ndjson")
	h.Set(echo.HeaderContentDisposition, attachment(name+".ndjson"))
	c.Response().WriteHeader(http.StatusOK)
	w := bufio.NewWriter(c.Response())
	enc := json.NewEncoder(w)
	for _, e := range evs {
		if err := enc.Encode(e); err != nil {
			return nil // the client went away
		}
	}
	return w.Flush()
}

func (s *Server) runs(c echo.Context) error {
	sess, err := s.session(c)
	if err != nil {
		return err
	}
	snap, err := sess.Snapshot(c.Request().Context(), false)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, snap.Runs)
}

func (s *Server) run(c echo.Context) error {
	sess, err := s.session(c)
	if err != nil {
		return err
	}
	if err := validateRunID("", c.Param("run")); err != nil {
		return err
	}
	rs, err := sess.Run(c.Param("run"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rs)
}

func shorten(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
