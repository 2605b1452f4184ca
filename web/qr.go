package web

import (
	"encoding/json"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/labstack/echo/v4"
	qrcode "github.com/skip2/go-qrcode"
)

// The watch link as a QR code, for students to scan off a projector. A
// phone must be able to reach the address it encodes: when the server
// listens on every interface, that is this machine's address on the local
// network (see chooseAddrs), or another of its addresses that the
// presenter picks; when it listens on loopback only, no phone can reach
// it, and the page says so.

// watchAddress is one address of this machine that the watch link may
// use, as the page gets it (the boot state's "addresses"): its interface,
// the IP, the watch link at that IP and the server's port, and whether
// it is the one the QR code shows unless the presenter picks another.
type watchAddress struct {
	Name    string `json:"name"`
	IP      string `json:"ip"`
	URL     string `json:"url"`
	Default bool   `json:"default"`
}

// watchAddresses is a list of them, always a JSON array: [] when there
// are none, so the page never meets a null.
type watchAddresses []watchAddress

func (w watchAddresses) MarshalJSON() ([]byte, error) {
	if w == nil {
		w = watchAddresses{}
	}
	return json.Marshal([]watchAddress(w))
}

// network is this machine's network, or the fake one a test gave.
func (h *handler) network() netView {
	if h.opts.netFunc != nil {
		return h.opts.netFunc()
	}
	return currentNet()
}

// watchURL returns the address students' phones should open for session
// id, whether a phone on the local network can reach it, and every
// address of this machine the presenter may pick instead (the default
// first; none when the server listens on loopback only).
func (h *handler) watchURL(c echo.Context, id string) (string, bool, watchAddresses) {
	path := "/s/" + url.PathEscape(id)
	host, port, err := net.SplitHostPort(h.s.Config().Listener.Addr().String())
	if err != nil {
		return h.s.URL() + path, false, nil
	}
	link := func(ip netip.Addr) string { return "http://" + net.JoinHostPort(ip.String(), port) + path }
	ip, err := netip.ParseAddr(host)
	switch {
	case err == nil && ip.IsLoopback():
		return h.s.URL() + path, false, nil
	case err != nil || ip.IsUnspecified():
		var addrs watchAddresses
		def := ""
		for _, a := range chooseAddrs(h.network()) {
			addrs = append(addrs, watchAddress{Name: a.Name, IP: a.IP.String(), URL: link(a.IP), Default: a.Default})
			if a.Default {
				def = link(a.IP)
			}
		}
		if def != "" {
			return def, true, addrs
		}
		// No local network address: the address the browser used is the
		// best there is.
		rh := c.Request().Host
		return "http://" + rh + path, !strings.HasPrefix(rh, "127.") && !strings.HasPrefix(rh, "localhost"), addrs
	}
	// It listens on one address: that one, whatever interface holds it.
	ip = ip.Unmap()
	name := ""
	for _, n := range h.network().Interfaces {
		for _, a := range n.Addrs {
			if a.Unmap() == ip {
				name = n.Name
			}
		}
	}
	return link(ip), true, watchAddresses{{Name: name, IP: ip.String(), URL: link(ip), Default: true}}
}

// pickAddress returns the address of addrs that a QR request's ?addr=
// names. Only this machine's own addresses, as the page lists them, may
// be asked for: a QR code of any other host would make this server a
// maker of QR codes for whatever link an attacker likes, on our domain —
// a phishing aid.
func pickAddress(values []string, addrs []watchAddress) (watchAddress, error) {
	if len(values) != 1 {
		return watchAddress{}, fault.Errorf(fault.Invalid, "give addr once: one of this machine's addresses that the page lists")
	}
	v := values[0]
	// The longest IP address written out (IPv6 with an IPv4 tail) has 45
	// characters; anything longer, or not an address, is not echoed back.
	if ip, err := netip.ParseAddr(v); len(v) > 45 || err != nil || ip.Zone() != "" {
		return watchAddress{}, fault.Errorf(fault.Invalid, "addr must be an IP address, one of this machine's that the page lists (such as 192.168.1.20)")
	}
	for _, a := range addrs {
		if a.IP == v {
			return a, nil
		}
	}
	// The machine's addresses are not named here: anyone may ask for a QR
	// code, and only the page that made the session is given the list.
	if len(addrs) == 0 {
		return watchAddress{}, fault.Errorf(fault.Invalid, "addr %s is not one of this machine's addresses: this server has none to offer phones (it listens on this machine only, or the machine has no network)", v)
	}
	return watchAddress{}, fault.Errorf(fault.Invalid, "addr %s is not one of this machine's addresses that the page lists: the QR code only ever points at this server", v)
}

// qr serves the watch link of a session as an SVG QR code: GET
// /s/:id/qr.svg, at the default address, or ?addr=IP for another of the
// machine's addresses that the page lists (anything else is a 400).
func (h *handler) qr(c echo.Context) error {
	sess, err := h.s.Sessions.Get(c.Param("id"))
	if err != nil {
		return err
	}
	link, _, addrs := h.watchURL(c, sess.ID)
	if q, ok := c.QueryParams()["addr"]; ok {
		a, err := pickAddress(q, addrs)
		if err != nil {
			return err
		}
		link = a.URL
	}
	return serveQR(c, link)
}

// serveQR answers with link as an SVG QR code, never cached.
func serveQR(c echo.Context, link string) error {
	svg, err := qrSVG(link)
	if err != nil {
		return err
	}
	hd := c.Response().Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	return c.Blob(http.StatusOK, "image/svg+xml", svg)
}

// qrSVG draws link as an SVG QR code, a square of unit modules with its
// quiet zone, labelled with the link for a screen reader.
func qrSVG(link string) ([]byte, error) {
	code, err := qrcode.New(link, qrcode.Medium)
	if err != nil {
		return nil, fault.Errorf(fault.Internal, "the QR code of %s: %v", link, err)
	}
	code.DisableBorder = false
	bits := code.Bitmap()
	n := len(bits)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" shape-rendering="crispEdges" role="img" aria-label="QR code of %s">`, n, n, html.EscapeString(link))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/><path fill="#000" d="`, n, n)
	for y, row := range bits {
		for x, on := range row {
			if on {
				fmt.Fprintf(&b, "M%d %dh1v1h-1z", x, y)
			}
		}
	}
	b.WriteString(`"/></svg>`)
	return []byte(b.String()), nil
}
