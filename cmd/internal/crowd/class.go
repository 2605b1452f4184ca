package crowd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/fencelab/fencelab/server/class"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/check"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/wire"
)

// A class crowd (`fencelab crowd --class N`) is a classroom instead of a
// blog: a teacher opens a class, N students join it by its code, each
// with a session and a socket of their own, and once every one has joined
// they all press Check at once, on solutions of which every third is
// wrong. Each student waits for the report of their check; the teacher's
// board is polled meanwhile, to see how long it takes to show each one.

// Bounds and defaults of a ClassConfig.
const (
	// MaxStudents is a class's size on the server.
	MaxStudents = 60
	// DefaultClassTimeout is how long a student waits for the report,
	// from pressing Check: long, since a check plays six cases, a few
	// checks at a time server-wide, and the rest wait in line.
	DefaultClassTimeout = 5 * time.Minute
)

const (
	// boardEvery is how often the teacher's board is read.
	boardEvery = 250 * time.Millisecond
	// echoWindow is how long every socket stays open once the last
	// student has their report, for a report that comes twice.
	echoWindow = 3 * time.Second
	// boardGrace bounds the wait, once the sockets are closed, for the
	// board to show the last reports.
	boardGrace = 15 * time.Second
	// classGrace is what the overall deadline allows beyond the students'
	// timeout: opening the class, the joins and sockets, the board's last
	// polls.
	classGrace = 2 * time.Minute
)

// ClassConfig is one class crowd. Validate fills its defaults and refuses
// what is out of bounds, in fault.Invalid sentences that name the
// command's flags; RunClass calls it.
type ClassConfig struct {
	// Students is how many students join, 1 to MaxStudents.
	Students int
	// Lease is the lease of the check's runs (check.Lease's rule);
	// zero: the server's default.
	Lease time.Duration
	// Timeout is how long one student waits, from pressing Check to the
	// report (default DefaultClassTimeout, at most MaxTimeout).
	Timeout time.Duration
	// Board, if set, is the teacher's board address of a class already
	// open on Server.URL (http://HOST/classes/ID#token=T): the students
	// join that class, beside whoever else is in it, and the crowd reads
	// its board but neither opens nor ends it. It holds the teacher's key:
	// the command takes it from the environment (FENCELAB_BOARD), never a
	// flag, and no error or log line repeats it.
	Board string

	// Server is the server played against, or the one started.
	Server
}

// boardOf reads a teacher's board address: the class's id and the
// teacher's token, on the host of base. Its errors never repeat the
// address (it holds the token).
func boardOf(board string, base *url.URL) (classID, token string, err error) {
	u, err := url.Parse(board)
	if err != nil {
		return "", "", invalidf("FENCELAB_BOARD is not an address")
	}
	id, ok := strings.CutPrefix(u.Path, "/classes/")
	if !ok || !class.IDForm(id) {
		return "", "", invalidf("FENCELAB_BOARD is not a board's address (http://HOST/classes/ID#token=…)")
	}
	frag, err := url.ParseQuery(u.Fragment)
	token = frag.Get("token")
	if err != nil || token == "" {
		return "", "", invalidf("FENCELAB_BOARD has no teacher's key (#token=… at its end)")
	}
	if base == nil || u.Scheme != base.Scheme || u.Host != base.Host {
		return "", "", invalidf("FENCELAB_BOARD is a board of another server than --url: its key goes to --url's server alone")
	}
	return id, token, nil
}

// Validate fills the zero fields that have a default and checks every
// bound.
func (c *ClassConfig) Validate() error {
	if c.Timeout == 0 {
		c.Timeout = DefaultClassTimeout
	}
	if err := c.Server.validate(); err != nil {
		return err
	}
	switch {
	case c.Students < 1 || c.Students > MaxStudents:
		return invalidf("--class %d must be between 1 and %d students (a class's size)", c.Students, MaxStudents)
	case c.Timeout < 0 || c.Timeout > MaxTimeout:
		return invalidf("--timeout %v must be above 0 and at most %v", c.Timeout, MaxTimeout)
	}
	if _, err := check.Lease("--lease", c.Lease); err != nil {
		return invalidf("%v", err)
	}
	if c.Board != "" {
		if c.URL == "" {
			return invalidf("FENCELAB_BOARD needs --url: a class already open is on a server already running")
		}
		base, err := target(c.URL, c.AllowRemote)
		if err != nil {
			return invalidf("--url %s %v", c.URL, err)
		}
		if _, _, err := boardOf(c.Board, base); err != nil {
			return err
		}
	}
	return nil
}

