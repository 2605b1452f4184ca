package web

// What the external tests (package web_test) may reach inside.

// NIC and NetView are a machine's network as the watch link's address is
// chosen from.
type (
	NIC     = nic
	NetView = netView
)

// WithNetwork returns opts with the machine's network replaced by v.
func WithNetwork(opts Options, v NetView) Options {
	opts.netFunc = func() netView { return v }
	return opts
}
