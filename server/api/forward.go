package api

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/labstack/echo/v4"
)

// Several instances behind one reverse proxy: a request for a session that
// lives on another instance (the table of the Postgres they share says
// which) is passed on to it, WebSocket and all, so a watch or drive link
// works whichever instance it reaches.

// forwardedBy marks a request one instance passed on to another: it is
// never passed on again.
const forwardedBy = "X-Fencelab-Forwarded-By"

// sessionOf is the session id a path names: /s/{id}… or
// /api/sessions/{id}…; "" for any other path.
func sessionOf(path string) string {
	var rest string
	switch {
	case strings.HasPrefix(path, "/s/"):
		rest = path[len("/s/"):]
	case strings.HasPrefix(path, "/api/sessions/"):
		rest = path[len("/api/sessions/"):]
	default:
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// sessionIDForm reports whether id has the form of a session id: 22
// characters of base64url, the encoding of the 16 random bytes the session
// manager draws (session.Manager.CreateFor). Anything else — a NUL, a
// byte that is not UTF-8, an id of a kilobyte — is answered 404 before it
// reaches Postgres (which would refuse the bytes and log a warning per
// request) or a log line.
func sessionIDForm(id string) bool {
	if len(id) != 22 {
		return false
	}
	for i := 0; i < len(id); i++ {
		b := id[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_') {
			return false
		}
	}
	return true
}

// Bounds of a request passed on. An owner that is frozen (SIGSTOP, a
// stuck machine) accepts connections and never answers: without them each
// request for its sessions would wait for ever, a goroutine and a socket
// apiece.
const (
	forwardDialTimeout   = 3 * time.Second // to connect to the owner
	forwardHeaderTimeout = 5 * time.Second // for its answer's header (or its socket's upgrade)
	// forwardQuiet is how long an owner that did not answer is not asked
	// again: requests for its sessions are answered 503 at once meanwhile,
	// instead of each waiting out the timeouts above.
	forwardQuiet = 5 * time.Second
	// forwardPing is how often a socket passed on checks that the owner
	// still answers, and forwardPingWait how long it waits for it.
	forwardPing     = 10 * time.Second
	forwardPingWait = 5 * time.Second
)

// newForwardTransport is the transport of every request passed on to
// another instance: bounded dial and header waits, a few idle
// connections kept per owner.
func newForwardTransport() *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: forwardDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   forwardDialTimeout,
		ResponseHeaderTimeout: forwardHeaderTimeout,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   16,
	}
}

// errNoAnswer: the owner did not answer (refused, timed out, broke off).
var errNoAnswer = errors.New("the owner did not answer")

// quietOwner reports whether owner failed to answer a moment ago.
func (s *Server) quietOwner(owner string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	until, ok := s.quiet[owner]
	if ok && time.Now().After(until) {
		delete(s.quiet, owner)
		return false
	}
	return ok
}

func (s *Server) markQuiet(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.quiet[owner] = time.Now().Add(forwardQuiet)
}

// forward passes a request for another instance's session on to it. An
// owner that does not answer within the bounds above gets its request a
// 503 (or, when it is gone and so its sessions too, a 404 from here).
func (s *Server) forward(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		id := sessionOf(req.URL.Path)
		if !sessionIDForm(id) || req.Header.Get(forwardedBy) != "" || s.Sessions.Has(id) {
			return next(c) // what cannot be a session id is never looked up: this instance answers 404
		}
		owner, ok := s.Sessions.Owner(req.Context(), id)
		if !ok {
			return next(c) // nobody else has it: this instance answers, with a 404
		}
		target, err := url.Parse(owner)
		if err != nil || (target.Scheme != "http" && target.Scheme != "https") {
			return next(c)
		}
		unavailable := fault.Errorf(fault.Unavailable, "the instance that holds this session does not answer; try again in a moment")
		if s.quietOwner(owner) {
			return unavailable
		}
		if isUpgrade(req) {
			err = s.forwardSocket(c, target)
		} else {
			err = s.forwardHTTP(c, target)
		}
		if !errors.Is(err, errNoAnswer) {
			return err
		}
		// The owner did not answer: if it is gone its sessions are too.
		s.markQuiet(owner)
		s.Sessions.SweepPeers(req.Context())
		if _, still := s.Sessions.Owner(req.Context(), id); still {
			return unavailable
		}
		return next(c)
	}
}

// forwardHTTP passes a plain request on to target; errNoAnswer when the
// owner did not answer before anything was sent to the client.
func (s *Server) forwardHTTP(c echo.Context, target *url.URL) error {
	failed := false
	proxy := &httputil.ReverseProxy{
		Transport: s.fwd,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host // the Origin check compares with the address the reader used
			pr.Out.Header.Set(forwardedBy, s.Sessions.Instance())
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			failed = true
		},
	}
	proxy.ServeHTTP(c.Response(), c.Request())
	if !failed || c.Response().Committed {
		return nil // answered by the owner (or cut off while it answered)
	}
	return errNoAnswer
}

