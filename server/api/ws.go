package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/control"
	"github.com/fencelab/fencelab/server/session"
	"github.com/fencelab/fencelab/server/session/eventlog"
	"github.com/fencelab/fencelab/server/wire"
	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"
)

// The socket's frames are wire.Frame's: server/wire/frame.go is the one
// description of the protocol, frame by frame.
//
// A client that falls behind is closed with 1008 (policy violation) and
// resumes with ?since= the last seq it saw; so is one that sends more than
// the message rate allows. Messages larger than the limit close the socket
// with 1009.

const (
	writeTimeout = 5 * time.Second
	pingEvery    = 20 * time.Second
	// statusGone: the events the client asked for are no longer kept.
	statusGone websocket.StatusCode = 4001
	// statusEnded: the session has ended (idle, or its driver ended it);
	// reconnecting would find nothing. A shutdown closes with 1001 instead.
	statusEnded websocket.StatusCode = 4002
)

// socket streams a session's events to one client from ?since= on, and
// takes commands from a driver.
func (s *Server) socket(c echo.Context) error {
	sess, err := s.session(c)
	if err != nil {
		return err
	}
	// The origin first: a page that may not open the socket learns
	// nothing else, not even whether a token is right.
	if o := c.Request().Header.Get("Origin"); !originAllowed(c.Request(), s.cfg.AllowOrigins) {
		return fault.Errorf(fault.Forbidden, "pages of %s may not open this socket: only the server's own origin and those given with --allow-origin may", strconv.QuoteToASCII(shorten(o)))
	}
	since, err := sinceParam(c, sess)
	if err != nil {
		return err
	}
	token := c.QueryParam("token")
	driver := false
	if token != "" {
		if !sess.CanDrive(token) {
			return fault.Errorf(fault.Forbidden, "that control token is not this session's")
		}
		driver = true
	}
	if !wire.IsUpgrade(c.Request()) {
		return fault.Errorf(fault.Upgrade, "this is a WebSocket endpoint: connect with a WebSocket client")
	}
	// One address may hold only so many: over the cap the socket is
	// refused before the upgrade, so it holds nothing.
	release, err := s.holdSocket(c.RealIP())
	if err != nil {
		return err
	}
	defer release()
	// The origin is checked above, scheme and all; the library's own check
	// matches hosts alone.
	conn, err := websocket.Accept(c.Response(), c.Request(), &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return nil // Accept has answered the client already
	}
	if !s.track(conn) {
		conn.Close(websocket.StatusGoingAway, "the server is shutting down")
		return nil
	}
	defer s.untrack(conn)
	conn.SetReadLimit(s.cfg.MaxMessage)
	s.serveSocket(sess, conn, since, driver)
	return nil
}

func (s *Server) serveSocket(sess *session.Session, conn *websocket.Conn, since int64, driver bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	write := func(b []byte) error {
		wctx, wcancel := context.WithTimeout(ctx, writeTimeout)
		defer wcancel()
		return conn.Write(wctx, websocket.MessageText, b)
	}
	writeJSON := func(f wire.Frame) error {
		b, _ := json.Marshal(f) // a Frame always encodes
		return write(b)
	}

	sess.Claim() // a socket: someone is there, not a bare page load
	sub, backlog, err := sess.Log.Subscribe(since)
	// since=0 asks for everything there is: once the oldest events are
	// dropped, that is every one still kept (hello's since says where
	// they start). Another since resumes exactly, or not at all.
	for i := 0; since == 0 && errors.Is(err, eventlog.ErrGone) && i < 3; i++ {
		since = sess.Log.Dropped("")
		sub, backlog, err = sess.Log.Subscribe(since)
	}
	if errors.Is(err, eventlog.ErrGone) {
		conn.Close(statusGone, "the events after that seq are no longer kept; reload the session")
		return
	}
	if err != nil {
		conn.Close(s.endCode(), "the session has ended")
		return
	}
	defer sub.Close()
	role := "viewer"
	if driver {
		role = "driver"
	}
	hello := wire.Frame{Type: wire.FrameHello, Session: sess.ID, Role: role, Since: since, LastSeq: sess.Log.LastSeq(), ProtocolVersion: protocol.ProtocolVersion}
	if writeJSON(hello) != nil {
		return
	}
	last := since
	for _, en := range backlog {
		if write(en.Frame) != nil {
			return
		}
		last = en.Event.Seq
	}
	if writeJSON(wire.Frame{Type: wire.FrameLive, Seq: last}) != nil {
		return
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cancel()
		s.readSocket(ctx, sess, conn, driver, writeJSON)
	}()
	defer wg.Wait()

	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	for {
		select {
		case en, ok := <-sub.C:
			if !ok {
				if errors.Is(sub.Err(), eventlog.ErrSlow) {
					conn.Close(websocket.StatusPolicyViolation, fmt.Sprintf("too slow: reconnect with since=%d", last))
				} else {
					conn.Close(s.endCode(), "the session has ended")
				}
				return
			}
			if write(en.Frame) != nil {
				conn.CloseNow()
				return
			}
			last = en.Event.Seq
		case <-ping.C:
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			err := conn.Ping(pctx)
			pcancel()
			if err != nil {
				conn.CloseNow()
				return
			}
		case <-ctx.Done():
			conn.CloseNow()
			return
		}
	}
}

