// Package line is the server's one line of checks in memory: fair by
// rounds across client addresses, a few starting at once, each holding
// its slot for its first YoungFor only; and the estimate of a check's
// wait told with its place (Times). A class's checks wait instead in the
// class's line in Postgres (server/class).
package line

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fencelab/fencelab/server/fault"
)

// Line is the server's one line of checks. A check is a whole
// pipeline (schemas, a role, a trial run, six cases of two workers each),
// so the server plays few at once (max), and a client address plays one
// at a time: its next waits in line. The line is fair by rounds (start-time
// fair queueing): a check is tagged, when it joins, with its address's
// round — one past the address's last check still in the line or
// playing, and never before the round now being served — and the line
// goes by round, then by arrival. So one address's flood of checks waits
// behind itself, and a reader at another address waits for at most one
// check of each address ahead of it.
//
// A check that has played for YoungFor leaves its slot to the next in
// line and plays on: max checks start together, and at most 3×max play at
// once. A check that takes half a minute (a stranger's statements that
// each run to their timeout) so holds a slot for YoungFor, not for its
// half minute, and a reader behind six of them starts within YoungFor.
// Past 3×max such checks, a reader waits for one to end.
//
// A loopback client has no address caps; each of its sessions is an
// address of its own in the line.
type Line struct {
	mu      sync.Mutex
	max     int            // checks that may be young (in their first YoungFor) at once
	most    int            // checks that may play at once
	young   int            // checks playing and young
	running map[string]int // by key: checks playing
	playing int
	waiting []*Ticket
	seq     int64
	round   int64            // the round of the last check to start
	last    map[string]int64 // by key: the round of its last check in line or playing
}

// Ticket is one check's place in the line.
type Ticket struct {
	key   string
	seq   int64
	round int64
	ready chan struct{} // closed when its turn has come
	left  chan struct{} // closed when it is replaced, or taken out (leave)
	place int           // 1 for the next to start; 0 once its turn has come
	moved func(place int)
	young *time.Timer // from its turn until it is done or has played YoungFor; nil then
	// joined is when it joined the line, turned when its turn came
	// (zero before): Waited.
	joined, turned time.Time
}

// Waited is how long t waited in line for its turn: 0 before its turn
// has come. Its reader is the one whose turn it is (after Wait).
func (t *Ticket) Waited() time.Duration {
	if t.turned.IsZero() {
		return 0
	}
	return t.turned.Sub(t.joined)
}

// YoungFor is how long a check holds one of the line's max slots: about
// half of what a check of ours takes alone on an idle 2-core machine
// (3.5 s), so a reader waits for checks ahead of it at most this long
// while fewer than 3×max play.
const YoungFor = 2 * time.Second

// New returns a line where max checks start together (and 3×max play).
func New(max int) *Line {
	return &Line{max: max, most: 3 * max, running: map[string]int{}, last: map[string]int64{}}
}

// Join puts a check in line for key, keeping the place of old (the same
// session's check that waited before it and is replaced) if there is one.
// moved is told the ticket's place each time it changes, outside the
// line's lock, never after its turn has come.
func (l *Line) Join(key string, old *Ticket, moved func(place int)) *Ticket {
	t := &Ticket{key: key, ready: make(chan struct{}), left: make(chan struct{}), moved: moved, joined: time.Now()}
	l.change(func() {
		if i := slices.Index(l.waiting, old); old != nil && i >= 0 {
			t.seq, t.round = old.seq, old.round
			close(old.left)
			l.waiting[i] = t
			return
		}
		l.seq++
		t.seq = l.seq
		t.round = l.round
		if r, ok := l.last[key]; ok {
			t.round = max(t.round, r+1)
		}
		l.last[key] = t.round
		l.waiting = append(l.waiting, t)
	})
	return t
}

// change makes a change to the line under its lock, starts what may
// start, and then, the lock let go, tells the checks that moved.
func (l *Line) change(f func()) {
	l.mu.Lock()
	f()
	tell := l.dispatch()
	l.mu.Unlock()
	tell()
}

