package web

import (
	"net/netip"
	"strings"
	"testing"
)

func ips(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, v := range s {
		out = append(out, netip.MustParseAddr(v))
	}
	return out
}

// A laptop as a teacher brings it: loopback, Docker's bridge and one of
// its networks, a libvirt bridge, a container's veth, a VPN, and the Wi-Fi
// — with the bridges listed first, as Linux often lists them.
var laptop = []nic{
	{Name: "lo", Up: true, Loopback: true, Addrs: ips("127.0.0.1", "::1")},
	{Name: "docker0", Up: true, Addrs: ips("172.17.0.1")},
	{Name: "br-3f2a9c1d7e01", Up: true, Addrs: ips("172.18.0.1")},
	{Name: "virbr0", Up: true, Addrs: ips("192.168.122.1")},
	{Name: "veth1a2b3c", Up: true, Addrs: ips("169.254.10.1", "fe80::1")},
	{Name: "wg0", Up: true, Addrs: ips("10.64.0.2")},
	{Name: "eth0", Up: false, Addrs: ips("192.168.0.40")},
	{Name: "wlan0", Up: true, Addrs: ips("192.168.1.23", "fe80::abcd", "2001:db8::23")},
}

func TestChooseAddrs_TheRoomsNetworkIsTheDefault(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    netView
		want string // the default, as name=ip; "" for none
	}{
		{"the default route's interface wins over the bridges listed before it",
			netView{Interfaces: laptop, RouteIface: "wlan0"}, "wlan0=192.168.1.23"},
		{"the default route decides between two ordinary interfaces, and over a bridge of a name we do not know (LXC's)",
			netView{Interfaces: []nic{{Name: "lxcbr0", Up: true, Addrs: ips("10.0.3.1")}, {Name: "enp0s31f6", Up: true, Addrs: ips("10.0.5.2")}, laptop[7]}, RouteIface: "wlan0"}, "wlan0=192.168.1.23"},
		{"no routing table (macOS): the route out's source address",
			netView{Interfaces: []nic{{Name: "utun3", Up: true, Addrs: ips("10.8.0.2")}, {Name: "bridge100", Up: true, Addrs: ips("192.168.64.1")}, {Name: "en0", Up: true, Addrs: ips("10.0.0.12")}},
				DialAddr: netip.MustParseAddr("10.0.0.12")}, "en0=10.0.0.12"},
		{"the route's interface has two addresses: the one the route out uses",
			netView{Interfaces: []nic{{Name: "eth0", Up: true, Addrs: ips("192.168.1.5", "192.168.1.99")}}, RouteIface: "eth0", DialAddr: netip.MustParseAddr("192.168.1.99")}, "eth0=192.168.1.99"},
		{"a VPN that holds the default route and the route out is passed over for the LAN",
			netView{Interfaces: laptop, RouteIface: "wg0", DialAddr: netip.MustParseAddr("10.64.0.2")}, "wlan0=192.168.1.23"},
		{"a tunnel (utun) holding the route out on macOS is passed over too",
			netView{Interfaces: []nic{{Name: "utun4", Up: true, Addrs: ips("100.101.1.7")}, {Name: "en0", Up: true, Addrs: ips("192.168.4.30")}}, DialAddr: netip.MustParseAddr("100.101.1.7")}, "en0=192.168.4.30"},
		{"no default route at all: the first LAN interface that is up, not the bridges before it nor the one that is down",
			netView{Interfaces: laptop}, "wlan0=192.168.1.23"},
		{"a default route on an interface that is down counts for nothing",
			netView{Interfaces: laptop, RouteIface: "eth0"}, "wlan0=192.168.1.23"},
		{"with no route, a private address before a public one",
			netView{Interfaces: []nic{{Name: "eth1", Up: true, Addrs: ips("203.0.113.9")}, {Name: "eth0", Up: true, Addrs: ips("192.168.1.5")}}}, "eth0=192.168.1.5"},
		{"a public address is fine when the route says so (a university's network)",
			netView{Interfaces: []nic{{Name: "eth0", Up: true, Addrs: ips("192.168.1.5")}, {Name: "eth1", Up: true, Addrs: ips("203.0.113.9")}}, RouteIface: "eth1"}, "eth1=203.0.113.9"},
		{"only bridges, tunnels and loopback: no default",
			netView{Interfaces: []nic{laptop[0], laptop[1], laptop[5]}, RouteIface: "docker0", DialAddr: netip.MustParseAddr("172.17.0.1")}, ""},
		{"nothing but loopback: nothing at all",
			netView{Interfaces: laptop[:1]}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := chooseAddrs(tc.v)
			def := ""
			for i, a := range got {
				if a.Default {
					if i != 0 || def != "" {
						t.Errorf("default %s=%s at %d; want one default, first", a.Name, a.IP, i)
					}
					def = a.Name + "=" + a.IP.String()
				}
			}
			if def != tc.want {
				t.Errorf("default %q, want %q (all: %v)", def, tc.want, got)
			}
		})
	}
}

// TestChooseAddrs_ListsEveryIPv4AddressTheLANFirst: the presenter may
// pick any address of an interface that is up, LAN ones before tunnels
// before bridges; loopback, link-local and IPv6 addresses are not listed.
func TestChooseAddrs_ListsEveryIPv4AddressTheLANFirst(t *testing.T) {
	var got []string
	for _, a := range chooseAddrs(netView{Interfaces: laptop, RouteIface: "wlan0"}) {
		got = append(got, a.Name+"="+a.IP.String())
	}
	want := "wlan0=192.168.1.23 wg0=10.64.0.2 docker0=172.17.0.1 br-3f2a9c1d7e01=172.18.0.1 virbr0=192.168.122.1"
	if strings.Join(got, " ") != want {
		t.Errorf("listed %v\nwant     %s", got, want)
	}
}

func TestDefaultRouteIface(t *testing.T) {
	const header = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
	for _, tc := range []struct{ table, want string }{
		// docker0's route is to its own subnet; the default goes by wlan0.
		{header +
			"docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n" +
			"wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n" +
			"wlan0\t0001A8C0\t00000000\t0001\t0\t0\t600\t00FFFFFF\t0\t0\t0\n", "wlan0"},
		// Two defaults: the lower metric (Ethernet, over Wi-Fi) is the one used.
		{header +
			"wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n" +
			"eth0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n", "eth0"},
		// A VPN's two half-routes (0.0.0.0/1, 128.0.0.0/1) are not the default.
		{header +
			"tun0\t00000000\t0100080A\t0003\t0\t0\t0\t00000080\t0\t0\t0\n" +
			"tun0\t00000080\t0100080A\t0003\t0\t0\t0\t00000080\t0\t0\t0\n" +
			"wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n", "wlan0"},
		// A default route that is not up, and none at all.
		{header + "eth0\t00000000\t0100000A\t0002\t0\t0\t0\t00000000\t0\t0\t0\n", ""},
		{header + "eth0\t0000000A\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0\n", ""},
		{"", ""},
		{"garbage\nmore garbage with fields 1 2 3 4 5 6 7 8\n", ""},
	} {
		if got := defaultRouteIface(strings.NewReader(tc.table)); got != tc.want {
			t.Errorf("defaultRouteIface(%q) = %q, want %q", tc.table, got, tc.want)
		}
	}
}
