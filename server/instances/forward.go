package instances

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/tick"
	"github.com/fencelab/fencelab/server/wire"
	"github.com/labstack/echo/v4"
)

// Several instances behind one reverse proxy: a request for a session that
// lives on another instance (the peers' table says which) is passed on to
// it, WebSocket and all, so a watch or drive link works whichever
// instance it reaches.

// Host is what a Forwarder needs of the server it stands in front of.
type Host interface {
	// SessionInPath is the session a request names, "" for a request that
	// names none (or nothing of a session id's form).
	SessionInPath(r *http.Request) string
	// Has reports whether a session lives on this instance.
	Has(session string) bool
	// HoldSocket counts one more socket for a client, or refuses it.
	HoldSocket(client string) (release func(), err error)
	// Track and Untrack keep a socket among those the server closes when
	// it shuts down; Track is false when it is shutting down already.
	Track(c *websocket.Conn) bool
	Untrack(c *websocket.Conn)
	// MaxMessage bounds a reader's frames.
	MaxMessage() int64
}

// A Forwarder passes requests for other instances' sessions on to them.
type Forwarder struct {
	in        *Instance
	host      Host
	transport *http.Transport

	mu    sync.Mutex
	quiet map[string]time.Time // owners that did not answer, until when they are not asked
}

// NewForwarder is the Forwarder of instance in, in front of host.
func NewForwarder(in *Instance, host Host) *Forwarder {
	return &Forwarder{in: in, host: host, transport: newForwardTransport(), quiet: map[string]time.Time{}}
}

// Close closes the idle connections to other instances.
func (f *Forwarder) Close() { f.transport.CloseIdleConnections() }

// forwardedBy marks a request one instance passed on to another: it is
// never passed on again.
const forwardedBy = "X-Fencelab-Forwarded-By"

// Bounds of a request passed on. An owner that is frozen (SIGSTOP, a
// stuck machine) accepts connections and never answers: without them each
// request for its sessions would wait for ever, a goroutine and a socket
// apiece.
const (
	forwardDialTimeout   = 3 * time.Second // to connect to the owner
	forwardHeaderTimeout = 5 * time.Second // for its answer's header (or its socket's upgrade)
	// forwardQuiet is how long an owner that did not answer is not asked
	// again: requests for its sessions are answered 503 at once meanwhile,
	// instead of each waiting out the timeouts above.
	forwardQuiet = 5 * time.Second
	// forwardPing is how often a socket passed on checks that the owner
	// still answers, and forwardPingWait how long it waits for it.
	forwardPing     = 10 * time.Second
	forwardPingWait = 5 * time.Second
	// forwardWriteWait bounds each message written on a socket passed on.
	forwardWriteWait = 5 * time.Second
)

// newForwardTransport is the transport of every request passed on to
// another instance: bounded dial and header waits, a few idle
// connections kept per owner.
func newForwardTransport() *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: forwardDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   forwardDialTimeout,
		ResponseHeaderTimeout: forwardHeaderTimeout,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   16,
	}
}

// errNoAnswer: the owner did not answer (refused, timed out, broke off).
var errNoAnswer = errors.New("the owner did not answer")

// quietOwner reports whether owner failed to answer a moment ago.
func (f *Forwarder) quietOwner(owner string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	until, ok := f.quiet[owner]
	if ok && time.Now().After(until) {
		delete(f.quiet, owner)
		return false
	}
	return ok
}

func (f *Forwarder) markQuiet(owner string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.quiet[owner] = time.Now().Add(forwardQuiet)
}

// Middleware passes a request for another instance's session on to it.
// An owner that does not answer within the bounds above gets its request
// a 503 (or, when it is gone and so its sessions too, a 404 from here).
func (f *Forwarder) Middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		id := f.host.SessionInPath(req)
		if id == "" || req.Header.Get(forwardedBy) != "" || f.host.Has(id) {
			return next(c) // what cannot be a session id is never looked up: this instance answers 404
		}
		owner, ok := f.in.Owner(req.Context(), id)
		if !ok {
			return next(c) // nobody else has it: this instance answers, with a 404
		}
		target, err := url.Parse(owner)
		if err != nil || (target.Scheme != "http" && target.Scheme != "https") {
			return next(c)
		}
		unavailable := fault.Errorf(fault.Unavailable, "the instance that holds this session does not answer; try again in a moment")
		if f.quietOwner(owner) {
			return unavailable
		}
		if wire.IsUpgrade(req) {
			err = f.forwardSocket(c, target)
		} else {
			err = f.forwardHTTP(c, target)
		}
		if !errors.Is(err, errNoAnswer) {
			return err
		}
		// The owner did not answer: if it is gone its sessions are too.
		f.markQuiet(owner)
		f.in.AskSweep()
		if _, still := f.in.Owner(req.Context(), id); still {
			return unavailable
		}
		return next(c)
	}
}

// forwardHTTP passes a plain request on to target; errNoAnswer when the
// owner did not answer before anything was sent to the client.
func (f *Forwarder) forwardHTTP(c echo.Context, target *url.URL) error {
	failed := false
	proxy := &httputil.ReverseProxy{
		Transport: f.transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host // the Origin check compares with the address the reader used
			pr.Out.Header.Set(forwardedBy, f.in.ID())
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			failed = true
		},
	}
	proxy.ServeHTTP(c.Response(), c.Request())
	if !failed || c.Response().Committed {
		return nil // answered by the owner (or cut off while it answered)
	}
	return errNoAnswer
}