// forwardSocket passes a WebSocket on to target, message by message, so
// that however it ends the reader is told with a close code: the owner's
// own, or 1011 with a reason when the owner broke off or stopped
// answering. An owner that refuses the upgrade has its answer passed on.
func (s *Server) forwardSocket(c echo.Context, target *url.URL) error {
	req := c.Request()
	release, err := s.holdSocket(c.RealIP())
	if err != nil {
		return err
	}
	defer release()
	u := *target
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[target.Scheme]
	u.Path, u.RawPath, u.RawQuery = req.URL.Path, req.URL.RawPath, req.URL.RawQuery
	h := http.Header{}
	for _, k := range []string{"Origin", "User-Agent", "Authorization", "X-Fencelab-Token"} {
		if v := req.Header.Values(k); len(v) > 0 {
			h[k] = v
		}
	}
	h.Set(forwardedBy, s.Sessions.Instance())
	if host, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
		if prior := req.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			host = strings.Join(prior, ", ") + ", " + host
		}
		h.Set("X-Forwarded-For", host)
	}
	h.Set("X-Forwarded-Host", req.Host)
	proto := "http"
	if req.TLS != nil {
		proto = "https"
	}
	h.Set("X-Forwarded-Proto", proto)
	dctx, dcancel := context.WithTimeout(req.Context(), forwardDialTimeout+forwardHeaderTimeout)
	up, resp, err := websocket.Dial(dctx, u.String(), &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: s.fwd}, HTTPHeader: h,
		Host: req.Host, // the Origin check compares with the address the reader used
	})
	dcancel()
	if err != nil {
		if resp == nil || resp.StatusCode == http.StatusSwitchingProtocols {
			return errNoAnswer
		}
		// The owner refused the socket (a bad since, a wrong token, an
		// origin it does not allow): its answer is the reader's.
		for _, k := range []string{echo.HeaderContentType, "Retry-After"} {
			if v := resp.Header.Get(k); v != "" {
				c.Response().Header().Set(k, v)
			}
		}
		c.Response().WriteHeader(resp.StatusCode)
		if resp.Body != nil {
			_, _ = io.Copy(c.Response(), resp.Body)
		}
		return nil
	}
	defer up.CloseNow()
	up.SetReadLimit(64 << 20) // the owner's frames: it bounds them itself
	// The owner has checked the origin, scheme and all.
	conn, err := websocket.Accept(c.Response(), req, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		up.Close(websocket.StatusGoingAway, "the reader went away")
		return nil // Accept has answered the client already
	}
	if !s.track(conn) {
		conn.Close(websocket.StatusGoingAway, "the server is shutting down")
		up.Close(websocket.StatusGoingAway, "the server is shutting down")
		return nil
	}
	defer s.untrack(conn)
	conn.SetReadLimit(s.cfg.MaxMessage)
	relaySocket(conn, up)
	return nil
}

// relaySocket copies messages between a reader's socket and the owner's
// until either ends, then ends the other with a close code: the one its
// peer sent, or, when the owner broke off without one or stopped
// answering its pings, 1011 and a reason.
func relaySocket(reader, owner *websocket.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type end struct {
		byOwner bool
		err     error
	}
	ends := make(chan end, 3)
	pipe := func(from, to *websocket.Conn, byOwner bool) {
		for {
			typ, b, err := from.Read(ctx)
			if err != nil {
				ends <- end{byOwner, err}
				return
			}
			wctx, wcancel := context.WithTimeout(ctx, writeTimeout)
			err = to.Write(wctx, typ, b)
			wcancel()
			if err != nil {
				ends <- end{!byOwner, err}
				return
			}
		}
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); pipe(reader, owner, false) }()
	go func() { defer wg.Done(); pipe(owner, reader, true) }()
	go func() {
		defer wg.Done()
		t := time.NewTicker(forwardPing)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				pctx, pcancel := context.WithTimeout(ctx, forwardPingWait)
				err := owner.Ping(pctx)
				pcancel()
				if err != nil && ctx.Err() == nil {
					ends <- end{true, errNoAnswer}
					return
				}
			}
		}
	}()
	e := <-ends
	var ce websocket.CloseError
	closed := errors.As(e.err, &ce)
	if closed && (ce.Code == websocket.StatusNoStatusRcvd || ce.Code == websocket.StatusAbnormalClosure || ce.Code == websocket.StatusTLSHandshake) {
		ce = websocket.CloseError{Code: websocket.StatusNormalClosure} // codes a close frame may not carry
	}
	if e.byOwner {
		if closed {
			_ = reader.Close(ce.Code, ce.Reason)
		} else {
			_ = reader.Close(websocket.StatusInternalError, "the instance that holds this session stopped answering; reconnect to carry on")
		}
		owner.CloseNow()
	} else {
		if closed {
			_ = owner.Close(ce.Code, ce.Reason)
		}
		owner.CloseNow()
		reader.CloseNow()
	}
	cancel()
	wg.Wait()
}
