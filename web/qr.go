package web

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/labstack/echo/v4"
	qrcode "github.com/skip2/go-qrcode"
)

// The watch link as a QR code, for students to scan off a projector. A
// phone must be able to reach the address it encodes: when the server
// listens on every interface, that is this machine's address on the local
// network; when it listens on loopback only, no phone can reach it, and
// the page says so.

// watchURL returns the address students' phones should open for session
// id, and whether a phone on the local network can reach it.
func (h *handler) watchURL(c echo.Context, id string) (string, bool) {
	addr := h.s.Config().Listener.Addr().String()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return h.s.URL() + "/s/" + id, false
	}
	ip := net.ParseIP(host)
	switch {
	case ip != nil && ip.IsLoopback():
		return h.s.URL() + "/s/" + url.PathEscape(id), false
	case ip == nil || ip.IsUnspecified():
		if lan := lanAddress(); lan != "" {
			return "http://" + net.JoinHostPort(lan, port) + "/s/" + url.PathEscape(id), true
		}
		// No local network address: the address the browser used is the
		// best there is.
		return "http://" + c.Request().Host + "/s/" + url.PathEscape(id), !strings.HasPrefix(c.Request().Host, "127.") && !strings.HasPrefix(c.Request().Host, "localhost")
	}
	return "http://" + net.JoinHostPort(host, port) + "/s/" + url.PathEscape(id), true
}

// lanAddress returns this machine's first private IPv4 address, or "".
func lanAddress() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsPrivate() {
			return n.IP.String()
		}
	}
	return ""
}

// qr serves the watch link of a session as an SVG QR code: GET /s/:id/qr.svg.
func (h *handler) qr(c echo.Context) error {
	sess, err := h.s.Sessions.Get(c.Param("id"))
	if err != nil {
		return err
	}
	link, _ := h.watchURL(c, sess.ID)
	code, err := qrcode.New(link, qrcode.Medium)
	if err != nil {
		return fault.Errorf(fault.Internal, "the QR code of the watch link: %v", err)
	}
	code.DisableBorder = false
	bits := code.Bitmap()
	n := len(bits)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" shape-rendering="crispEdges" role="img" aria-label="QR code of %s">`, n, n, link)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/><path fill="#000" d="`, n, n)
	for y, row := range bits {
		for x, on := range row {
			if on {
				fmt.Fprintf(&b, "M%d %dh1v1h-1z", x, y)
			}
		}
	}
	b.WriteString(`"/></svg>`)
	hd := c.Response().Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	return c.Blob(http.StatusOK, "image/svg+xml", []byte(b.String()))
}