// forwardSocket passes a WebSocket on to target, message by message, so
// that however it ends the reader is told with a close code: the owner's
// own, or 1011 with a reason when the owner broke off or stopped
// answering. An owner that refuses the upgrade has its answer passed on.
func (f *Forwarder) forwardSocket(c echo.Context, target *url.URL) error {
	req := c.Request()
	release, err := f.host.HoldSocket(c.RealIP())
	if err != nil {
		return err
	}
	defer release()
	u := *target
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[target.Scheme]
	u.Path, u.RawPath, u.RawQuery = req.URL.Path, req.URL.RawPath, req.URL.RawQuery
	h := http.Header{}
	for _, k := range []string{"Origin", "User-Agent", "Authorization", "X-Fencelab-Token"} {
		if v := req.Header.Values(k); len(v) > 0 {
			h[k] = v
		}
	}
	h.Set(forwardedBy, f.in.ID())
	if host, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
		if prior := req.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			host = strings.Join(prior, ", ") + ", " + host
		}
		h.Set("X-Forwarded-For", host)
	}
	h.Set("X-Forwarded-Host", req.Host)
	proto := "http"
	if req.TLS != nil {
		proto = "https"
	}
	h.Set("X-Forwarded-Proto", proto)
	dctx, dcancel := context.WithTimeout(req.Context(), forwardDialTimeout+forwardHeaderTimeout)
	up, resp, err := websocket.Dial(dctx, u.String(), &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: f.transport}, HTTPHeader: h,
		Host: req.Host, // the Origin check compares with the address the reader used
	})
	dcancel()
	if err != nil {
		if resp == nil || resp.StatusCode == http.StatusSwitchingProtocols {
			return errNoAnswer
		}
		// The owner refused the socket (a bad since, a wrong token, an
		// origin it does not allow): its answer is the reader's.
		for _, k := range []string{echo.HeaderContentType, "Retry-After"} {
			if v := resp.Header.Get(k); v != "" {
				c.Response().Header().Set(k, v)
			}
		}
		c.Response().WriteHeader(resp.StatusCode)
		if resp.Body != nil {
			_, _ = io.Copy(c.Response(), resp.Body)
		}
		return nil
	}
	defer up.CloseNow()
	up.SetReadLimit(64 << 20) // the owner's frames: it bounds them itself
	// The owner has checked the origin, scheme and all.
	conn, err := websocket.Accept(c.Response(), req, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		up.Close(websocket.StatusGoingAway, "the reader went away")
		return nil // Accept has answered the client already
	}
	if !f.host.Track(conn) {
		conn.Close(websocket.StatusGoingAway, "the server is shutting down")
		up.Close(websocket.StatusGoingAway, "the server is shutting down")
		return nil
	}
	defer f.host.Untrack(conn)
	conn.SetReadLimit(f.host.MaxMessage())
	relaySocket(conn, up)
	return nil
}

// relaySocket copies messages between a reader's socket and the owner's
// until either ends, then ends the other with a close code: the one its
// peer sent, or, when the owner broke off without one or stopped
// answering its pings, 1011 and a reason.
func relaySocket(reader, owner *websocket.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type end struct {
		byOwner bool
		err     error
	}
	ends := make(chan end, 3)
	pipe := func(from, to *websocket.Conn, byOwner bool) {
		for {
			typ, b, err := from.Read(ctx)
			if err != nil {
				ends <- end{byOwner, err}
				return
			}
			wctx, wcancel := context.WithTimeout(ctx, forwardWriteWait)
			err = to.Write(wctx, typ, b)
			wcancel()
			if err != nil {
				ends <- end{!byOwner, err}
				return
			}
		}
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); pipe(reader, owner, false) }()
	go func() { defer wg.Done(); pipe(owner, reader, true) }()
	go func() {
		defer wg.Done()
		tick.Every(ctx, forwardPing, func() bool {
			pctx, pcancel := context.WithTimeout(ctx, forwardPingWait)
			err := owner.Ping(pctx)
			pcancel()
			if err != nil && ctx.Err() == nil {
				ends <- end{true, errNoAnswer}
				return false
			}
			return true
		})
	}()
	e := <-ends
	var ce websocket.CloseError
	closed := errors.As(e.err, &ce)
	if closed && (ce.Code == websocket.StatusNoStatusRcvd || ce.Code == websocket.StatusAbnormalClosure || ce.Code == websocket.StatusTLSHandshake) {
		ce = websocket.CloseError{Code: websocket.StatusNormalClosure} // codes a close frame may not carry
	}
	if e.byOwner {
		if closed {
			_ = reader.Close(ce.Code, ce.Reason)
		} else {
			_ = reader.Close(websocket.StatusInternalError, "the instance that holds this session stopped answering; reconnect to carry on")
		}
		owner.CloseNow()
	} else {
		if closed {
			_ = owner.Close(ce.Code, ce.Reason)
		}
		owner.CloseNow()
		reader.CloseNow()
	}
	cancel()
	wg.Wait()
}
