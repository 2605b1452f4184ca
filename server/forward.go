package server

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

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

// forward passes a request for another instance's session on to it.
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
		failed := false
		proxy := &httputil.ReverseProxy{
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
		proxy.ServeHTTP(c.Response(), req)
		if !failed || c.Response().Committed {
			return nil // answered by the owner (or cut off while it answered)
		}
		// The owner did not answer: if it is gone its sessions are too.
		s.Sessions.SweepPeers(req.Context())
		if _, still := s.Sessions.Owner(req.Context(), id); still {
			return fault.Errorf(fault.Unavailable, "the instance that holds this session does not answer; try again in a moment")
		}
		return next(c)
	}
}
