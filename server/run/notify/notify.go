// Package notify listens to Postgres's NOTIFY channels for many
// subscribers on one connection: a server's every run LISTENs through it,
// instead of holding a connection of its own each.
//
// The connection is the Notifier's alone. When it breaks — Postgres
// restarted, the network dropped — the Notifier connects again with a
// backoff, LISTENs to every channel it had, and tells each subscriber it
// resumed, so that the subscriber can read what it missed from where the
// changes are kept (for a run: its jobs' history). A subscriber that falls
// behind is told the same way rather than making the others wait.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/jackc/pgx/v5"
)

// Notifier keeps one listening connection for many subscribers. It is
// safe for concurrent use.
type Notifier struct {
	connect func(context.Context) (*pgx.Conn, error)
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	reqs    chan request

	mu        sync.Mutex
	subs      map[string]map[*Sub]struct{}
	wake      context.CancelFunc // interrupts the current wait for a notification
	connected bool
	closed    bool
}

type request struct {
	channel string
	listen  bool       // LISTEN, or UNLISTEN
	done    chan error // buffered; nil for an UNLISTEN nobody waits for
}

// queueLen is how many notifications a subscriber may be behind before
// the rest are dropped and it is told to catch up instead.
const queueLen = 4096

// Sub is one subscription to a channel.
type Sub struct {
	n       *Notifier
	channel string
	fn      func(payload string)
	resumed func()

	q    chan string
	kick chan struct{} // a resume is due
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// Connector connects to dsn for a notifier, naming the connection for
// people (application_name) as name.
func Connector(dsn, name string) func(context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, fmt.Errorf("listen for row changes: the database URL does not parse: %w", engine.ErrUnavailable)
		}
		cfg.RuntimeParams["application_name"] = name
		return pgx.ConnectConfig(ctx, cfg)
	}
}

// New starts a Notifier whose connections come from connect (such as
// pgx.Connect with the server's DSN). It connects in the background; Close
// stops it.
func New(connect func(context.Context) (*pgx.Conn, error), log *slog.Logger) *Notifier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Notifier{connect: connect, log: log, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		reqs: make(chan request, 256), subs: map[string]map[*Sub]struct{}{}}
	go n.loop()
	return n
}

// Listen subscribes fn to a channel: every notification's payload, in
// order, on a goroutine of the subscription's own. resumed, if set, is
// called (on that goroutine) after notifications may have been missed:
// the connection broke and is back, or the subscriber fell behind. Listen
// returns once the channel is LISTENed to, so that nothing notified after
// it returns is missed; it gives up with ctx, and answers
// engine.ErrUnavailable while Postgres cannot be reached.
func (n *Notifier) Listen(ctx context.Context, channel string, fn func(payload string), resumed func()) (*Sub, error) {
	s := &Sub{n: n, channel: channel, fn: fn, resumed: resumed, q: make(chan string, queueLen),
		kick: make(chan struct{}, 1), stop: make(chan struct{})}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, fmt.Errorf("listen on %s: the notifier is closed: %w", channel, engine.ErrUnavailable)
	}
	first := len(n.subs[channel]) == 0
	if first {
		n.subs[channel] = map[*Sub]struct{}{}
	}
	n.subs[channel][s] = struct{}{}
	n.mu.Unlock()
	s.wg.Add(1)
	go s.run()
	if !first {
		return s, nil // the channel is LISTENed to already
	}
	req := request{channel: channel, listen: true, done: make(chan error, 1)}
	n.send(req)
	select {
	case err := <-req.done:
		if err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("listen on %s: %w", channel, engine.ErrUnavailable)
	}
}

// send queues a request and interrupts the loop's wait so it is applied.
func (n *Notifier) send(r request) {
	select {
	case n.reqs <- r:
	case <-n.ctx.Done():
		if r.done != nil {
			r.done <- fmt.Errorf("listen on %s: the notifier is closed: %w", r.channel, engine.ErrUnavailable)
		}
		return
	}
	n.mu.Lock()
	if n.wake != nil {
		n.wake()
	}
	n.mu.Unlock()
}

// Close ends the subscription; fn is not called after it returns. Safe to
// call more than once.
func (s *Sub) Close() {
	s.once.Do(func() {
		n := s.n
		n.mu.Lock()
		last := false
		if m := n.subs[s.channel]; m != nil {
			delete(m, s)
			if len(m) == 0 {
				delete(n.subs, s.channel)
				last = true
			}
		}
		closed := n.closed
		n.mu.Unlock()
		close(s.stop)
		s.wg.Wait()
		if last && !closed {
			n.send(request{channel: s.channel})
		}
	})
}

// run calls fn for each payload in order, and resumed when told.
func (s *Sub) run() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case p := <-s.q:
			s.fn(p)
		case <-s.kick:
			if s.resumed != nil {
				s.resumed()
			}
		}
	}
}

// deliver hands a payload to the subscriber, or, when it is too far
// behind, drops it and tells it to catch up.
func (s *Sub) deliver(payload string) {
	select {
	case s.q <- payload:
	default:
		s.resume()
	}
}

