package api

import (
	"context"
	"net/http"
	"sync"

	"github.com/fencelab/fencelab/server/class"
	"github.com/fencelab/fencelab/server/classcheck"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/run/control"
	"github.com/fencelab/fencelab/server/session"
	"github.com/fencelab/fencelab/server/wire"
	"github.com/labstack/echo/v4"
)

// The class API: a teacher opens a class, students join it by its code,
// each with a session of their own to build and check in, and the
// teacher reads the board and the hand-ins (server/class keeps them in
// Postgres).

type classOpened struct {
	Class class.Class `json:"class"`
	// Code is the class's code as students read it: ABC-234.
	Code string `json:"code"`
	// Token is the teacher's, shown this once: the board, the hand-ins
	// and the end take it (Authorization: Bearer TOKEN).
	Token string `json:"token"`
}

func (s *Server) openClass(c echo.Context) error {
	if c.Request().ContentLength != 0 {
		var empty struct{}
		if err := wire.Decode(c, 1024, &empty); err != nil {
			return err
		}
	}
	cl, token, err := s.classes.Create(c.Request().Context(), session.ClientKey(c.RealIP()))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, classOpened{Class: cl, Code: class.FormatCode(cl.Code), Token: token})
}

// teacher reads the class of the request's :id as its teacher.
func (s *Server) teacher(c echo.Context) (class.Class, error) {
	return s.classes.AsTeacher(c.Request().Context(), c.Param("id"), tokenOf(c))
}

func (s *Server) getClass(c echo.Context) error {
	cl, err := s.teacher(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, cl)
}

func (s *Server) endClass(c echo.Context) error {
	cl, err := s.teacher(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	sts, err := s.classes.Students(ctx, cl.ID)
	if err != nil {
		return err
	}
	if err := s.classes.End(ctx, cl.ID); err != nil {
		return err
	}
	// Each student's page on this instance is told, and their checks
	// count no more; a page elsewhere learns it when it joins again.
	_, sessions := s.studentSessions(sts)
	for _, sess := range sessions {
		if sess != nil {
			_ = sess.EndClass() // a session that ended meanwhile has no page to tell
		}
	}
	return c.JSON(http.StatusOK, map[string]bool{"ok": true})
}

func (s *Server) classBoard(c echo.Context) error {
	anonymous, err := flagParam(c, "anonymous")
	if err != nil {
		return err
	}
	cl, err := s.teacher(c)
	if err != nil {
		return err
	}
	b, err := s.classes.Board(c.Request().Context(), cl, anonymous)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, b)
}

// handIns answers the hand-ins, as JSON or CSV; ?anonymous=1 names each
// student as the board does while names are hidden.
func (s *Server) handIns(c echo.Context, asCSV bool) error {
	anonymous, err := flagParam(c, "anonymous")
	if err != nil {
		return err
	}
	cl, err := s.teacher(c)
	if err != nil {
		return err
	}
	hs, err := s.classes.HandIns(c.Request().Context(), cl.ID, anonymous)
	if err != nil {
		return err
	}
	name := "fencelab-class-" + cl.Code
	if anonymous {
		name += "-no-names"
	}
	if asCSV {
		c.Response().Header().Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`.csv"`)
		c.Response().Header().Set(echo.HeaderContentType, "text/csv; charset=utf-8")
		c.Response().WriteHeader(http.StatusOK)
		return class.WriteCSV(c.Response(), hs)
	}
	c.Response().Header().Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`.json"`)
	return c.JSON(http.StatusOK, map[string]any{"class": cl, "handins": hs})
}

// leading is the open class whose teacher sends the request: a class
// that has ended is led no more.
func (s *Server) leading(c echo.Context) (class.Class, error) {
	cl, err := s.teacher(c)
	if err != nil {
		return class.Class{}, err
	}
	if cl.Ended != nil {
		return class.Class{}, fault.Errorf(fault.Conflict, "the class has ended")
	}
	return cl, nil
}

// studentSessions is a row for each student, to say what a command sent
// to the class came to, and the session each drives on this instance:
// nil, and the row's Error saying why, for those it does not hold.
func (s *Server) studentSessions(sts []class.Student) ([]studentTo, []*session.Session) {
	rows := make([]studentTo, len(sts))
	sessions := make([]*session.Session, len(sts))
	for i, st := range sts {
		rows[i] = studentTo{ID: st.ID, Name: st.Name}
		sess, err := s.Sessions.Get(st.Session)
		if st.Session == "" || err != nil {
			rows[i].Error = "their session is not on this server: they join again to get one here"
			continue
		}
		sessions[i] = sess
	}
	return rows, sessions
}

// sentRun is what a run sent to a class came to, student by student.
type sentRun struct {
	Started  int         `json:"started"`
	Students []studentTo `json:"students"`
}

type studentTo struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Run   string `json:"run,omitempty"`
	Error string `json:"error,omitempty"`
}

