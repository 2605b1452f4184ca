package api

import (
	"net/http"
	"strings"

	"github.com/coder/websocket"
)

// The server as the host of its instances.Forwarder, which passes a
// request for another instance's session on to it: what a session's
// address looks like, and the server's socket accounting.

// SessionInPath is the session a request's path names, when it has a session
// id's form; "".
func (s *Server) SessionInPath(r *http.Request) string {
	if id := sessionOf(r.URL.Path); sessionIDForm(id) {
		return id
	}
	return ""
}

// Has reports whether session id lives on this instance.
func (s *Server) Has(id string) bool { return s.Sessions.Has(id) }

// HoldSocket counts one more socket for the client at addr.
func (s *Server) HoldSocket(addr string) (release func(), err error) { return s.holdSocket(addr) }

// Track keeps a socket among those closed at shutdown.
func (s *Server) Track(c *websocket.Conn) bool { return s.track(c) }

// Untrack forgets a socket Track kept.
func (s *Server) Untrack(c *websocket.Conn) { s.untrack(c) }

// MaxMessage bounds a reader's frames.
func (s *Server) MaxMessage() int64 { return s.cfg.MaxMessage }

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