// classSolution is one solution a student checks: ours, or ours with one
// clause taken out (as server/run/check's mutation test takes it out),
// which the check must fail, naming Want first.
type classSolution struct {
	name     string
	kind     sandbox.Kind
	old, new string
	want     experiments.Requirement // "": right, the check passes
}

// classSolutions are the solutions of a class: ours, then the wrong ones.
// solutionOf says whose is which.
var classSolutions = []classSolution{
	{name: "ours"},
	{"the complete without its epoch comparison", sandbox.Complete, "\n   AND epoch = :epoch", "", experiments.ReqCompleteFence},
	{"the claim without its epoch increment", sandbox.Claim, "       epoch = epoch + 1,\n", "", experiments.ReqEpochRaised},
	{"the receiver without its epoch condition", sandbox.Receiver, "\n WHERE held.epoch <= EXCLUDED.epoch", "", experiments.ReqReceiverOlder},
}

// solutionOf is the index in classSolutions of student i's solution
// (from 0): every third student's is wrong, the wrong kinds in turn.
func solutionOf(i int) int {
	if i%3 != 2 {
		return 0
	}
	return 1 + (i/3)%(len(classSolutions)-1)
}

func (s classSolution) right() bool { return s.want == "" }

// solution makes the statements; an error when ours no longer has the
// clause to take out.
func (s classSolution) solution() (sandbox.Solution, error) {
	ours := sandbox.Ours()
	if s.old == "" {
		return ours, nil
	}
	text := ours.Text(s.kind)
	if !strings.Contains(text, s.old) {
		return ours, fmt.Errorf("crowd: sandbox.Ours()'s %s has no %q, so %q cannot be made", s.kind, s.old, s.name)
	}
	return ours.With(s.kind, strings.Replace(text, s.old, s.new, 1)), nil
}

// RunClass plays one class: the teacher opens it, cfg.Students students
// join, all press Check at once, and the board is read until it shows
// every report. The report is nil only when the class could not start (a
// bad config, a server that would not start or answer, a class it would
// not open); with a report, the error is ErrInterrupted, or says how the
// server it started did not stop cleanly. The class is ended and the
// students' sessions deleted before RunClass returns, and a server it
// starts is stopped and reaped.
func RunClass(ctx context.Context, cfg ClassConfig) (*ClassReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sols := make([]sandbox.Solution, len(classSolutions))
	for i, s := range classSolutions {
		var err error
		if sols[i], err = s.solution(); err != nil {
			return nil, err
		}
	}
	base, child, err := cfg.open(ctx)
	if err != nil {
		return nil, err
	}
	defer child.stop() // nil: no server of its own to stop
	c := newClassLoader(base, cfg, sols)
	cfg.Log.Printf("a class of %d student%s against %s: each joins, then all press Check at once and wait up to %v for the report",
		cfg.Students, plural(cfg.Students), base, cfg.Timeout)
	rep, err := c.run(ctx)
	if rep == nil {
		return nil, err
	}
	rep.ServerPID, rep.ServerExit = stopServer(child)
	return rep, endErr(ctx, rep.ServerExit)
}

// classLoader plays one class against one server.
type classLoader struct {
	base    *url.URL
	cfg     ClassConfig
	checks  [][]byte // each solution's check command
	client  *http.Client
	stats   *loader // polls /api/stats
	classID string
	code    string
	teacher string
}

func newClassLoader(base *url.URL, cfg ClassConfig, sols []sandbox.Solution) *classLoader {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 2*cfg.Students + 8
	tr.MaxIdleConnsPerHost = 2*cfg.Students + 8
	c := &classLoader{base: base, cfg: cfg, client: &http.Client{Transport: tr}}
	for _, s := range sols {
		cmd := map[string]any{"action": "check", "solution": s}
		if cfg.Lease > 0 {
			cmd["lease_ms"] = cfg.Lease.Milliseconds()
		}
		b, _ := json.Marshal(cmd)
		c.checks = append(c.checks, b)
	}
	c.stats = &loader{base: base, client: c.client}
	return c
}