// runForClass starts one run, the same setup, in every student's session
// ("everyone: run zombie-first now"): each student's page shows it as a
// run of their own, to step through or watch. The body is a run command,
// as a session takes it; any other action is refused. A student whose
// session is on another instance, or gone, is told in the answer; a
// student the server has no run slot for is refused as busy, the others
// start.
func (s *Server) runForClass(c echo.Context) error {
	cl, err := s.leading(c)
	if err != nil {
		return err
	}
	cmd, err := s.readCommand(c)
	if err != nil {
		return err
	}
	if cmd.Action != control.Run {
		return fault.Errorf(fault.Invalid, "a class is sent a run command alone ({\"action\":\"run\",\"ordering\":\"zombie-first\",…}), not %q", cmd.Action)
	}
	ctx := context.WithoutCancel(c.Request().Context()) // as a session's own command: it outlives the request
	sts, err := s.classes.Students(ctx, cl.ID)
	if err != nil {
		return err
	}
	var out sentRun
	var sessions []*session.Session
	out.Students, sessions = s.studentSessions(sts)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4) // a few at a time: each starts two worker processes
	for i, sess := range sessions {
		if sess == nil {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			res, err := sess.Execute(ctx, cmd)
			if err != nil {
				out.Students[i].Error = fault.MessageOf(err)
				return
			}
			out.Students[i].Run = res.Run
			_ = sess.ToldRun(res.Run) // a session that ended meanwhile has no page to tell
		})
	}
	wg.Wait()
	for _, st := range out.Students {
		if st.Run != "" {
			out.Started++
		}
	}
	return c.JSON(http.StatusOK, out)
}

// joinRequest is a student's join: the class's code, the name they
// choose, and the token of an earlier join, if they have one.
type joinRequest struct {
	Code  string `json:"code"`
	Name  string `json:"name"`
	Token string `json:"token"`
}

type joined struct {
	Student class.Student `json:"student"`
	// Token is the student's own: sent again with a later join, it is the
	// same student.
	Token   string  `json:"token"`
	Session created `json:"session"`
}

// joinClass takes a student into a class, with a session of their own to
// drive: the one they had, if it is still here, or a new one. A
// student's session has caps of its own, not its address's: a class
// behind one address is many readers.
func (s *Server) joinClass(c echo.Context) error {
	var req joinRequest
	if err := wire.Decode(c, 4096, &req); err != nil {
		return err
	}
	// Counted by the address itself, loopback too: a proxy on this machine
	// not named by --trust-proxy makes every visitor one address, and a
	// guess is throttled all the same.
	addr := session.ClientKey(c.RealIP()) // an IPv6 address by its /64, as the caps count
	if addr == "" {
		addr = c.RealIP()
	}
	if err := s.guesses.try(addr); err != nil {
		return err
	}
	ctx := c.Request().Context()
	st, token, err := s.classes.Join(ctx, req.Code, req.Name, req.Token)
	if fault.CodeOf(err) != fault.NotFound { // only a well-formed code no open class has is a guess
		s.guesses.unguess(addr)
	}
	if err != nil {
		return err
	}
	var sess *session.Session
	if st.Session != "" {
		sess, _ = s.Sessions.Get(st.Session) // gone (idle, or another instance's): a new one
	}
	if sess == nil {
		if sess, err = s.Sessions.CreateFor("student " + st.ID); err != nil {
			return err
		}
		if err := s.classes.SetSession(ctx, st.ID, sess.ID); err != nil {
			return err
		}
	}
	code, _ := class.ParseCode(req.Code) // Join took it
	sess.SetClass(session.ClassSeat{Class: st.Class, Code: class.FormatCode(code), Student: st.Name}, classcheck.StudentLine(s.line, st.Class, st.ID))
	snap, err := sess.Snapshot(ctx, true)
	if err != nil {
		return err
	}
	status := http.StatusOK // the same student again
	if token != req.Token {
		status = http.StatusCreated
	}
	return c.JSON(status, joined{Student: st, Token: token, Session: created{ID: sess.ID, Token: sess.Token,
		WatchURL: "/s/" + sess.ID, DriveURL: "/s/" + sess.ID + "#token=" + sess.Token, Snapshot: snap}})
}

// flagParam reads a yes/no query parameter: absent, 0 or false is no; 1
// or true is yes; anything else is refused.
func flagParam(c echo.Context, name string) (bool, error) {
	switch v := c.QueryParam(name); v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	default:
		return false, fault.Errorf(fault.Invalid, "%s must be 1 or 0, not %q", name, v)
	}
}

// chapterRequest is a chapter sent to a class: the id of one of the
// lesson's chapters (experiments.Chapters).
type chapterRequest struct {
	Chapter string `json:"chapter"`
}

// sentChapter is what a chapter sent to a class came to, student by
// student: Sent counts the sessions that took it.
type sentChapter struct {
	Sent     int         `json:"sent"`
	Students []studentTo `json:"students"`
}

// chapterForClass opens one chapter of the guided lesson on every
// student's page ("everyone: open The pieces"): a note in each student's
// session (Session.OpenChapter), which their page takes as ?lesson=<id>.
// It starts no run, so the notes go one after another, not a few at a
// time as runForClass's runs do. A chapter the lesson does not have is
// refused, naming the ones it has; a student whose session is on another
// instance, or gone, is told in the answer.
func (s *Server) chapterForClass(c echo.Context) error {
	cl, err := s.leading(c)
	if err != nil {
		return err
	}
	var req chapterRequest
	if err := wire.Decode(c, 1024, &req); err != nil {
		return err
	}
	chapter, err := experiments.ParseChapter(req.Chapter)
	if err != nil {
		return err
	}
	sts, err := s.classes.Students(c.Request().Context(), cl.ID)
	if err != nil {
		return err
	}
	var out sentChapter
	var sessions []*session.Session
	out.Students, sessions = s.studentSessions(sts)
	for i, sess := range sessions {
		if sess == nil {
			continue
		}
		if err := sess.OpenChapter(chapter); err != nil {
			out.Students[i].Error = fault.MessageOf(err)
			continue
		}
		out.Sent++
	}
	return c.JSON(http.StatusOK, out)
}
