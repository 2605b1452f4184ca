package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/control"
	"github.com/fencelab/fencelab/server/hub"
	"github.com/fencelab/fencelab/server/receiver"
	"github.com/fencelab/fencelab/server/session"
	"github.com/fencelab/fencelab/server/wire"
	"github.com/labstack/echo/v4"
)

func (s *Server) logRequests(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		status := c.Response().Status
		if err != nil {
			status = wire.Status(err)
		}
		level := s.cfg.Log.Debug
		if status >= 500 {
			level = s.cfg.Log.Warn
		}
		level("request", "method", c.Request().Method, "path", c.Path(), "status", status, "elapsed", time.Since(start))
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
		return wire.New(http.StatusServiceUnavailable, "the database does not answer: "+err.Error())
	}
	return c.JSON(http.StatusOK, map[string]any{"status": "ready", "sessions": s.Sessions.Count(), "runs": s.Sessions.RunsInFlight()})
}

// scenarioInfo is what /api/scenarios lists: everything a page needs to
// offer choices, from the engine itself.
type scenarioInfo struct {
	Orderings []orderingInfo `json:"orderings"`
	Guards    []guardInfo    `json:"guards"`
	Styles    []engine.Style `json:"styles"`
	Actions   []string       `json:"actions"`
}

type orderingInfo struct {
	Name     engine.Ordering  `json:"name"`
	Title    string           `json:"title"`
	Steps    []engine.Step    `json:"steps"`
	Expected *engine.Expected `json:"expected,omitempty"` // what a correct build shows
}

type guardInfo struct {
	Name string `json:"name"`
	Help string `json:"help"`
}

// Scenarios describes the orderings, guards and styles.
func Scenarios() scenarioInfo {
	info := scenarioInfo{Styles: engine.Styles(), Actions: control.Actions()}
	for _, o := range append(engine.Orderings(), engine.FreePlay) {
		sc, _ := engine.Script(o)
		oi := orderingInfo{Name: o, Title: sc.Title, Steps: sc.Steps}
		if x, ok := engine.ExpectedOutcome(o); ok {
			oi.Expected = &x
		}
		info.Orderings = append(info.Orderings, oi)
	}
	for _, g := range engine.AllGuards() {
		info.Guards = append(info.Guards, guardInfo{Name: g.String(), Help: g.Help()})
	}
	return info
}

func (s *Server) scenarios(c echo.Context) error { return c.JSON(http.StatusOK, Scenarios()) }

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
	sess, err := s.Sessions.Create()
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, created{ID: sess.ID, Token: sess.Token,
		WatchURL: "/s/" + sess.ID, DriveURL: "/s/" + sess.ID + "#token=" + sess.Token,
		Snapshot: sess.Snapshot(c.Request().Context(), true)})
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
	if len(id) == 0 || len(id) > 64 {
		return nil, fmt.Errorf("%w: %q is not a session id", session.ErrNotFound, id)
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
			return fmt.Errorf("%w: driving this session needs its control token (Authorization: Bearer TOKEN); without it you can watch", session.ErrForbidden)
		case !sess.CanDrive(t):
			return fmt.Errorf("%w: that control token is not this session's", session.ErrForbidden)
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
		return fmt.Errorf("%w: that control token is not this session's", session.ErrForbidden)
	}
	return c.JSON(http.StatusOK, sess.Snapshot(c.Request().Context(), t != ""))
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

func (s *Server) command(c echo.Context) error {
	sess := c.Get("session").(*session.Session)
	body, err := readBody(c, s.cfg.MaxBody)
	if err != nil {
		return err
	}
	cmd, err := control.Decode(body, s.limits())
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

// readBody reads a JSON body of at most limit bytes.
func readBody(c echo.Context, limit int64) ([]byte, error) {
	r := c.Request()
	if ct := r.Header.Get(echo.HeaderContentType); ct != "" && !strings.HasPrefix(ct, echo.MIMEApplicationJSON) {
		return nil, wire.New(http.StatusUnsupportedMediaType, "the body must be JSON (Content-Type: application/json)")
	}
	b, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, wire.New(http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", limit))
		}
		return nil, wire.New(http.StatusBadRequest, "could not read the body: "+err.Error())
	}
	return b, nil
}

