package web

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Which of this machine's addresses the watch link's QR code shows. A
// teacher's laptop has several: the Wi-Fi the class shares, and often a
// container bridge (docker0, 172.17.0.1), a VM network or a VPN, none of
// which a student's phone can reach. The link uses the address of the
// interface that carries the default route, the way to everything outside
// this machine, which on a laptop in a classroom is the room's network;
// the page lists the others so that the presenter can pick one when that
// guess is wrong. Choosing is a pure function over what the machine
// reported (netView), so a test can hand it any machine.

// nic is what the choice reads of one network interface.
type nic struct {
	Name     string
	Up       bool
	Loopback bool
	Addrs    []netip.Addr
}

// netView is a machine's network as the choice sees it.
type netView struct {
	// Interfaces in the order the system lists them.
	Interfaces []nic
	// RouteIface is the interface of the default route in the kernel's
	// main routing table (Linux's /proc/net/route), or "" where there is
	// none or no such table (macOS).
	RouteIface string
	// DialAddr is the local address of a UDP "connect" to a public
	// address: the source address of the route the kernel would use to
	// leave the machine. It sends no packet. Invalid where there is no
	// route out.
	DialAddr netip.Addr
}

// hostAddr is one address a phone might open the watch link at.
type hostAddr struct {
	Name    string // its interface
	IP      netip.Addr
	Default bool
}

// nicKind ranks interfaces by how likely a phone in the room can reach them.
type nicKind int

const (
	// kindLAN is an ordinary interface: Ethernet, Wi-Fi.
	kindLAN nicKind = iota
	// kindVPN is a tunnel (tun*, utun*, wg*). Its peers can reach it, and
	// a class on one VPN could use it, so it is listed; but a phone on the
	// room's Wi-Fi cannot, so it is never the default. (A VPN that routes
	// everything often holds the default route, or the route to a public
	// address: it is passed over for the LAN then.)
	kindVPN
	// kindBridge is a bridge to containers or VMs on this machine
	// (docker*, br-* — Docker's networks —, veth*, virbr* — libvirt's):
	// by construction nothing outside the machine reaches it. It is listed
	// last, for the presenter who knows better, and never the default.
	kindBridge
)

func kindOf(name string) nicKind {
	for _, p := range []string{"docker", "br-", "veth", "virbr"} {
		if strings.HasPrefix(name, p) {
			return kindBridge
		}
	}
	for _, p := range []string{"tun", "utun", "wg"} {
		if strings.HasPrefix(name, p) {
			return kindVPN
		}
	}
	return kindLAN
}

// chooseAddrs lists the addresses of v that a phone might open the watch
// link at, the default first, then the other LAN addresses, the VPNs' and
// the bridges', each group in the system's order. Only the IPv4 unicast
// addresses of interfaces that are up count: a loopback address is this
// machine's alone, a link-local one (169.254.x.x, fe80::) is not routed,
// and a classroom's Wi-Fi hands out IPv4 (an IPv6 address is also too long
// to read off a projector).
//
// The default is, in order: the address of the default route's interface
// (RouteIface; DialAddr if that is one of its addresses, else its first);
// DialAddr, on whichever interface holds it; the first private address of
// a LAN interface, then its first address of any kind. A VPN's or a
// bridge's address is never the default: a tunnel that carries the
// default route still cannot be reached from the room. With none of
// these, no address is the default.
func chooseAddrs(v netView) []hostAddr {
	type cand struct {
		hostAddr
		kind nicKind
	}
	var cands []cand
	for _, n := range v.Interfaces {
		if !n.Up || n.Loopback {
			continue
		}
		for _, ip := range n.Addrs {
			ip = ip.Unmap()
			if ip.Is4() && ip.IsGlobalUnicast() {
				cands = append(cands, cand{hostAddr{Name: n.Name, IP: ip}, kindOf(n.Name)})
			}
		}
	}
	def := -1
	pick := func(ok func(cand) bool) {
		for i, c := range cands {
			if def < 0 && c.kind == kindLAN && ok(c) {
				def = i
			}
		}
	}
	dial := v.DialAddr.Unmap()
	if v.RouteIface != "" {
		pick(func(c cand) bool { return c.Name == v.RouteIface && c.IP == dial })
		pick(func(c cand) bool { return c.Name == v.RouteIface })
	}
	if dial.IsValid() {
		pick(func(c cand) bool { return c.IP == dial })
	}
	pick(func(c cand) bool { return c.IP.IsPrivate() })
	pick(func(cand) bool { return true })

	out := make([]hostAddr, 0, len(cands))
	if def >= 0 {
		cands[def].Default = true
		out = append(out, cands[def].hostAddr)
	}
	for k := kindLAN; k <= kindBridge; k++ {
		for i, c := range cands {
			if i != def && c.kind == k {
				out = append(out, c.hostAddr)
			}
		}
	}
	return out
}

// defaultRouteIface reads a routing table in the format of Linux's
// /proc/net/route and returns the interface of its default route (the one
// of lowest metric, if there are several), or "".
func defaultRouteIface(r io.Reader) string {
	sc := bufio.NewScanner(r)
	best, bestMetric := "", uint64(0)
	for first := true; sc.Scan(); first = false {
		f := strings.Fields(sc.Text())
		// Iface Destination Gateway Flags RefCnt Use Metric Mask ...
		if first || len(f) < 8 || f[1] != "00000000" || f[7] != "00000000" {
			continue
		}
		flags, err1 := strconv.ParseUint(f[3], 16, 32)
		metric, err2 := strconv.ParseUint(f[6], 10, 32)
		const rtfUp = 0x1
		if err1 != nil || err2 != nil || flags&rtfUp == 0 {
			continue
		}
		if best == "" || metric < bestMetric {
			best, bestMetric = f[0], metric
		}
	}
	return best
}

// probeNet reads this machine's network: its interfaces, the default
// route's interface where the system has a routing table to read
// (Linux), and the source address of the route out (every system).
func probeNet() netView {
	var v netView
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		n := nic{Name: i.Name, Up: i.Flags&net.FlagUp != 0, Loopback: i.Flags&net.FlagLoopback != 0}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
					n.Addrs = append(n.Addrs, ip.Unmap())
				}
			}
		}
		v.Interfaces = append(v.Interfaces, n)
	}
	if f, err := os.Open("/proc/net/route"); err == nil {
		v.RouteIface = defaultRouteIface(f)
		_ = f.Close()
	}
	// A UDP socket's connect only picks a route and a source address: no
	// packet leaves. Where there is no route out it fails, and the choice
	// falls back on the interfaces alone.
	if c, err := net.Dial("udp4", "1.1.1.1:53"); err == nil {
		if a, ok := c.LocalAddr().(*net.UDPAddr); ok {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				v.DialAddr = ip.Unmap()
			}
		}
		_ = c.Close()
	}
	return v
}

// machineNet is this machine's network, read again at most every two
// seconds: pages come in bursts, and a laptop that changes networks is
// seen at its next page. Safe for concurrent use.
var machineNet = struct {
	mu sync.Mutex
	at time.Time
	v  netView
}{}

func currentNet() netView {
	machineNet.mu.Lock()
	defer machineNet.mu.Unlock()
	if time.Since(machineNet.at) > 2*time.Second {
		machineNet.v, machineNet.at = probeNet(), time.Now()
	}
	return machineNet.v
}
