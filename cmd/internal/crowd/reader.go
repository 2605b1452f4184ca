package crowd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/control"
	"github.com/fencelab/fencelab/server/wire"
)

// loader runs the readers against one server and polls its stats.
type loader struct {
	base    *url.URL
	command []byte // the socket message that presses Run
	readers int
	ramp    time.Duration
	timeout time.Duration
	client  *http.Client
}

func newLoader(base *url.URL, cmd control.Command, readers int, ramp, timeout time.Duration) *loader {
	c, _ := json.Marshal(cmd)
	msg, _ := json.Marshal(wire.Frame{Type: wire.FrameCommand, ID: "1", Command: c})
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = readers + 8
	tr.MaxIdleConnsPerHost = readers + 8
	return &loader{base: base, command: msg, readers: readers, ramp: ramp, timeout: timeout, client: &http.Client{Transport: tr}}
}

// Why a reader's context ended, when it did.
var (
	errReaderTimeout   = errors.New("reader timeout")
	errOverallDeadline = errors.New("overall deadline")
	errSeriesDeadline  = errors.New("series deadline")
)

// outcome is how one reader fared.
type outcome struct {
	ok, busy   bool
	took       time.Duration // Run to verdict, when one came
	start      time.Duration // Run to its reply: the run set up, its workers started
	err        string
	reconnects int
}

// busyError is the server saying it is at a cap: HTTP 503, or a command
// error whose code is busy.
type busyError struct{ msg string }

func (e *busyError) Error() string { return e.msg }

// run plays every reader, arriving at once or spread over the ramp, within
// the overall deadline (the ramp, the per-reader timeout and a grace), and
// reports.
func (l *loader) run(ctx context.Context) *Report {
	began := time.Now()
	deadline := l.ramp + l.timeout + loadGrace
	lctx, cancel := context.WithTimeoutCause(ctx, deadline, errOverallDeadline)
	defer cancel()

	statsCtx, stopStats := context.WithCancel(context.WithoutCancel(ctx))
	peaks := make(chan *ServerStats, 1)
	go func() { peaks <- l.pollStats(statsCtx) }()

	outs := make([]outcome, l.readers)
	var wg sync.WaitGroup
	for i := range l.readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l.ramp > 0 {
				select {
				case <-time.After(l.ramp * time.Duration(i) / time.Duration(l.readers)):
				case <-lctx.Done():
					outs[i] = outcome{err: l.endedWhy(lctx, nil)}
					return
				}
			}
			outs[i] = l.reader(lctx)
		}()
	}
	wg.Wait()
	stopStats()
	st := <-peaks
	l.client.CloseIdleConnections()
	return newReport(l, outs, st, time.Since(began), ctx.Err() != nil)
}

// reader is one reader: a session, its socket, Run, the verdict.
func (l *loader) reader(ctx context.Context) outcome {
	ctx, cancel := context.WithTimeoutCause(ctx, l.timeout, errReaderTimeout)
	defer cancel()
	var out outcome
	id, token, err := l.createSession(ctx)
	if err == nil {
		// A reader who leaves closes the tab; this one also ends its session,
		// so a server under --url is left as it was found.
		defer l.deleteSession(id, token)
		out.took, out.start, out.reconnects, err = l.watch(ctx, id, token)
	}
	var be *busyError
	switch {
	case err == nil:
		out.ok = true
	case errors.As(err, &be):
		out.busy = true
	default:
		out.err = l.endedWhy(ctx, err)
	}
	return out
}

// endedWhy says what became of a reader that did not finish: its own
// timeout, the overall deadline, Ctrl-C, or err itself.
func (l *loader) endedWhy(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		switch context.Cause(ctx) {
		case errReaderTimeout:
			return fmt.Sprintf("no verdict within --timeout %v", l.timeout)
		case errOverallDeadline:
			return "no verdict by the overall deadline (--ramp + --timeout + 30s)"
		case errSeriesDeadline:
			return "no verdict by the series' overall deadline"
		default:
			return "interrupted"
		}
	}
	return err.Error()
}

// apiError reads the API's error body: {"error","code","status"}.
func apiError(what string, resp *http.Response) error {
	var body wire.Body
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	_ = json.Unmarshal(b, &body)
	msg := body.Error
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	if resp.StatusCode == http.StatusServiceUnavailable || body.Code == fault.Busy {
		return &busyError{msg: fmt.Sprintf("%s: %s", what, msg)}
	}
	return fmt.Errorf("%s: HTTP %d: %s", what, resp.StatusCode, msg)
}

func (l *loader) createSession(ctx context.Context) (id, token string, err error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.base.String()+"/api/sessions", nil)
	resp, err := l.client.Do(req)
	if err != nil {
		return "", "", fmt.Errorf("create session: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return "", "", apiError("create session", resp)
	}
	var c struct{ ID, Token string }
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.ID == "" || c.Token == "" {
		return "", "", errors.New("create session: the answer has no id and token")
	}
	return c.ID, c.Token, nil
}

