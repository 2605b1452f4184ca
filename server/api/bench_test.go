package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// The baseline for the socket benchmarks: a bare WebSocket server that
// writes the same frame bytes to each client as soon as it is told, with no
// session or event log in between. The ratio of a benchmark to its baseline
// is the cost of fencelab's event path; the absolute numbers depend on the
// machine's mood.

type bareServer struct {
	url   string
	mu    sync.Mutex
	conns []*websocket.Conn
	ready chan struct{}
}

func startBare(b *testing.B, clients int) *bareServer {
	bs := &bareServer{ready: make(chan struct{}, clients)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		bs.mu.Lock()
		bs.conns = append(bs.conns, c)
		bs.mu.Unlock()
		bs.ready <- struct{}{}
		<-r.Context().Done()
	})}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	bs.url = "ws://" + ln.Addr().String()
	return bs
}

// broadcast writes one frame to every client, as the event log's writers do: one
// goroutine per socket.
func (bs *bareServer) broadcast(frame []byte) {
	bs.mu.Lock()
	conns := bs.conns
	bs.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Write(context.Background(), websocket.MessageText, frame)
		}()
	}
	wg.Wait()
}

// readers starts n clients that count the event frames they read.
func readers(b *testing.B, n int, dial func() *websocket.Conn) (counts []chan int64) {
	for range n {
		c := dial()
		ch := make(chan int64, 1<<16)
		counts = append(counts, ch)
		go func() {
			defer c.CloseNow()
			for {
				_, msg, err := c.Read(context.Background())
				if err != nil {
					close(ch)
					return
				}
				if strings.HasPrefix(string(msg), `{"type":"event"`) {
					var m struct {
						Event struct{ Seq int64 } `json:"event"`
					}
					_ = json.Unmarshal(msg, &m)
					ch <- m.Event.Seq
				}
			}
		}()
	}
	return counts
}

// awaitAll waits until every reader has read one more event.
func awaitAll(b *testing.B, counts []chan int64) {
	for _, ch := range counts {
		if _, ok := <-ch; !ok {
			b.Fatal("a client was closed")
		}
	}
}

var benchFrame = func() []byte {
	e := protocol.Event{Seq: 1, V: protocol.ProtocolVersion, Actor: "A", Kind: protocol.KindSQL, Text: "Worker A committed job 1 at epoch 2 (1 row).", At: time.Now(),
		SQL: &protocol.SQLEvent{Op: protocol.OpComplete, Result: protocol.ResultOK, Owner: "worker-a", JobID: 1, Epoch: protocol.Int64(2),
			Stmt: protocol.Stmt{Name: "JobComplete", SQL: strings.Repeat("UPDATE x SET y = 1 WHERE z = 2\n", 8), Args: []string{"1", "'worker-a'", "2"}, Rows: 1}}}
	ev, _ := json.Marshal(e)
	return append(append([]byte(`{"type":"event","event":`), ev...), '}')
}()

// BenchmarkEventToSockets measures one event reaching every socket of a
// session (append to the log → each client has read it), against the bare
// baseline, for 1, 100 and 1000 clients.
func BenchmarkEventToSockets(b *testing.B) {
	for _, clients := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("fencelab/clients=%d", clients), func(b *testing.B) {
			ts := startServer(b, nil)
			s := ts.newSession()
			u := strings.Replace(ts.base, "http", "ws", 1) + "/api/sessions/" + s.ID + "/ws?since=0"
			counts := readers(b, clients, func() *websocket.Conn {
				c, _, err := websocket.Dial(context.Background(), u, nil)
				if err != nil {
					b.Fatal(err)
				}
				c.SetReadLimit(1 << 20)
				return c
			})
			sess, _ := ts.Sessions.Get(s.ID)
			for sess.Log.Subscribers() < clients {
				time.Sleep(time.Millisecond)
			}
			var e protocol.Event
			_ = json.Unmarshal(benchFrame[len(`{"type":"event","event":`):len(benchFrame)-1], &e)
			b.ResetTimer()
			for range b.N {
				sess.Log.Append(e)
				awaitAll(b, counts)
			}
		})
		b.Run(fmt.Sprintf("baseline/clients=%d", clients), func(b *testing.B) {
			bs := startBare(b, clients)
			counts := readers(b, clients, func() *websocket.Conn {
				c, _, err := websocket.Dial(context.Background(), bs.url, nil)
				if err != nil {
					b.Fatal(err)
				}
				c.SetReadLimit(1 << 20)
				return c
			})
			for range clients {
				<-bs.ready
			}
			b.ResetTimer()
			for range b.N {
				bs.broadcast(benchFrame)
				awaitAll(b, counts)
			}
		})
	}
}

// BenchmarkWorkerStepToSocket plays step-mode runs and measures, for every
// statement a worker process runs, the time from the statement's own
// database timestamp to the moment a socket client reads its event: the
// whole path worker → stdout → supervisor → runner → log → socket. The
// database and the client share this machine's clock.
func BenchmarkWorkerStepToSocket(b *testing.B) {
	ts := startServer(b, nil)
	var lat []time.Duration
	for range b.N {
		s := ts.newSession()
		w, _, err := s.dial(context.Background(), 0, "")
		if err != nil {
			b.Fatal(err)
		}
		w.next(b, "live", 5*time.Second)
		s.cmd(`{"action":"run","ordering":"new-owner-first","mode":"step","lease_ms":100}`)
		for !s.cmd(`{"action":"step"}`).Done {
		}
		deadline := time.After(5 * time.Second)
	read:
		for {
			select {
			case m := <-w.frames:
				if typeOf(m) != "event" {
					continue
				}
				e := eventOf(m)
				var recv time.Time
				_ = json.Unmarshal(m["_recv"], &recv)
				if e.SQL != nil && e.SQL.Op != protocol.OpRenew && !e.At.IsZero() {
					lat = append(lat, recv.Sub(e.At))
				}
				if e.Verdict != nil {
					break read
				}
			case <-deadline:
				break read
			}
		}
		w.c.CloseNow()
	}
	b.StopTimer()
	if len(lat) == 0 {
		b.Fatal("no statements measured")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds()), "p95-µs")
}
