package api_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/server/api"
)

// front stands in for an instance's machine in front of its listener: a
// TCP relay that can be frozen — it then accepts connections and never
// answers, as the listener of a process stopped by SIGSTOP does — or cut,
// breaking every connection it relays, as a SIGKILL does.
type front struct {
	ln     net.Listener
	to     string
	mu     sync.Mutex
	frozen bool
	conns  []net.Conn
	paused chan struct{} // non-nil: relayed bytes wait until it is closed
}

// relay copies from one side to the other, holding what it read while
// the front is paused.
func (f *front) relay(to, from net.Conn) {
	defer to.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			f.mu.Lock()
			p := f.paused
			f.mu.Unlock()
			if p != nil {
				<-p
			}
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pause stops the instance mid-way, as SIGSTOP does: connections stay
// open, nothing on them moves.
func (f *front) pause() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.paused == nil {
		f.paused = make(chan struct{})
	}
}

func newFront(t *testing.T, to string) *front {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &front{ln: ln, to: to}
	t.Cleanup(func() { ln.Close(); f.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			frozen := f.frozen
			f.mu.Unlock()
			if frozen {
				continue // held, never read: the kernel took the connection, nobody answers
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, up)
			f.mu.Unlock()
			go f.relay(up, c)
			go f.relay(c, up)
		}
	}()
	return f
}

func (f *front) url() string { return "http://" + f.ln.Addr().String() }

// cut breaks every connection the front holds or relays.
func (f *front) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
	if f.paused != nil {
		close(f.paused)
		f.paused = nil
	}
}

// freeze makes the instance stop answering: connections it relayed end
// (a client's pool dials anew), new ones are held and never read.
func (f *front) freeze() {
	f.cut()
	f.mu.Lock()
	f.frozen = true
	f.mu.Unlock()
}

// ownerBehindFront starts the owner instance A, reached by the others only
// through a front, and instance B on the same Postgres.
func ownerBehindFront(t *testing.T) (a, b *testServer, f *front) {
	a = startServer(t, func(c *api.Config) {
		f = newFront(t, c.Listener.Addr().String())
		c.AdvertiseURL = f.url()
	})
	b = startServer(t, nil)
	return a, b, f
}

// TestForward_AFrozenOwnerIsA503InTime: requests through B for the session
// of an owner that stopped answering get a 503 within the forwarding
// bounds, not a hang — a socket's upgrade too — and the goroutines they
// took are given back; once an owner did not answer, the requests after
// get their 503 at once.
func TestForward_AFrozenOwnerIsA503InTime(t *testing.T) {
	a, b, f := ownerBehindFront(t)
	s := a.newSession()
	if got := b.do("GET", "/api/sessions/"+s.ID, "", "", ""); got.Status != http.StatusOK {
		t.Fatalf("the session through B while its owner answers: %d %s", got.Status, got.Body)
	}
	before := runtime.NumGoroutine()
	f.freeze()

	client := &http.Client{Timeout: 12 * time.Second}
	wave := func(n int) (worst time.Duration) {
		t.Helper()
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				path := "/api/sessions/" + s.ID
				if i%4 == 1 {
					path += "/events?since=0"
				}
				var status int
				if i%4 == 2 { // a socket's upgrade
					ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
					defer cancel()
					c, resp, err := websocket.Dial(ctx, strings.Replace(b.base, "http", "ws", 1)+path+"/ws?since=0", nil)
					if err == nil {
						c.CloseNow()
					}
					if resp != nil {
						status = resp.StatusCode
					}
				} else {
					resp, err := client.Get(b.base + path)
					if err != nil {
						t.Errorf("%s through B for a frozen owner: %v after %v", path, err, time.Since(t0).Round(time.Millisecond))
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				if status != http.StatusServiceUnavailable {
					t.Errorf("%s through B for a frozen owner: %d after %v, want 503", path, status, time.Since(t0).Round(time.Millisecond))
				}
				mu.Lock()
				worst = max(worst, time.Since(t0))
				mu.Unlock()
			}()
		}
		wg.Wait()
		return worst
	}
	if worst := wave(40); worst > 9*time.Second {
		t.Errorf("the slowest 503 for a frozen owner took %v; the bound is 5s for the answer's header", worst)
	}
	if worst := wave(40); worst > 2*time.Second {
		t.Errorf("right after the owner failed to answer, the slowest 503 took %v; want it at once", worst)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+20 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the requests for a frozen owner were answered, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestForward_ASocketWhoseOwnerDiesEndsWithACloseCode: a reader watching
// through B whose session's owner breaks off is closed with 1011 and a
// reason, not left with a bare EOF; the owner's own close codes reach it
// as they are.
func TestForward_ASocketWhoseOwnerDiesEndsWithACloseCode(t *testing.T) {
	a, b, f := ownerBehindFront(t)
	s := a.newSession()
	viaB := &sess{ts: b, ID: s.ID, Token: s.Token}

	// A reader and a driver through B; the owner breaks off.
	w, _, err := viaB.dial(context.Background(), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.c.CloseNow()
	w.next(t, "live", 5*time.Second)
	w2, _, err := viaB.dial(context.Background(), 0, s.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.c.CloseNow()
	w2.next(t, "live", 5*time.Second)
	f.cut()
	if code := w.closeStatus(t, 10*time.Second); code != websocket.StatusInternalError {
		t.Fatalf("a reader through B whose owner broke off: closed with %v, want 1011", code)
	}
	if code := w2.closeStatus(t, 10*time.Second); code != websocket.StatusInternalError {
		t.Fatalf("a driver through B whose owner broke off: closed with %v, want 1011", code)
	}

	// Through a front that relays again, the owner's own close codes pass as they are.
	w3, _, err := viaB.dial(context.Background(), 0, s.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer w3.c.CloseNow()
	w3.next(t, "live", 5*time.Second)
	if got := a.do("DELETE", "/api/sessions/"+s.ID, s.Token, "", ""); got.Status != http.StatusNoContent {
		t.Fatalf("end the session: %d %s", got.Status, got.Body)
	}
	if code := w3.closeStatus(t, 10*time.Second); code != 4002 {
		t.Fatalf("a reader through B of a session its owner ended: closed with %v, want 4002", code)
	}
}

// TestForward_ASocketWhoseOwnerFreezesEndsWithACloseCode: a reader
// watching through B whose session's owner stops mid-way (SIGSTOP: its
// connections stay open, nothing moves) is closed with 1011 once the owner
// misses a ping, not left waiting for ever.
func TestForward_ASocketWhoseOwnerFreezesEndsWithACloseCode(t *testing.T) {
	t.Parallel()
	a, b, f := ownerBehindFront(t)
	s := a.newSession()
	viaB := &sess{ts: b, ID: s.ID, Token: s.Token}
	w, _, err := viaB.dial(context.Background(), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.c.CloseNow()
	w.next(t, "live", 5*time.Second)
	f.pause()
	t0 := time.Now()
	if code := w.closeStatus(t, 25*time.Second); code != websocket.StatusInternalError {
		t.Fatalf("a reader through B whose owner froze: closed with %v, want 1011", code)
	}
	t.Logf("closed %v after the owner froze", time.Since(t0).Round(time.Millisecond))
}