func (l *loader) deleteSession(id, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, l.base.String()+"/api/sessions/"+url.PathEscape(id), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := l.client.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// unwrapURLError drops net/url's "Post \"http://...\": " prefix: the
// address is the same for every reader and says nothing.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// follow is one reader's view of its session's socket.
type follow struct {
	since      int64         // the last seq seen
	sent       time.Time     // when Run was pressed; zero until then
	start      time.Duration // Run to its reply, once it came
	run        string        // the run's id, once the reply names it
	reconnects int
}

// watch opens the session's socket, presses Run once it is live, and reads
// until the verdict. Like the page, it reconnects from the last seq it saw
// when the socket drops (backing off from 250ms to 5s), except when the
// events are no longer kept (4001) or the session has ended (4002).
func (l *loader) watch(ctx context.Context, id, token string) (took, start time.Duration, reconnects int, err error) {
	f := &follow{}
	delay := 250 * time.Millisecond
	for {
		conn, resp, err := websocket.Dial(ctx, socketURL(l.base, id, token, f.since), &websocket.DialOptions{HTTPClient: l.client})
		if err == nil {
			took, err = l.read(ctx, conn, f)
			if err == nil {
				conn.Close(websocket.StatusNormalClosure, "the reader has its verdict")
				return took, f.start, f.reconnects, nil
			}
			conn.CloseNow()
			var dropped *droppedError
			if !errors.As(err, &dropped) {
				return 0, 0, f.reconnects, err
			}
		} else if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return 0, 0, f.reconnects, apiError("open the socket", resp)
		} else if ctx.Err() != nil {
			return 0, 0, f.reconnects, ctx.Err()
		}
		// Dropped, or could not connect: again, as the page does.
		f.reconnects++
		select {
		case <-ctx.Done():
			return 0, 0, f.reconnects, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(5*time.Second, 2*delay)
	}
}

// socketURL is a session's WebSocket, as its driver, from the seq after
// since.
func socketURL(base *url.URL, id, token string, since int64) string {
	ws := "ws"
	if base.Scheme == "https" {
		ws = "wss"
	}
	return fmt.Sprintf("%s://%s/api/sessions/%s/ws?since=%d&token=%s", ws, base.Host, url.PathEscape(id), since, url.QueryEscape(token))
}

// droppedError is a socket that closed in a way the page reconnects after.
type droppedError struct{ err error }

func (e *droppedError) Error() string { return "the socket dropped: " + e.err.Error() }

// read reads frames until the verdict of the run it started. It presses
// Run at the first "live" frame.
func (l *loader) read(ctx context.Context, conn *websocket.Conn, f *follow) (time.Duration, error) {
	conn.SetReadLimit(16 << 20) // a verdict carries the whole outcome
	for {
		m, err := nextFrame(ctx, conn)
		if err != nil {
			return 0, err
		}
		switch m.Type {
		case wire.FrameLive:
			if f.sent.IsZero() {
				f.sent = time.Now()
				if err := conn.Write(ctx, websocket.MessageText, l.command); err != nil {
					return 0, &droppedError{err}
				}
			}
		case wire.FrameReply:
			if m.ID != "1" {
				continue
			}
			if !m.OK {
				if m.Code == fault.Busy || m.Status == http.StatusServiceUnavailable {
					return 0, &busyError{msg: "run: " + m.Error}
				}
				return 0, fmt.Errorf("run: %s (%s)", m.Error, m.Code)
			}
			var res struct {
				Run string `json:"run"`
			}
			_ = json.Unmarshal(m.Result, &res)
			f.run, f.start = res.Run, time.Since(f.sent)
		case wire.FrameError:
			return 0, fmt.Errorf("the server could not read the command: %s", m.Error)
		case wire.FrameEvent:
			e := m.Event
			if e == nil || e.Seq <= f.since {
				continue // never twice
			}
			f.since = e.Seq
			if f.run != "" && e.Run != "" && e.Run != f.run {
				continue // not this reader's run (the session has only one)
			}
			switch e.Kind {
			case protocol.KindVerdict:
				took := time.Since(f.sent)
				if e.Verdict == nil || !e.Verdict.Safe {
					return took, errors.New("the verdict is unsafe: not a correct build's (all guards on)")
				}
				return took, nil
			case protocol.KindError:
				if e.Error != nil {
					return 0, fmt.Errorf("the run failed (%s): %s", e.Error.Code, e.Error.Message)
				}
			case protocol.KindRunState:
				if e.RunState == nil {
					continue
				}
				if i := e.RunState.Info; i.Phase.Ended() && i.Phase != protocol.PhaseFinished {
					return 0, fmt.Errorf("the run %s (%s) before its verdict", i.Phase, i.StopReason)
				}
			case protocol.KindSession:
				return 0, errors.New("the session ended before the verdict")
			}
		}
	}
}

// nextFrame reads the socket's next frame. Its error is ctx's, the
// socket's end said in words (4001, 4002), a frame that is not JSON, or a
// *droppedError, after which the page reconnects.
func nextFrame(ctx context.Context, conn *websocket.Conn) (wire.Frame, error) {
	var m wire.Frame
	_, b, err := conn.Read(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return m, ctx.Err()
		}
		switch st := websocket.CloseStatus(err); st {
		case 4001:
			return m, errors.New("the socket closed: the events it missed are no longer kept (4001)")
		case 4002:
			return m, errors.New("the socket closed: the session has ended (4002)")
		}
		return m, &droppedError{err}
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("a frame is not JSON: %v", err)
	}
	return m, nil
}
