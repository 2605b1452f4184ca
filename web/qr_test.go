package web_test

import (
	"encoding/json"
	"html"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/web"
)

// everywhere is a listener bound to loopback that says it listens on
// every interface, as `--addr :8080` does: the test reaches it, and no
// other machine can.
type everywhere struct{ net.Listener }

func (l everywhere) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv6unspecified, Port: l.Listener.Addr().(*net.TCPAddr).Port}
}

// classroom is a teacher's laptop: Docker's bridge listed first, the
// default route on the Wi-Fi.
var classroom = web.NetView{Interfaces: []web.NIC{
	{Name: "lo", Up: true, Loopback: true, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
	{Name: "docker0", Up: true, Addrs: []netip.Addr{netip.MustParseAddr("172.17.0.1")}},
	{Name: "wlan0", Up: true, Addrs: []netip.Addr{netip.MustParseAddr("192.168.1.23")}},
}, RouteIface: "wlan0", DialAddr: netip.MustParseAddr("192.168.1.23")}

// bootState is the part of the page's boot state the watch link is in.
type bootState struct {
	Session   struct{ ID string }
	WatchURL  string `json:"watch_url"`
	Reachable bool   `json:"reachable"`
	Addresses []struct {
		Name    string `json:"name"`
		IP      string `json:"ip"`
		URL     string `json:"url"`
		Default bool   `json:"default"`
	} `json:"addresses"`
	raw map[string]json.RawMessage
}

func boot(t *testing.T, base string) bootState { return bootAt(t, base+"/") }

// bootAt is the boot state of the page at url.
func bootAt(t *testing.T, url string) bootState {
	t.Helper()
	resp, page := get(t, url)
	m := regexp.MustCompile(`(?s)<script[^>]*id="fencelab-state"[^>]*>(.*?)</script>`).FindStringSubmatch(page)
	if resp.StatusCode != 200 || m == nil {
		t.Fatalf("GET /: %d, boot state found: %v", resp.StatusCode, m != nil)
	}
	var st bootState
	if err := json.Unmarshal([]byte(m[1]), &st); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(m[1]), &st.raw)
	return st
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestWatchLink_TheDefaultRoutesAddressAndThePresentersChoice: listening
// on every interface, the watch link and its QR code use the Wi-Fi, which
// carries the default route, not Docker's bridge listed before it; the
// boot state lists both for the presenter to pick from, and qr.svg?addr=
// draws either — and nothing else: not a foreign address, not a host
// name, not junk.
func TestWatchLink_TheDefaultRoutesAddressAndThePresentersChoice(t *testing.T) {
	ln := listen(t)
	port := ln.Addr().(*net.TCPAddr).Port
	base := startWith(t, everywhere{ln}, nil, web.WithNetwork(web.Options{}, classroom))
	st := boot(t, base)
	watch := func(ip string) string {
		return "http://" + net.JoinHostPort(ip, strconv.Itoa(port)) + "/s/" + st.Session.ID
	}
	if st.WatchURL != watch("192.168.1.23") || !st.Reachable {
		t.Errorf("watch_url %q reachable %v; want %q, reachable", st.WatchURL, st.Reachable, watch("192.168.1.23"))
	}
	got, _ := json.Marshal(st.Addresses)
	want := `[{"name":"wlan0","ip":"192.168.1.23","url":"` + watch("192.168.1.23") + `","default":true},` +
		`{"name":"docker0","ip":"172.17.0.1","url":"` + watch("172.17.0.1") + `","default":false}]`
	if string(got) != want || string(st.raw["addresses"]) != want {
		t.Errorf("addresses %s (as sent: %s)\nwant      %s", got, st.raw["addresses"], want)
	}

	// A watcher's page — anyone with the link, on a public server — is
	// not given the machine's addresses.
	if w := bootAt(t, base+"/s/"+st.Session.ID); string(w.raw["addresses"]) != "[]" {
		t.Errorf("a watcher's page lists the machine's addresses: %s", w.raw["addresses"])
	}

	qr := base + "/s/" + st.Session.ID + "/qr.svg"
	for query, ip := range map[string]string{"": "192.168.1.23", "?addr=192.168.1.23": "192.168.1.23", "?addr=172.17.0.1": "172.17.0.1"} {
		resp, body := get(t, qr+query)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/svg+xml" || !strings.HasPrefix(body, "<svg") ||
			!strings.Contains(body, `aria-label="QR code of `+html.EscapeString(watch(ip))+`"`) {
			t.Errorf("qr.svg%s: %d %q, want an SVG of %s: %.200s", query, resp.StatusCode, resp.Header.Get("Content-Type"), watch(ip), body)
		}
	}
	for _, addr := range []string{
		"8.8.8.8", "192.168.1.24", "127.0.0.1", "::1", "::ffff:192.168.1.23", "fe80::1%25wlan0", "192.168.1.23%00", "%00",
		"evil.example.com", "192.168.1.23:8080", "http://192.168.1.23/", "", strings.Repeat("1", 100<<10), "fe80::1%25" + strings.Repeat("x", 1000),
	} {
		resp, body := get(t, qr+"?addr="+addr)
		var e struct{ Error, Code string }
		_ = json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != 400 || e.Code != "invalid" || !strings.Contains(e.Error, "addr") || strings.Contains(body, "<svg") {
			t.Errorf("qr.svg?addr=%.40s: %d %.200s; want a 400 that says why", addr, resp.StatusCode, body)
		}
		if len(addr) > 100 && strings.Contains(body, strings.Repeat(addr[len(addr)-1:], 100)) {
			t.Errorf("qr.svg?addr=%.40s…: the answer echoes the junk back", addr)
		}
		if strings.Contains(body, "172.17.0.1") {
			t.Errorf("qr.svg?addr=%.40s: the refusal names the machine's addresses: %.200s", addr, body)
		}
	}
	for _, q := range []string{"?addr=192.168.1.23&addr=8.8.8.8", "?addr=" + url.QueryEscape("192.168.1.23\x00")} {
		if resp, body := get(t, qr+q); resp.StatusCode != 400 {
			t.Errorf("qr.svg%s: %d %.200s, want 400", q, resp.StatusCode, body)
		}
	}
}

// TestWatchLink_LoopbackOnlyIsNotReachable: a server that listens on
// 127.0.0.1 only cannot be reached by any phone, whatever the machine's
// network: the page says so, offers no address, and qr.svg draws no other.
func TestWatchLink_LoopbackOnlyIsNotReachable(t *testing.T) {
	base := startWith(t, listen(t), nil, web.WithNetwork(web.Options{}, classroom))
	st := boot(t, base)
	if st.Reachable || !strings.HasPrefix(st.WatchURL, "http://127.0.0.1:") || string(st.raw["addresses"]) != "[]" {
		t.Errorf("reachable %v, watch_url %q, addresses %s; want unreachable, the loopback link, []", st.Reachable, st.WatchURL, st.raw["addresses"])
	}
	qr := base + "/s/" + st.Session.ID + "/qr.svg"
	if resp, _ := get(t, qr); resp.StatusCode != 200 {
		t.Errorf("qr.svg: %d", resp.StatusCode)
	}
	if resp, body := get(t, qr+"?addr=192.168.1.23"); resp.StatusCode != 400 {
		t.Errorf("qr.svg?addr=192.168.1.23 on a loopback server: %d %.200s, want 400", resp.StatusCode, body)
	}
}

// TestWatchLink_ThisMachinesOwnAddresses: with the machine's real network,
// listening on every interface, every address the page offers draws a QR
// code, and at most one is the default, first.
func TestWatchLink_ThisMachinesOwnAddresses(t *testing.T) {
	base := startWith(t, everywhere{listen(t)}, nil, web.Options{})
	st := boot(t, base)
	t.Logf("this machine: watch_url %s, reachable %v, addresses %s", st.WatchURL, st.Reachable, st.raw["addresses"])
	for i, a := range st.Addresses {
		if a.Default && (i != 0 || a.URL != st.WatchURL) {
			t.Errorf("address %d (%s) is the default, but not first or not the watch link %s", i, a.IP, st.WatchURL)
		}
		if resp, _ := get(t, base+"/s/"+st.Session.ID+"/qr.svg?addr="+a.IP); resp.StatusCode != 200 {
			t.Errorf("qr.svg?addr=%s, an address the page offers: %d", a.IP, resp.StatusCode)
		}
	}
}
