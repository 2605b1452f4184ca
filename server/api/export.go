package api

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/recording"
	"github.com/fencelab/fencelab/server/session"
	"github.com/labstack/echo/v4"
)

// RunEvents returns the events of one run of a session, checking the ids:
// the whole run when the session keeps all its events, else those it
// keeps, with the answer's X-Fencelab-Dropped-Before header saying the seq
// before which they are gone.
func (s *Server) RunEvents(c echo.Context) (*session.Session, protocol.RunInfo, []protocol.Event, error) {
	sess, info, evs, _, err := s.runEvents(c)
	return sess, info, evs, err
}

// runEvents is RunEvents, and the seq before which the run's events are no
// longer kept (0: it is whole).
func (s *Server) runEvents(c echo.Context) (*session.Session, protocol.RunInfo, []protocol.Event, int64, error) {
	sess, err := s.session(c)
	if err != nil {
		return nil, protocol.RunInfo{}, nil, 0, err
	}
	id := c.Param("run")
	if err := validateRunID("", id); err != nil {
		return nil, protocol.RunInfo{}, nil, 0, err
	}
	info, err := sess.Run(id)
	if err != nil {
		return nil, info, nil, 0, err
	}
	evs, dropped, err := s.keptSince(sess, 0, id, 0)
	if err != nil {
		return nil, info, nil, 0, err
	}
	if len(evs) == 0 && dropped > 0 {
		return nil, info, nil, 0, fault.Errorf(fault.Gone, "the events of run %s are no longer kept (a session keeps only its newest events)", id)
	}
	setDropped(c, dropped)
	return sess, info, evs, dropped, nil
}

// attachment is a Content-Disposition header value for a download named
// name. The name is made of ids the server checked, but only letters,
// digits, '.', '-' and '_' are ever put in the header: anything else
// becomes '_', so a header never carries a quote, a control byte or a
// byte a client chose.
func attachment(name string) string {
	safe := []byte(name)
	for i, b := range safe {
		if !(b == '.' || b == '-' || b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z') {
			safe[i] = '_'
		}
	}
	return `attachment; filename="` + string(safe) + `"`
}

// transcript writes what each worker ran, in order, as an SQL file: every
// statement as it was sent, with its arguments, its worker, its time on
// the database clock and the rows Postgres answered.
func (s *Server) transcript(c echo.Context) error {
	sess, info, evs, dropped, err := s.runEvents(c)
	if err != nil {
		return err
	}
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "application/sql; charset=utf-8")
	h.Set(echo.HeaderContentDisposition, attachment(fmt.Sprintf("fencelab-%s-%s.sql", sess.ID[:8], info.ID)))
	c.Response().WriteHeader(http.StatusOK)
	w := bufio.NewWriter(c.Response())
	broken := "all guards on"
	if len(info.Broken) > 0 {
		broken = "broken: " + strings.Join(info.Broken, ", ")
	}
	fmt.Fprintf(w, "-- fencelab: what each worker ran, in order, in run %s (%s, %s).\n", info.ID, info.Ordering, broken)
	fmt.Fprintf(w, "-- Every statement below really ran. The time is the database clock's; rows is what Postgres answered.\n")
	fmt.Fprintf(w, "-- The arguments ($1, $2, ...) are in the comment above each statement.\n")
	if dropped > 0 {
		fmt.Fprintf(w, "-- Not whole: the session no longer keeps this run's events before #%d (it keeps only its newest events); what it keeps follows.\n", dropped)
	}
	fmt.Fprintf(w, "\n")
	pids := map[string]int{}
	n := 0
	for _, e := range evs {
		if e.Process != nil && e.Process.Pid != 0 {
			pids[e.Actor] = e.Process.Pid
		}
		if e.SQL == nil {
			continue
		}
		n++
		sq := e.SQL
		fmt.Fprintf(w, "-- #%d  worker %s (pid %d, %s)  at %s  ->  %d row(s)  [%s: %s]\n", e.Seq, e.Actor, pids[e.Actor], sq.Owner,
			e.At.UTC().Format("15:04:05.000000"), sq.Stmt.Rows, sq.Stmt.Name, sq.Result)
		if sq.Fenced != nil {
			fmt.Fprintf(w, "-- fenced: the row was %s at epoch %d, owned by %s\n", sq.Fenced.RowStatus, sq.Fenced.RowEpoch, sq.Fenced.RowOwner)
		}
		if sq.Error != nil {
			fmt.Fprintf(w, "-- failed (%s): %s\n", sq.Error.Code, strings.ReplaceAll(sq.Error.Message, "\n", " "))
		}
		for i, a := range sq.Stmt.Args {
			fmt.Fprintf(w, "--   $%d = %s\n", i+1, strings.ReplaceAll(a, "\n", " "))
		}
		fmt.Fprintf(w, "%s;\n\n", strings.TrimRight(sq.Stmt.SQL, "; \n"))
	}
	if n == 0 {
		fmt.Fprintf(w, "-- (no worker ran a statement in this run)\n")
	}
	return w.Flush()
}

func (s *Server) recordings(c echo.Context) error {
	return c.JSON(http.StatusOK, s.cfg.Recordings.List())
}

// found is the answer to GET /api/recordings/find: the recording, and
// whether it is of the very setup asked for or only the closest kept.
type found struct {
	recording.Recording
	Exact bool `json:"exact"`
}

func (s *Server) findRecording(c echo.Context) error {
	o, err := experiments.ParseOrdering(c.QueryParam("ordering"))
	if err != nil || o == experiments.FreePlay {
		return fault.Errorf(fault.Invalid, "ordering=%s is not a scripted ordering", strconv.QuoteToASCII(shorten(c.QueryParam("ordering"))))
	}
	var broken []string
	if b := c.QueryParam("broken"); b != "" {
		for _, n := range strings.Split(b, ",") {
			if _, err := playground.ParseGuard(n); err != nil {
				return fault.Errorf(fault.Invalid, "broken: unknown guard %s", strconv.QuoteToASCII(shorten(n)))
			}
			broken = append(broken, n)
		}
	}
	same := c.QueryParam("same") == "1"
	r, ok := s.cfg.Recordings.Find(o, broken, same)
	if !ok {
		return fault.Errorf(fault.NotFound, "no recorded run is kept on this server")
	}
	return c.JSON(http.StatusOK, found{Recording: r, Exact: r.Key == recording.Key(o, broken, same)})
}

func (s *Server) recordingByKey(c echo.Context) error {
	key := c.Param("key")
	if !recording.ValidKey(key) {
		return fault.Errorf(fault.Invalid, "%s is not a recording key", strconv.QuoteToASCII(shorten(key)))
	}
	r, ok := s.cfg.Recordings.Get(key)
	if !ok {
		return fault.Errorf(fault.NotFound, "no recording %s", strconv.QuoteToASCII(key))
	}
	return c.JSON(http.StatusOK, r)
}

// loadRecording answers the latest finished load lab, or the one the
// binary carries, to replay when the server cannot run another.
func (s *Server) loadRecording(c echo.Context) error {
	r, ok := s.cfg.Recordings.Load()
	if !ok {
		return fault.Errorf(fault.NotFound, "no load lab has been recorded yet")
	}
	return c.JSON(http.StatusOK, r)
}
