package api

import (
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/server/fault"
)

// refuseCrossSite refuses a request that changes state (any method but
// GET, HEAD and OPTIONS) when a browser sent it from another site's page:
// any page a teacher visits could otherwise open classes in their name, or
// a reader's page start runs on their behalf. Two rules, both needed:
//
//   - Origin: a browser names the page's origin on every such request. It
//     must be the server's own (its Host, whichever scheme a proxy in front
//     speaks) or one --allow-origin names (originAllowed, the socket's own
//     rule); Sec-Fetch-Site: same-origin, which no page can forge, is the
//     server's own too. A request with neither header is not a browser's
//     (curl, the CLI, a worker) and goes on.
//   - Content type: a body must be JSON. A page may send text/plain or a
//     form to any site without asking first; JSON it may not, so a body of
//     another type is refused (415), and so is a body with no type.
//
// The embed keeps working: the framed page is the server's own and talks
// to its own origin.
func (s *Server) refuseCrossSite(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		switch {
		case r.Method == http.MethodGet, r.Method == http.MethodHead, r.Method == http.MethodOptions:
			return next(c)
		case !strings.HasPrefix(r.URL.Path, "/api/"):
			return next(c) // a run's receiver: its workers are programs, and its key is the secret
		}
		if origin := r.Header.Get("Origin"); s.fromAnotherSite(r) {
			from := "another site"
			if origin != "" {
				from = strconv.QuoteToASCII(shorten(origin))
			}
			return fault.Errorf(fault.Forbidden, "a request from a page of %s is refused: this server takes commands from its own pages and the origins --allow-origin names", from)
		}
		if ct := r.Header.Get(echo.HeaderContentType); ct != "" {
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != echo.MIMEApplicationJSON {
				return fault.Errorf(fault.Unsupported, "the body must be JSON (Content-Type: application/json), not %s", strconv.QuoteToASCII(shorten(ct)))
			}
		} else if r.ContentLength != 0 {
			return fault.Errorf(fault.Unsupported, "the body must be JSON, sent with Content-Type: application/json")
		}
		return next(c)
	}
}

// fromAnotherSite says whether a browser sent r from a page the server
// does not take commands from.
func (s *Server) fromAnotherSite(r *http.Request) bool {
	site, origin := r.Header.Get("Sec-Fetch-Site"), r.Header.Get("Origin")
	switch {
	case site == "same-origin":
		return false
	case origin != "":
		return !originAllowed(r, s.cfg.AllowOrigins)
	case site == "" || site == "none":
		return false // not a browser, or a page typed into the address bar
	}
	return true // cross-site or same-site, its origin withheld
}
