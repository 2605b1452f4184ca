package e2etest

// Pages of other origins, as a blog that embeds the playground serves them.

import (
	"fmt"
	"net"
	"net/http"
	"testing"
)

// HostServer serves one page on its own origin (another port of
// 127.0.0.1), as a blog that embeds the playground would.
func HostServer(t *testing.T, html string) string {
	t.Helper()
	ln := ListenLocal(t)
	ServeOn(t, ln, html)
	return "http://" + ln.Addr().String()
}

// ListenLocal listens on a free port of 127.0.0.1: a blog's origin, known
// before the server that must allow it starts.
func ListenLocal(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// ServeOn serves one HTML page on ln until the test ends (and an empty
// icon, so the browser logs no 404 for it).
func ServeOn(t *testing.T, ln net.Listener, html string) {
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/favicon.ico" {
			w.Header().Set("Content-Type", "image/svg+xml")
			fmt.Fprint(w, `<svg xmlns="http://www.w3.org/2000/svg"/>`)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, html)
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
}
