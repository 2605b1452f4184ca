package main

import (
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strconv"
	"time"
)

// profileListener listens on addr for `fencelab serve --pprof`: an
// address of this machine's loopback alone (127.0.0.1:6060, [::1]:6060,
// localhost:6060), since Go's profiles tell whoever reads them what the
// server holds. Anything else is refused as a usage error.
func profileListener(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, usagef("fencelab serve: --pprof %q must be a loopback address and port, e.g. 127.0.0.1:6060", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return nil, usagef("fencelab serve: --pprof %q: the port must be a number from 0 to 65535", addr)
	}
	if host != "localhost" {
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.IsLoopback() {
			return nil, usagef("fencelab serve: --pprof %q must listen on this machine's loopback alone (127.0.0.1, ::1 or localhost): Go's profiles show what the server holds", addr)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usagef("fencelab serve: --pprof %s: %v", addr, err)
	}
	return ln, nil
}

// profileServer serves Go's profiles (net/http/pprof) on their own mux,
// never on the API's; not the command line.
func profileServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
}
