package server

import (
	"bufio"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/recording"
	"github.com/fencelab/fencelab/server/session"
	"github.com/fencelab/fencelab/server/wire"
	"github.com/labstack/echo/v4"
)

var runIDRE = regexp.MustCompile(`^r[0-9a-z]{1,12}$`)

// RunEvents returns the events of one run of a session, checking the ids.
func (s *Server) RunEvents(c echo.Context) (*session.Session, session.RunSummary, []engine.Event, error) {
	sess, err := s.session(c)
	if err != nil {
		return nil, session.RunSummary{}, nil, err
	}
	id := c.Param("run")
	if !runIDRE.MatchString(id) {
		return nil, session.RunSummary{}, nil, wire.New(http.StatusBadRequest, fmt.Sprintf("%q is not a run id", id))
	}
	rs, err := sess.Run(id)
	if err != nil {
		return nil, rs, nil, err
	}
	evs, err := sess.Log.Since(0, id, 0)
	if err != nil {
		return nil, rs, nil, wire.New(http.StatusGone, "this run's events are no longer kept")
	}
	return sess, rs, evs, nil
}

// transcript writes what each worker ran, in order, as an SQL file: every
// statement as it was sent, with its arguments, its worker, its time on
// the database clock and the rows Postgres answered.
func (s *Server) transcript(c echo.Context) error {
	sess, rs, evs, err := s.RunEvents(c)
	if err != nil {
		return err
	}
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "application/sql; charset=utf-8")
	h.Set(echo.HeaderContentDisposition, fmt.Sprintf(`attachment; filename="fencelab-%s-%s.sql"`, sess.ID[:8], rs.ID))
	c.Response().WriteHeader(http.StatusOK)
	w := bufio.NewWriter(c.Response())
	broken := "all guards on"
	if len(rs.Broken) > 0 {
		broken = "broken: " + strings.Join(rs.Broken, ", ")
	}
	fmt.Fprintf(w, "-- fencelab: what each worker ran, in order, in run %s (%s, %s).\n", rs.ID, rs.Ordering, broken)
	fmt.Fprintf(w, "-- Every statement below really ran. The time is the database clock's; rows is what Postgres answered.\n")
	fmt.Fprintf(w, "-- The arguments ($1, $2, ...) are in the comment above each statement.\n\n")
	n := 0
	for _, e := range evs {
		if e.Kind != engine.KindSQL && !(e.Kind == engine.KindError && e.SQL != "") {
			continue
		}
		n++
		rows := int64(0)
		if e.Rows != nil {
			rows = *e.Rows
		}
		fmt.Fprintf(w, "-- #%d  worker %s (pid %d, %s)  at %s  ->  %d row(s)  [%s]\n", e.Seq, e.Actor, e.Pid, e.Owner,
			e.At.UTC().Format("15:04:05.000000"), rows, e.Name)
		fmt.Fprintf(w, "-- %s\n", e.Text)
		for i, a := range e.Args {
			fmt.Fprintf(w, "--   $%d = %s\n", i+1, strings.ReplaceAll(a, "\n", " "))
		}
		fmt.Fprintf(w, "%s;\n\n", strings.TrimRight(e.SQL, "; \n"))
	}
	if n == 0 {
		fmt.Fprintf(w, "-- (no worker ran a statement in this run)\n")
	}
	return w.Flush()
}

func (s *Server) recordings(c echo.Context) error {
	return c.JSON(http.StatusOK, s.cfg.Recordings.List())
}

func (s *Server) findRecording(c echo.Context) error {
	o, err := engine.ParseOrdering(c.QueryParam("ordering"))
	if err != nil || o == engine.FreePlay {
		return wire.New(http.StatusBadRequest, fmt.Sprintf("ordering=%q is not a scripted ordering", c.QueryParam("ordering")))
	}
	var broken []string
	if b := c.QueryParam("broken"); b != "" {
		for _, n := range strings.Split(b, ",") {
			if _, err := engine.ParseGuard(n); err != nil {
				return wire.New(http.StatusBadRequest, fmt.Sprintf("broken=%q: unknown guard %q", b, n))
			}
			broken = append(broken, n)
		}
	}
	r, ok := s.cfg.Recordings.Find(o, broken, c.QueryParam("same") == "1")
	if !ok {
		return wire.New(http.StatusNotFound, "no recorded run is kept on this server")
	}
	return c.JSON(http.StatusOK, r)
}

func (s *Server) recordingByKey(c echo.Context) error {
	key := c.Param("key")
	if !recording.ValidKey(key) {
		return wire.New(http.StatusBadRequest, fmt.Sprintf("%q is not a recording key", key))
	}
	r, ok := s.cfg.Recordings.Get(key)
	if !ok {
		return wire.New(http.StatusNotFound, fmt.Sprintf("no recording %q", key))
	}
	return c.JSON(http.StatusOK, r)
}