// seqParam reads a non-negative integer query parameter.
func seqParam(c echo.Context, name string, def int64) (int64, error) {
	v := c.QueryParam(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, wire.New(http.StatusBadRequest, fmt.Sprintf("%s=%q must be a whole number, 0 or more", name, v))
	}
	return n, nil
}

func runParam(c echo.Context) (string, error) {
	r := c.QueryParam("run")
	if len(r) > 32 || strings.ContainsAny(r, "/\\\"' ") {
		return "", wire.New(http.StatusBadRequest, fmt.Sprintf("run=%q is not a run id", r))
	}
	return r, nil
}

// eventPage is the answer to GET .../events.
type eventPage struct {
	Events  []engine.Event `json:"events"`
	LastSeq int64          `json:"last_seq"`
	More    bool           `json:"more"`
}

func (s *Server) events(c echo.Context) error {
	sess, err := s.session(c)
	if err != nil {
		return err
	}
	since, err := seqParam(c, "since", 0)
	if err != nil {
		return err
	}
	limit, err := seqParam(c, "limit", 1000)
	if err != nil {
		return err
	}
	if limit < 1 || limit > 10000 {
		return wire.New(http.StatusBadRequest, fmt.Sprintf("limit=%d must be between 1 and 10000", limit))
	}
	run, err := runParam(c)
	if err != nil {
		return err
	}
	last := sess.Log.LastSeq()
	evs, err := sess.Log.Since(since, run, int(limit)+1)
	if errors.Is(err, hub.ErrGone) {
		return wire.New(http.StatusGone, "the events after that sequence number are no longer kept; start from 0")
	}
	if err != nil {
		return err
	}
	page := eventPage{Events: evs, LastSeq: last}
	if len(evs) > int(limit) {
		page.Events, page.More = evs[:limit], true
	}
	if page.Events == nil {
		page.Events = []engine.Event{}
	}
	return c.JSON(http.StatusOK, page)
}

func (s *Server) eventsNDJSON(c echo.Context) error {
	sess, err := s.session(c)
	if err != nil {
		return err
	}
	since, err := seqParam(c, "since", 0)
	if err != nil {
		return err
	}
	run, err := runParam(c)
	if err != nil {
		return err
	}
	evs, err := sess.Log.Since(since, run, 0)
	if errors.Is(err, hub.ErrGone) {
		return wire.New(http.StatusGone, "the events after that sequence number are no longer kept; start from 0")
	}
	if err != nil {
		return err
	}
	name := "fencelab-" + sess.ID[:8]
	if run != "" {
		name += "-" + run
	}
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "application/x-ndjson")
	h.Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`.ndjson"`)
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
	return c.JSON(http.StatusOK, sess.Snapshot(c.Request().Context(), false).Runs)
}

func (s *Server) run(c echo.Context) error {
	sess, err := s.session(c)
	if err != nil {
		return err
	}
	rs, err := sess.Run(c.Param("run"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rs)
}

// receiverRoutes serves each live run's receiver under its secret key.
func (s *Server) receiverRoutes(g *echo.Group) {
	h := &receiver.Handler{
		ReceiverFunc: func(c echo.Context) (*engine.Receiver, error) {
			r, _, err := s.Sessions.Receiver(c.Param("key"))
			return r, err
		},
		OnDecisionFunc: func(c echo.Context, d engine.Delivery, rc engine.Receipt, traces []engine.Trace) {
			if _, emit, err := s.Sessions.Receiver(c.Param("key")); err == nil {
				emit(receiver.Event(d, rc, traces))
			}
		},
	}
	h.Register(g)
}