// student is one student and what became of their check. The student's
// own goroutine and its socket's write it, the board's poller writes
// boardAt and boardPass: all under mu.
type student struct {
	i    int
	name string
	sol  int // in classSolutions

	mu             sync.Mutex
	id             string // the class's id of the student
	session, token string
	joined         bool
	sent           time.Time // Check pressed
	started        time.Time // the check's batch started: its turn in line came
	reported       time.Time // the first report read
	reports        int       // finished checks read on the socket
	logged         int       // finished checks in the session's log afterwards; -1: not read
	place          int       // the farthest back in line it was told
	pass           *bool
	first          experiments.Requirement // the first requirement the report names
	reconnects     int
	busy, missing  bool
	err            string
	boardAt        time.Time
	boardPass      *bool
}

func (s *student) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != "" || s.busy {
		return
	}
	var be *busyError
	if errors.As(err, &be) {
		s.busy = true
		return
	}
	s.err = err.Error()
}

// errStudentTimeout ends a student's wait for the report.
var errStudentTimeout = errors.New("student timeout")

// run plays the class. It returns no report when the class could not be
// opened.
func (c *classLoader) run(ctx context.Context) (*ClassReport, error) {
	began := time.Now()
	lctx, cancel := context.WithTimeoutCause(ctx, c.cfg.Timeout+classGrace, errOverallDeadline)
	defer cancel()
	defer c.client.CloseIdleConnections()

	if err := c.openClass(lctx); err != nil {
		return nil, fmt.Errorf("crowd: open a class: %w", err)
	}
	// The class is ended, and every student's session deleted, however
	// the crowd ends, so a server under --url is left as it was found.
	defer c.endClass()

	statsCtx, stopStats := context.WithCancel(context.WithoutCancel(ctx))
	peaks := make(chan *ServerStats, 1)
	go func() { peaks <- c.stats.pollStats(statsCtx) }()

	students := make([]*student, c.cfg.Students)
	for i := range students {
		students[i] = &student{i: i, name: fmt.Sprintf("Crowd student %02d", i+1), sol: solutionOf(i), logged: -1}
	}
	defer c.deleteSessions(students)

	// Each student joins and opens their socket; once every one is live
	// (or has failed), all press Check at once. Their sockets stay open
	// for echoWindow after the last report, for one that comes twice.
	var joined, settled, ended sync.WaitGroup
	start := make(chan struct{})
	lingerCtx, stopLinger := context.WithCancel(lctx)
	defer stopLinger()
	for _, s := range students {
		joined.Add(1)
		settled.Add(1)
		ended.Add(1)
		go func() {
			defer ended.Done()
			c.student(lctx, lingerCtx, s, joined.Done, start, settled.Done)
		}()
	}
	joined.Wait()
	var n int
	for _, s := range students {
		s.mu.Lock()
		if s.joined {
			n++
		}
		s.mu.Unlock()
	}
	c.cfg.Log.Printf("%d of %d students joined and live; all press Check", n, len(students))

	var allSettled atomic.Bool
	boardCtx, stopBoard := context.WithCancel(lctx)
	defer stopBoard()
	board := make(chan boardPolls, 1)
	go func() { board <- c.pollBoard(boardCtx, students, &allSettled) }()
	close(start)

	settled.Wait()
	allSettled.Store(true)
	select {
	case <-time.After(echoWindow):
	case <-lctx.Done():
	}
	stopLinger()
	ended.Wait()
	var bp boardPolls
	select {
	case bp = <-board:
	case <-time.After(boardGrace):
		stopBoard()
		bp = <-board
	}
	stopStats()
	st := <-peaks
	return newClassReport(c, students, bp, st, time.Since(began), ctx.Err() != nil), nil
}