// Wait waits for t's turn, at most for wait, or until ctx ends; on an
// error t has left the line.
func (l *Line) Wait(ctx context.Context, t *Ticket, wait time.Duration) error {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-t.ready:
		return nil
	case <-ctx.Done():
	case <-t.left:
	case <-timer.C:
	}
	replaced := isClosed(t.left)
	turned := false
	l.change(func() {
		if turned = isClosed(t.ready); !turned {
			l.leaveLocked(t)
		}
	})
	if turned { // its turn came as it gave up: give the turn back
		l.Done(t)
	}
	switch {
	case replaced:
		return fault.Errorf(fault.Conflict, "the check left the line: a newer check, or a reset, took its place")
	case ctx.Err() != nil:
		return fault.Errorf(fault.Conflict, "the check left the line: its session or its request ended")
	}
	return fault.Errorf(fault.Busy, "the check waited %v in line and its turn did not come; the server is busy, try again later", wait)
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// leaveLocked takes t out of the line; l.mu must be held.
func (l *Line) leaveLocked(t *Ticket) {
	if !isClosed(t.left) {
		close(t.left)
	}
	l.waiting = slices.DeleteFunc(l.waiting, func(w *Ticket) bool { return w == t })
	l.forget(t.key)
}

// Leave takes t out of the line, if it still waits there: its wait ends.
func (l *Line) Leave(t *Ticket) {
	l.change(func() {
		if slices.Contains(l.waiting, t) {
			l.leaveLocked(t)
		}
	})
}

// grown ends t's youth: its slot goes to the next in line.
func (l *Line) grown(t *Ticket) {
	l.change(func() { l.ageLocked(t) })
}

// ageLocked takes t out of the young checks, if it is one; l.mu must be held.
func (l *Line) ageLocked(t *Ticket) {
	if t.young != nil {
		t.young.Stop()
		t.young = nil
		l.young--
	}
}

// Done ends t's turn and lets the line move.
func (l *Line) Done(t *Ticket) {
	l.change(func() {
		l.ageLocked(t)
		if l.running[t.key] > 0 {
			l.running[t.key]--
			if l.running[t.key] == 0 {
				delete(l.running, t.key)
			}
			l.playing--
		}
		l.forget(t.key)
	})
}

// order is the line in the order its checks will start: by round, then
// by arrival. l.mu must be held.
func (l *Line) order() []*Ticket {
	o := slices.Clone(l.waiting)
	slices.SortFunc(o, func(a, b *Ticket) int {
		if a.round != b.round {
			return int(a.round - b.round)
		}
		return int(a.seq - b.seq)
	})
	return o
}

// forget drops the round of a key with nothing in line or playing: its
// next check starts in the round being served. l.mu must be held.
func (l *Line) forget(key string) {
	if l.running[key] == 0 && !slices.ContainsFunc(l.waiting, func(t *Ticket) bool { return t.key == key }) {
		delete(l.last, key)
	}
}

// dispatch starts what may start and renumbers the rest; it returns what
// to tell them, to be called once l.mu is let go. l.mu must be held.
func (l *Line) dispatch() func() {
	for l.young < l.max && l.playing < l.most {
		o := l.order()
		i := slices.IndexFunc(o, func(t *Ticket) bool { return l.running[t.key] == 0 })
		if i < 0 {
			break
		}
		t := o[i]
		l.waiting = slices.DeleteFunc(l.waiting, func(w *Ticket) bool { return w == t })
		l.running[t.key]++
		l.playing++
		l.young++
		t.young = time.AfterFunc(YoungFor, func() { l.grown(t) })
		l.round = max(l.round, t.round)
		t.place = 0
		t.turned = time.Now()
		close(t.ready)
	}
	var moves []*Ticket
	for i, t := range l.order() {
		if t.place != i+1 {
			t.place = i + 1
			if t.moved != nil {
				moves = append(moves, t)
			}
		}
	}
	return func() {
		for _, t := range moves {
			// Told its place as it is now: a later move may have been told first.
			l.mu.Lock()
			place, waiting := t.place, !isClosed(t.left) && t.place > 0
			l.mu.Unlock()
			if waiting {
				t.moved(place)
			}
		}
	}
}

// Len returns how many checks wait in line.
func (l *Line) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.waiting)
}
