package web_test

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/servertest"
	"github.com/fencelab/fencelab/web"
)

// TestIndex_AReaderWhoLeavesMidPageIsLoggedWithTheStatusItGot: a reader
// whose connection breaks while the page is being written got a 200 header
// and part of a page; the server did nothing wrong. Its log line must say
// 200 (and that the client went away), not 500 at warning level — which is
// what it said while the render's context.Canceled, returned after the
// header went out, was taken for the status.
func TestIndex_AReaderWhoLeavesMidPageIsLoggedWithTheStatusItGot(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs servertest.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	base := startWith(t, &cutListener{Listener: ln, after: 8 << 10}, log, web.Options{})

	// A plain request, not gzip: the page reaches the connection as it is
	// rendered, so the connection breaks halfway through the render.
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(conn)
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 200 ")) || bytes.Contains(got, []byte("</html>")) {
		t.Fatalf("the reader got %d bytes starting %q; want the start of a 200 page, cut short", len(got), got[:min(len(got), 40)])
	}

	line := ""
	for deadline := time.Now().Add(10 * time.Second); line == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			if strings.Contains(sc.Text(), "msg=request method=GET path=/ ") {
				line = sc.Text()
			}
		}
	}
	if line == "" {
		t.Fatalf("no request line for GET / in the log:\n%s", logs.String())
	}
	if !strings.Contains(line, "status=200 ") || !strings.Contains(line, "client_gone=true") || !strings.Contains(line, "level=DEBUG") {
		t.Errorf("the request line says %q; want status 200, the client gone, at debug level", line)
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if (strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN")) && strings.Contains(l, "request") {
			t.Errorf("a reader who left made the server complain: %s", l)
		}
	}
}

// cutListener breaks every connection it accepts once after bytes have
// been written to it, as a reader closing the tab does: the write fails
// with a connection reset, and the connection is closed.
type cutListener struct {
	net.Listener
	after int
}

func (l *cutListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: c, left: l.after}, nil
}

type cutConn struct {
	net.Conn
	mu   sync.Mutex
	left int
}

func (c *cutConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(b) <= c.left {
		c.left -= len(b)
		return c.Conn.Write(b)
	}
	n, _ := c.Conn.Write(b[:c.left])
	c.left = 0
	_ = c.Conn.Close()
	return n, &net.OpError{Op: "write", Net: "tcp", Addr: c.RemoteAddr(), Err: syscall.ECONNRESET}
}