// student is one student: join, socket, Check, the report. joined is
// called once the socket is live (or the student failed), settled once
// the report came (or none will); the socket stays open until linger
// ends, and then the session's log is read for the reports it holds.
func (c *classLoader) student(ctx, linger context.Context, s *student, joined func(), start <-chan struct{}, settled func()) {
	var joinOnce, settleOnce sync.Once
	join := func() { joinOnce.Do(joined) }
	settle := func() { settleOnce.Do(settled) }
	defer join()
	defer settle()

	if err := c.join(ctx, s); err != nil {
		s.fail(err)
		return
	}
	sockCtx, stopSocket := context.WithCancelCause(linger)
	defer stopSocket(nil)
	live, reported := make(chan struct{}), make(chan struct{})
	sockDone := make(chan struct{})
	var sockErr error
	go func() {
		defer close(sockDone)
		sockErr = c.follow(sockCtx, s, live, reported)
	}()
	defer func() { <-sockDone }() // after stopSocket: no goroutine outlives the student

	select {
	case <-live:
	case <-sockDone:
		s.fail(c.endedWhy(ctx, sockErr))
		return
	}
	s.mu.Lock()
	s.joined = true
	s.mu.Unlock()
	join()
	select {
	case <-start:
	case <-ctx.Done():
		s.fail(c.endedWhy(ctx, nil))
		return
	}

	s.mu.Lock()
	s.sent = time.Now()
	s.mu.Unlock()
	posted := make(chan error, 1)
	go func() { posted <- c.check(ctx, s) }()
	timeout := time.NewTimer(c.cfg.Timeout)
	defer timeout.Stop()
wait:
	for {
		select {
		case <-reported:
			break wait
		case err := <-posted:
			if err != nil {
				s.fail(err)
				return
			}
			posted = nil // accepted: the report is on its way
		case <-sockDone:
			s.fail(c.endedWhy(ctx, sockErr))
			return
		case <-timeout.C:
			s.mu.Lock()
			s.missing = true
			s.mu.Unlock()
			stopSocket(errStudentTimeout)
			break wait
		case <-ctx.Done():
			s.fail(c.endedWhy(ctx, nil))
			return
		}
	}
	settle()
	<-sockDone // at the end of the echo window, or now
	if n, err := c.logged(context.WithoutCancel(ctx), s); err == nil {
		s.mu.Lock()
		s.logged = n
		s.mu.Unlock()
	}
}

// endedWhy says what ended a student: the overall deadline, Ctrl-C, or
// err itself.
func (c *classLoader) endedWhy(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if context.Cause(ctx) == errOverallDeadline {
			return errors.New("no report by the overall deadline (--timeout + 2m)")
		}
		return errors.New("interrupted")
	}
	if err == nil {
		return errors.New("ended")
	}
	return err
}

// openClass opens the class as its teacher.
func (c *classLoader) openClass(ctx context.Context) error {
	if c.cfg.Board != "" {
		return c.joinBoard(ctx)
	}
	var opened struct {
		Class struct {
			ID string `json:"id"`
		} `json:"class"`
		Code  string `json:"code"`
		Token string `json:"token"`
	}
	if err := c.do(ctx, http.MethodPost, "/api/classes", "", nil, http.StatusCreated, "open the class", &opened); err != nil {
		return err
	}
	if opened.Class.ID == "" || opened.Code == "" || opened.Token == "" {
		return errors.New("the answer has no class id, code and token")
	}
	c.classID, c.code, c.teacher = opened.Class.ID, opened.Code, opened.Token
	return nil
}

