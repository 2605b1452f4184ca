package session

import (
	"context"
	"errors"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/check"
	"github.com/fencelab/fencelab/server/run/control"
	"github.com/fencelab/fencelab/server/sandbox"
)

// A ClassLine is where a session's checks wait when they are a class
// student's: a line in Postgres that every instance serves (class.Line),
// so that a check in line outlives a server restart, instead of the
// server's own line in memory. Its server plays a check whose turn has
// come in the student's session, wherever that is now (PlayClassCheck).
type ClassLine interface {
	// Submit puts the check in line and returns its job; ErrClassEnded
	// when the student's class has ended.
	Submit(ctx context.Context, sol sandbox.Solution, lease time.Duration) (job int64, err error)
	// Place is the job's place in line (1: next), 0 once it plays; done
	// once it has ended.
	Place(ctx context.Context, job int64) (place int, done bool, err error)
}

// ClassSeat is the class a session's student sits in, as their page
// shows it at its top.
type ClassSeat struct {
	// Class is the class's id: the server's, not the page's.
	Class string `json:"-"`
	// Code is the class's code as people read it (ABC-234).
	Code string `json:"code"`
	// Student is the name the student joined under.
	Student string `json:"student"`
	// Ended says the teacher ended the class: the session is the
	// student's own from then on, and its checks count on no board.
	Ended bool `json:"ended,omitempty"`
}

// ErrClassEnded is a ClassLine's Submit error when the student's class
// has ended: the session learns it so (EndClass), and the check plays as
// the session's own, on no board.
var ErrClassEnded = errors.New("the class has ended")

// SetClass seats the session's student in a class: its checks wait in q
// from now on, and its page shows the seat.
func (s *Session) SetClass(seat ClassSeat, q ClassLine) {
	s.mu.Lock()
	s.seat, s.classLine = &seat, q
	s.mu.Unlock()
}

// EndClass tells the session its class has ended: its checks wait in the
// server's own line from now on and count on no board, and its page is
// told (protocol.NoteClassEnded). A session in no class, or whose class
// ended already, is told nothing; one that has ended takes nothing
// (fault.NotFound). Safe for concurrent use, as OpenChapter.
func (s *Session) EndClass() error {
	s.mu.Lock()
	seated := s.seat != nil && !s.seat.Ended
	if seated {
		seat := *s.seat
		seat.Ended = true
		s.seat, s.classLine = &seat, nil
	}
	s.mu.Unlock()
	if !seated {
		return nil
	}
	return s.tell(protocol.Event{Kind: protocol.KindNote, Actor: protocol.ActorServer, Note: &protocol.NoteEvent{Code: protocol.NoteClassEnded}})
}

// classSeat is the session's seat in a class, nil when it has none.
func (s *Session) classSeat() *ClassSeat {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seat == nil {
		return nil
	}
	seat := *s.seat
	return &seat
}

func (s *Session) classLineOf() ClassLine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.classLine
}

// played is what a class check's first moments came to, for the caller
// of Execute that waits for it: the batch's start, or the refusal.
type played struct {
	res Result
	err error
}

// classCheck is check for a session with a ClassLine: joinCheck, then the
// check in the queue; the caller waits, told its place each time it
// moves, until the check plays here (PlayClassCheck) and is answered as a
// check in the server's own line is: the batch's runs, or the refusal of
// its statements. A caller that gives up leaves the check in line: it
// plays when its turn comes, and its report comes on the page.
func (s *Session) classCheck(ctx context.Context, q ClassLine, c control.Command) (Result, error) {
	o := &order{cmd: c}
	if _, err := s.in.Do(ctx, string(c.Action), o); err != nil {
		return Result{}, err
	}
	job, err := q.Submit(ctx, *c.Solution, time.Duration(o.cmd.LeaseMS)*time.Millisecond)
	if err != nil {
		return Result{}, err
	}
	ch := make(chan played, 1)
	s.mu.Lock()
	s.awaiting[job] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.awaiting, job)
		s.mu.Unlock()
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.After(lineWait)
	told := -1
	for {
		if place, done, err := q.Place(ctx, job); err == nil && !done && place > 0 && place != told {
			told = place
			s.emit(s.m.inLine(place))
		} else if err == nil && done {
			select {
			case p := <-ch:
				return p.res, p.err
			default:
				return Result{OK: true}, nil // played, or ended, without this caller: its events say so
			}
		}
		select {
		case p := <-ch:
			return p.res, p.err
		case <-tick.C:
		case <-deadline:
			return Result{}, fault.Errorf(fault.Busy, "your check waited %v in line and is still there: its report comes on this page when its turn comes", lineWait)
		case <-ctx.Done():
			return Result{}, fault.Errorf(fault.Conflict, "the check's request ended; the check stays in line and its report comes on the page")
		case <-s.ctx.Done():
			return Result{}, fault.Errorf(fault.NotFound, "the session has ended")
		}
	}
}

// ErrStopped is PlayClassCheck's error when the check's batch was stopped
// because the session or the server is ending: the check is played again
// once the student is back.
var ErrStopped = errors.New("the check was stopped as its session ended")

// PlayClassCheck plays a class check whose turn has come (its job,
// claimed: t; sol and its lease from the queue) as a check of the
// session's, and waits for its report. The caller of Execute that waits
// for the check, if any, is answered as soon as it starts or is refused. A refusal of the
// statements is the check's end, with the refusal's sentence; a batch
// stopped by the reader (a reset, a newer check) ends it with neither; a
// batch stopped because the session ends is ErrStopped; any other error
// (the server busy) means try again later. ctx ending (the line lost the
// check's lease) stops waiting.
func (s *Session) PlayClassCheck(ctx context.Context, job int64, t check.Turn, sol sandbox.Solution, lease time.Duration) (report *protocol.CheckReport, refused string, err error) {
	finished := make(chan *protocol.CheckReport, 1)
	o := &order{cmd: control.Command{Action: control.Check, Solution: &sol, LeaseMS: lease.Milliseconds()},
		play: true, given: t, finished: func(rep *protocol.CheckReport) { finished <- rep }}
	res, err := s.in.Do(ctx, string(control.Check), o)
	s.mu.Lock()
	ch := s.awaiting[job]
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- played{res, err}:
		default:
		}
	}
	if err != nil {
		if fault.CodeOf(err) == fault.Invalid {
			return nil, fault.MessageOf(err), nil
		}
		return nil, "", err
	}
	select {
	case rep := <-finished:
		if rep == nil && s.ctx.Err() != nil {
			return nil, "", ErrStopped
		}
		return rep, "", nil
	case <-ctx.Done():
		return nil, "", context.Cause(ctx)
	}
}