// readSocket reads client messages until the socket closes.
func (s *Server) readSocket(ctx context.Context, sess *session.Session, conn *websocket.Conn, driver bool, reply func(wire.Frame) error) {
	lim := rate.NewLimiter(rate.Limit(s.cfg.MessageRate), max(1, int(2*s.cfg.MessageRate)))
	var running sync.WaitGroup
	defer running.Wait()
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			return // closed, or too big (the library closes with 1009)
		}
		if !lim.Allow() {
			conn.Close(websocket.StatusPolicyViolation, fmt.Sprintf("too many messages: at most %g a second", s.cfg.MessageRate))
			return
		}
		sess.Touch()
		if typ != websocket.MessageText {
			_ = reply(wire.Frame{Type: wire.FrameError, Error: "messages are JSON text, not binary"})
			continue
		}
		m, err := wire.DecodeClientFrame(b)
		if err != nil {
			_ = reply(wire.Frame{Type: wire.FrameError, Error: err.Error()})
			continue
		}
		if m.Type == wire.FramePing {
			_ = reply(wire.Frame{Type: wire.FramePong, ID: m.ID})
			continue
		}
		if !driver {
			err := fault.Errorf(fault.Forbidden, "you are watching this session: driving it needs its control token")
			_ = reply(wire.ReplyFrame(m.ID, nil, err))
			continue
		}
		cmd, err := control.Parse(m.Command, s.limits())
		if err != nil {
			_ = reply(wire.ReplyFrame(m.ID, nil, err))
			continue
		}
		// A step can take as long as a lease: run it aside so pings and
		// other commands (pause a worker) still get through.
		running.Add(1)
		go func() {
			defer running.Done()
			res, err := sess.Execute(context.Background(), cmd)
			if err != nil {
				_ = reply(wire.ReplyFrame(m.ID, nil, err))
				return
			}
			_ = reply(wire.ReplyFrame(m.ID, res, nil))
		}()
	}
}

// endCode is the close code of a socket whose session's log has closed: a
// session that ended, or the whole server going away.
func (s *Server) endCode() websocket.StatusCode {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return websocket.StatusGoingAway
	}
	return statusEnded
}

// originAllowed reports whether the page that sent r may open a socket:
// a request with no Origin (not a browser), a page of the server's own
// host, or one whose origin is allowed. An allowed origin is a scheme and
// a host (and port), such as https://blog.example.com, and matches that
// scheme and host only: http://blog.example.com is another origin. A host
// of *.example.com matches every subdomain of example.com, not
// example.com itself, nor evil-example.com, nor example.com.evil.net. An
// entry without a scheme means https, the only scheme a public page
// should drive the playground from.
func originAllowed(r *http.Request, allowed []string) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	if strings.EqualFold(host, r.Host) {
		return true // the server's own page, whichever scheme a proxy in front speaks
	}
	for _, a := range allowed {
		as, ah, ok := strings.Cut(strings.ToLower(strings.TrimSuffix(a, "/")), "://")
		if !ok {
			as, ah = "https", as
		}
		if as != scheme {
			continue
		}
		if sub, ok := strings.CutPrefix(ah, "*."); ok {
			if name, found := strings.CutSuffix(host, "."+sub); found && name != "" && !strings.ContainsAny(name, ":/") {
				return true
			}
			continue
		}
		if ah == host {
			return true
		}
	}
	return false
}