// joinBoard takes the class of cfg.Board, which its teacher opened: its
// code, read as its teacher.
func (c *classLoader) joinBoard(ctx context.Context) error {
	id, token, err := boardOf(c.cfg.Board, c.base)
	if err != nil {
		return err
	}
	var cl struct {
		Code  string     `json:"code"`
		Ended *time.Time `json:"ended"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/classes/"+url.PathEscape(id), token, nil, http.StatusOK, "read the class", &cl); err != nil {
		return err
	}
	if cl.Code == "" || cl.Ended != nil {
		return errors.New("the class of FENCELAB_BOARD has ended")
	}
	c.classID, c.code, c.teacher = id, cl.Code, token
	return nil
}

// endClass ends the class, as its teacher, if the crowd opened it: a
// class of FENCELAB_BOARD is its teacher's to end.
func (c *classLoader) endClass() {
	if c.cfg.Board != "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.do(ctx, http.MethodDelete, "/api/classes/"+url.PathEscape(c.classID), c.teacher, nil, http.StatusOK, "end the class", nil)
}

// join joins the class as s, by the code.
func (c *classLoader) join(ctx context.Context, s *student) error {
	body, _ := json.Marshal(map[string]string{"code": c.code, "name": s.name})
	var j struct {
		Student struct {
			ID string `json:"id"`
		} `json:"student"`
		Session struct {
			ID    string `json:"id"`
			Token string `json:"token"`
		} `json:"session"`
	}
	if err := c.do(ctx, http.MethodPost, "/api/classes/join", "", body, http.StatusCreated, "join the class", &j); err != nil {
		return err
	}
	if j.Student.ID == "" || j.Session.ID == "" || j.Session.Token == "" {
		return errors.New("join the class: the answer has no student and session")
	}
	s.mu.Lock()
	s.id, s.session, s.token = j.Student.ID, j.Session.ID, j.Session.Token
	s.mu.Unlock()
	return nil
}

// check presses Check: the command, over HTTP, to the student's session.
// The server answers once the check's turn in its line has come and its
// statements are vetted; the report comes on the socket.
func (c *classLoader) check(ctx context.Context, s *student) error {
	return c.do(ctx, http.MethodPost, "/api/sessions/"+url.PathEscape(s.session)+"/commands", s.token, c.checks[s.sol], http.StatusOK, "check", nil)
}

// deleteSessions ends every student's session, as a student who leaves
// does not, so that a server under --url is left as it was found.
func (c *classLoader) deleteSessions(students []*student) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, s := range students {
		s.mu.Lock()
		id, token := s.session, s.token
		s.mu.Unlock()
		if id == "" {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = c.do(ctx, http.MethodDelete, "/api/sessions/"+url.PathEscape(id), token, nil, http.StatusNoContent, "delete the session", nil)
		})
	}
	wg.Wait()
}

// do sends one request and decodes the answer into out (if not nil); an
// answer other than want is the API's error.
func (c *classLoader) do(ctx context.Context, method, path, token string, body []byte, want int, what string, out any) error {
	var r io.Reader
	if body != nil {
		r = strings.NewReader(string(body))
	}
	req, _ := http.NewRequestWithContext(ctx, method, c.base.String()+path, r)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", what, unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return apiError(what, resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: the answer is not JSON: %v", what, err)
	}
	return nil
}

// follow reads the student's socket until ctx ends, reconnecting from
// the last seq it saw as the page does (backing off from 250ms to 5s),
// except when the events are no longer kept (4001) or the session has
// ended (4002). It closes live at the first live frame and reported at
// the first report.
func (c *classLoader) follow(ctx context.Context, s *student, live, reported chan struct{}) error {
	var since int64
	var liveOnce, reportOnce sync.Once
	onLive := func() { liveOnce.Do(func() { close(live) }) }
	onReport := func() { reportOnce.Do(func() { close(reported) }) }
	delay := 250 * time.Millisecond
	for {
		conn, resp, err := websocket.Dial(ctx, socketURL(c.base, s.session, s.token, since), &websocket.DialOptions{HTTPClient: c.client})
		if err == nil {
			err = c.read(ctx, conn, s, &since, onLive, onReport)
			conn.CloseNow()
			var dropped *droppedError
			if !errors.As(err, &dropped) {
				return err
			}
		} else if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return apiError("open the socket", resp)
		} else if ctx.Err() != nil {
			return ctx.Err()
		}
		s.mu.Lock()
		s.reconnects++
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(5*time.Second, 2*delay)
	}
}

// read reads one socket's frames into s until ctx ends or the socket
// does. Every finished check read counts, even one whose seq it has seen:
// the server promises each event once.
func (c *classLoader) read(ctx context.Context, conn *websocket.Conn, s *student, since *int64, onLive, onReport func()) error {
	conn.SetReadLimit(16 << 20) // a finished check carries its cells, runs and report
	for {
		m, err := nextFrame(ctx, conn)
		if err != nil {
			return err
		}
		switch m.Type {
		case wire.FrameLive:
			onLive()
		case wire.FrameError:
			return fmt.Errorf("the server could not read a message: %s", m.Error)
		case wire.FrameEvent:
			e := m.Event
			if e == nil {
				continue
			}
			seen := e.Seq <= *since
			*since = max(*since, e.Seq)
			switch {
			case e.Kind == protocol.KindNote && e.Note != nil && e.Note.Code == protocol.NoteInLine:
				s.mu.Lock()
				s.place = max(s.place, e.Note.Place)
				s.mu.Unlock()
			case e.Kind == protocol.KindBatch && e.Batch != nil && e.Batch.Name == experiments.BatchCheck:
				if err := s.batch(e.Batch, seen, onReport); err != nil {
					return err
				}
			case e.Kind == protocol.KindSession && !seen:
				return errors.New("the session ended before the report")
			}
		}
	}
}

// batch takes one of the student's check events.
func (s *student) batch(b *protocol.BatchEvent, seen bool, onReport func()) error {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch b.Phase {
	case protocol.BatchStarted:
		if !seen && s.started.IsZero() {
			s.started = now
		}
	case protocol.BatchFinished:
		s.reports++
		if s.reports > 1 {
			return nil
		}
		s.reported = now
		if b.Check == nil {
			s.err = "the finished check carries no report"
		} else {
			pass := b.Check.Pass
			s.pass = &pass
			if len(b.Check.Broken) > 0 {
				s.first = b.Check.Broken[0].Requirement
			}
		}
		onReport()
	case protocol.BatchStopped:
		if s.reports == 0 {
			return fmt.Errorf("the check was stopped: %s", b.Answer)
		}
	}
	return nil
}

// logged counts the finished checks in the student's session's log.
func (c *classLoader) logged(ctx context.Context, s *student) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var since int64
	n := 0
	for {
		var page struct {
			Events  []protocol.Event `json:"events"`
			LastSeq int64            `json:"last_seq"`
			More    bool             `json:"more"`
		}
		path := fmt.Sprintf("/api/sessions/%s/events?since=%d&limit=10000", url.PathEscape(s.session), since)
		if err := c.do(ctx, http.MethodGet, path, s.token, nil, http.StatusOK, "read the session's events", &page); err != nil {
			return 0, err
		}
		for _, e := range page.Events {
			if e.Kind == protocol.KindBatch && e.Batch != nil && e.Batch.Name == experiments.BatchCheck && e.Batch.Phase == protocol.BatchFinished {
				n++
			}
			since = max(since, e.Seq)
		}
		if !page.More || len(page.Events) == 0 {
			return n, nil
		}
	}
}

// boardPolls counts the board's polls.
type boardPolls struct{ ok, failed int }

// pollBoard reads the board every boardEvery, as the teacher's page
// does, and marks each student's row the first time it shows their
// check; until ctx ends, or every student is settled and each report has
// shown.
func (c *classLoader) pollBoard(ctx context.Context, students []*student, settled *atomic.Bool) boardPolls {
	var bp boardPolls
	byID := map[string]*student{}
	t := time.NewTicker(boardEvery)
	defer t.Stop()
	for {
		done := settled.Load() // read before the poll: what it shows is after
		b, err := c.board(ctx)
		now := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return bp
			}
			bp.failed++
		} else {
			bp.ok++
			if len(byID) < len(students) {
				for _, s := range students {
					s.mu.Lock()
					if s.id != "" {
						byID[s.id] = s
					}
					s.mu.Unlock()
				}
			}
			for _, r := range b.Students {
				s := byID[r.ID]
				if s == nil || r.Checks < 1 || r.Checked == nil {
					continue
				}
				s.mu.Lock()
				if s.boardAt.IsZero() {
					s.boardAt, s.boardPass = now, r.Pass
				}
				s.mu.Unlock()
			}
		}
		if done && allShown(students) {
			return bp
		}
		select {
		case <-ctx.Done():
			return bp
		case <-t.C:
		}
	}
}

// allShown says whether every report that came has shown on the board.
func allShown(students []*student) bool {
	for _, s := range students {
		s.mu.Lock()
		waiting := !s.reported.IsZero() && s.boardAt.IsZero()
		s.mu.Unlock()
		if waiting {
			return false
		}
	}
	return true
}

// board reads the board once, within 3s.
func (c *classLoader) board(ctx context.Context) (class.Board, error) {
	var b class.Board
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err := c.do(ctx, http.MethodGet, "/api/classes/"+url.PathEscape(c.classID)+"/board", c.teacher, nil, http.StatusOK, "read the board", &b)
	return b, err
}