func (s *Sub) resume() {
	select {
	case s.kick <- struct{}{}:
	default: // one is due already
	}
}

// Connected reports whether the listening connection is up now.
func (n *Notifier) Connected() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.connected
}

// Close stops listening and closes the connection. Subscriptions already
// made get nothing more; Close them as well.
func (n *Notifier) Close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.cancel()
	<-n.done
}

// loop keeps a connection: connect, LISTEN to every channel, apply
// requests, wait for notifications and hand them out; on a broken
// connection, again, with a backoff.
func (n *Notifier) loop() {
	defer close(n.done)
	backoff := 100 * time.Millisecond
	first := true
	for n.ctx.Err() == nil {
		conn, err := n.connectAll()
		if err != nil {
			n.failPending(err)
			n.log.Warn("cannot listen for row changes; trying again", "in", backoff, "err", err)
			select {
			case <-time.After(backoff):
			case <-n.ctx.Done():
			}
			backoff = min(5*time.Second, backoff*2)
			continue
		}
		backoff = 100 * time.Millisecond
		if !first {
			n.log.Info("listening for row changes again")
			n.each(func(s *Sub) { s.resume() })
		}
		first = false
		err = n.serve(conn)
		n.mu.Lock()
		n.connected = false
		n.mu.Unlock()
		_ = conn.Close(context.Background())
		if n.ctx.Err() == nil {
			n.log.Warn("the connection that listens for row changes broke; connecting again", "err", err)
		}
	}
	n.failPending(fmt.Errorf("the notifier is closed: %w", engine.ErrUnavailable))
}

// connectAll connects and LISTENs to every channel with a subscriber.
func (n *Notifier) connectAll() (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	conn, err := n.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("listen for row changes: %w", engine.ErrUnavailable)
	}
	n.mu.Lock()
	chans := make([]string, 0, len(n.subs))
	for c := range n.subs {
		chans = append(chans, c)
	}
	n.mu.Unlock()
	for _, c := range chans {
		if _, err := conn.Exec(ctx, channelListen(c).SQL); err != nil {
			_ = conn.Close(context.Background())
			return nil, fmt.Errorf("listen for row changes: %w", engine.ErrUnavailable)
		}
	}
	n.mu.Lock()
	n.connected = true
	n.mu.Unlock()
	return conn, nil
}

// failPending answers every waiting request with err: there is no
// connection to apply it on now (a LISTEN is made again on connecting).
func (n *Notifier) failPending(err error) {
	for {
		select {
		case r := <-n.reqs:
			if r.done != nil {
				r.done <- err
			}
		default:
			return
		}
	}
}

// serve applies requests and hands out notifications until the
// connection breaks or the Notifier closes.
func (n *Notifier) serve(conn *pgx.Conn) error {
	for {
		if err := n.apply(conn); err != nil {
			return err
		}
		wctx, wake := context.WithCancel(n.ctx)
		n.mu.Lock()
		n.wake = wake
		n.mu.Unlock()
		if len(n.reqs) > 0 { // one came before wake was set
			wake()
		}
		note, err := conn.WaitForNotification(wctx)
		wake()
		n.mu.Lock()
		n.wake = nil
		n.mu.Unlock()
		switch {
		case n.ctx.Err() != nil:
			return n.ctx.Err()
		case err != nil && wctx.Err() != nil && !conn.IsClosed():
			continue // woken for a request
		case err != nil:
			return err
		}
		n.mu.Lock()
		subs := make([]*Sub, 0, len(n.subs[note.Channel]))
		for s := range n.subs[note.Channel] {
			subs = append(subs, s)
		}
		n.mu.Unlock()
		for _, s := range subs {
			s.deliver(note.Payload)
		}
	}
}

// apply carries out the waiting LISTEN and UNLISTEN requests.
func (n *Notifier) apply(conn *pgx.Conn) error {
	for {
		var r request
		select {
		case r = <-n.reqs:
		default:
			return nil
		}
		st := channelUnlisten(r.channel)
		if r.listen {
			st = channelListen(r.channel)
		} else {
			n.mu.Lock()
			again := len(n.subs[r.channel]) > 0 // subscribed again meanwhile
			n.mu.Unlock()
			if again {
				continue
			}
		}
		ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
		_, err := conn.Exec(ctx, st.SQL)
		cancel()
		if r.done != nil {
			if err != nil {
				r.done <- fmt.Errorf("listen on %s: %w", r.channel, engine.ErrUnavailable)
			} else {
				r.done <- nil
			}
		}
		if err != nil {
			return errors.Join(errors.New("LISTEN failed"), err)
		}
	}
}

// each calls fn for every subscriber.
func (n *Notifier) each(fn func(*Sub)) {
	n.mu.Lock()
	var all []*Sub
	for _, m := range n.subs {
		for s := range m {
			all = append(all, s)
		}
	}
	n.mu.Unlock()
	for _, s := range all {
		fn(s)
	}
}
