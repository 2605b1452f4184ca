// Package eventlog is a session's event log: it gives every event its sequence
// number, keeps it, and fans it out to subscribers (WebSocket clients)
// without ever waiting on one. A subscriber that falls behind is dropped,
// not waited for; it reconnects and resumes from the last sequence number
// it saw, and Subscribe hands it exactly the events after that one — no
// gap and no duplicate — because the backlog is read and the subscription
// registered under one lock.
package eventlog

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/fencelab/fencelab/server/lab/protocol"
)

// Entry is one event as the log keeps it: the event, and its frame — the
// JSON message sent to every socket, encoded once however many there are.
type Entry struct {
	Event protocol.Event
	Frame []byte // {"type":"event","event":{...}}
	cost  int64  // the bytes it holds: its frame, and its event's strings
}

// Errors a subscription ends with.
var (
	ErrSlow   = errors.New("the subscriber fell too far behind; reconnect with the last sequence number seen")
	ErrClosed = errors.New("the log is closed")
	ErrGone   = errors.New("the events after that sequence number are no longer kept; reload")
)

// Log is one session's events. It is safe for concurrent use; Append never
// blocks on a subscriber.
type Log struct {
	mu      sync.Mutex
	entries []*Entry // entries[i].Event.Seq == first+i
	first   int64
	next    int64
	max     int
	subBuf  int
	tap     func([]byte)
	budget  *Budget
	subs    map[*Sub]struct{}
	closed  bool
	bytes   int64 // the cost of the entries kept
	maxB    int64
	maxEvB  int
	// dropped is, for each run some of whose events were dropped, the seq
	// of its newest dropped event: a run none of whose events were dropped
	// is still whole, however much of the log before it is gone.
	dropped map[string]int64
}

// Budget bounds the events kept by many logs together (a server's every
// session). A log over its fair share of the budget — the budget over the
// number of logs — drops its own oldest events first, so one busy session
// cannot take the memory of the others, and the total stays near Max. Safe
// for concurrent use.
type Budget struct {
	Max int64 // the events kept by all its logs together
	// MaxBytes, if set, bounds the bytes they hold together (each event's
	// frame and its decoded strings).
	MaxBytes  int64
	kept      atomic.Int64
	keptBytes atomic.Int64
	logs      atomic.Int64
}

// KeptBytes returns the bytes the budget's logs hold now.
func (b *Budget) KeptBytes() int64 { return b.keptBytes.Load() }

// shareBytes is how many bytes one log may hold while the budget is full.
func (b *Budget) shareBytes() int64 {
	n := max(1, b.logs.Load())
	return max(minKeptBytes, b.MaxBytes/n)
}

// Kept returns how many events the budget's logs keep now.
func (b *Budget) Kept() int64 { return b.kept.Load() }

// share is how many events one log may keep while the budget is full.
func (b *Budget) share(min int) int {
	n := max(1, b.logs.Load())
	return max(min, int(b.Max/n))
}

// Config sizes a Log.
type Config struct {
	// MaxEvents is how many events are kept; older ones are dropped from
	// the front. Default 100,000.
	MaxEvents int
	// MaxBytes bounds the bytes the kept events hold (their frames and
	// their strings); older ones are dropped from the front. Default 16 MiB.
	MaxBytes int64
	// MaxEventBytes bounds one event as sent: a longer one has its longest
	// strings cut, each ending with a note of how many bytes were cut.
	// Default 32 KiB.
	MaxEventBytes int
	// SubscriberBuffer is how many events a subscriber may be behind before
	// it is dropped. Default 1,024.
	SubscriberBuffer int
	// Budget, if set, bounds the events this log and its siblings keep
	// together.
	Budget *Budget
	// TapFunc, if set, sees every event as it is kept, encoded as sent
	// (the event tap: tests check each against the protocol's schema). It
	// is called with the log's lock held and must not block.
	TapFunc func(encoded []byte)
}

// New returns an empty log; the first event gets sequence number 1.
func New(cfg Config) *Log {
	if cfg.MaxEvents <= 0 {
		cfg.MaxEvents = 100_000
	}
	if cfg.SubscriberBuffer <= 0 {
		cfg.SubscriberBuffer = 1024
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxEventBytes <= 0 {
		cfg.MaxEventBytes = DefaultMaxEventBytes
	}
	if cfg.Budget != nil {
		cfg.Budget.logs.Add(1)
	}
	return &Log{first: 1, next: 1, max: cfg.MaxEvents, subBuf: cfg.SubscriberBuffer, subs: map[*Sub]struct{}{}, dropped: map[string]int64{}, tap: cfg.TapFunc, budget: cfg.Budget, maxB: cfg.MaxBytes, maxEvB: cfg.MaxEventBytes}
}

// The defaults of Config's byte caps.
const (
	DefaultMaxBytes      = 16 << 20
	DefaultMaxEventBytes = 32 << 10
)

// minKept is how many events a log keeps however full its budget is: a
// whole run's, and some.
const minKept = 500

// minKeptBytes is how many bytes a log may hold however full its budget
// is: a whole run's events, each under its cap.
const minKeptBytes = 2 << 20

// trim drops the oldest entries beyond keep, and beyond keepBytes; l.mu
// must be held. The newest entry is always kept.
func (l *Log) trim(keep int, keepBytes int64) {
	over := max(0, len(l.entries)-keep)
	bytes := l.bytes
	for _, en := range l.entries[:over] {
		bytes -= en.cost
	}
	for over < len(l.entries)-1 && bytes > keepBytes {
		bytes -= l.entries[over].cost
		over++
	}
	if over <= 0 {
		return
	}
	for _, en := range l.entries[:over] {
		if en.Event.Run != "" {
			l.dropped[en.Event.Run] = en.Event.Seq
		}
	}
	clear(l.entries[:over])
	l.entries = l.entries[over:]
	l.first += int64(over)
	freed := l.bytes - bytes
	l.bytes = bytes
	if l.budget != nil {
		l.budget.kept.Add(-int64(over))
		l.budget.keptBytes.Add(-freed)
	}
}

// Trim drops this log's oldest events beyond its fair share of its budget,
// if the budget is over. It reports how many it dropped.
func (l *Log) Trim() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.budget
	if b == nil || (b.kept.Load() <= b.Max && (b.MaxBytes == 0 || b.keptBytes.Load() <= b.MaxBytes)) {
		return 0
	}
	n := len(l.entries)
	l.trim(l.shares())
	return n - len(l.entries)
}

// Kept returns how many events the log keeps now.
func (l *Log) Kept() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

// eventOverhead is what an event holds beyond twice its frame: its
// structs, pointers and slice headers (about 320 bytes for the events of
// real runs, measured), with room to spare.
const eventOverhead = 512

// Append numbers e, keeps it and hands it to every subscriber. A
// subscriber whose buffer is full is dropped with ErrSlow. It returns the
// numbered event.
func (l *Log) Append(e protocol.Event) protocol.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return e
	}
	e.Seq = l.next
	l.next++
	e.Text = narration(e.Text)
	e, ev := capEvent(e, l.maxEvB)
	if l.tap != nil {
		l.tap(ev)
	}
	frame := make([]byte, 0, len(ev)+28)
	frame = append(frame, `{"type":"event","event":`...)
	frame = append(frame, ev...)
	frame = append(frame, '}')
	// An event's strings are held twice, in the frame and in the event,
	// and the event's structs and pointers besides: twice the frame and
	// eventOverhead, at least the heap it holds
	// (TestCost_TheBytesALogCountsAreTheHeapItHolds).
	en := &Entry{Event: e, Frame: frame, cost: 2*int64(len(frame)) + eventOverhead}
	l.entries = append(l.entries, en)
	l.bytes += en.cost
	keep, keepBytes := l.max, l.maxB
	if b := l.budget; b != nil {
		b.kept.Add(1)
		b.keptBytes.Add(en.cost)
		if b.kept.Load() > b.Max || (b.MaxBytes > 0 && b.keptBytes.Load() > b.MaxBytes) {
			k, kb := l.shares()
			keep, keepBytes = min(keep, k), min(keepBytes, kb)
		}
	}
	l.trim(keep, keepBytes)
	for s := range l.subs {
		select {
		case s.c <- en:
		default:
			l.drop(s, ErrSlow)
		}
	}
	return e
}

// shares are the events and bytes this log may keep while its budget is
// over; l.budget must be set.
func (l *Log) shares() (int, int64) {
	kb := l.maxB
	if l.budget.MaxBytes > 0 {
		kb = min(kb, l.budget.shareBytes())
	}
	return min(l.max, l.budget.share(minKept)), kb
}

// Bytes returns the bytes the log's kept events hold.
func (l *Log) Bytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes
}

// drop ends a subscription; l.mu must be held.
func (l *Log) drop(s *Sub, why error) {
	if _, ok := l.subs[s]; !ok {
		return
	}
	delete(l.subs, s)
	s.err = why
	close(s.c)
}

// LastSeq returns the sequence number of the newest event, or 0.
func (l *Log) LastSeq() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// Since returns the kept events with a sequence number above after, of the
// given run ("" for all runs), at most limit of them (0: no limit). It
// returns ErrGone when events after `after` — of that run, when one is
// given — have been dropped already: a run whose events are all kept is
// given whole, whatever was dropped before it.
func (l *Log) Since(after int64, run string, limit int) ([]protocol.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if after < l.droppedLocked(run) {
		return nil, ErrGone
	}
	var out []protocol.Event
	for _, en := range l.entries[l.index(after):] {
		if run != "" && en.Event.Run != run {
			continue
		}
		out = append(out, en.Event)
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}

// Dropped returns the seq of the newest event no longer kept, of the given
// run ("" for the whole log), or 0 when none was dropped: Since(Dropped(run),
// run, …) gives every event of it still kept.
func (l *Log) Dropped(run string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.droppedLocked(run)
}

// droppedLocked is Dropped; l.mu must be held.
func (l *Log) droppedLocked(run string) int64 {
	if run == "" || l.closed {
		return l.first - 1
	}
	return l.dropped[run]
}

// index returns where the first event after seq is in l.entries.
func (l *Log) index(after int64) int {
	i := after + 1 - l.first
	switch {
	case i < 0:
		return 0
	case i > int64(len(l.entries)):
		return len(l.entries)
	}
	return int(i)
}

// Sub is one subscriber: C delivers every event after the backlog it was
// given, in order, until the subscription ends. Err then says why.
type Sub struct {
	C   <-chan *Entry
	c   chan *Entry
	log *Log
	err error
}

// Subscribe registers a subscriber for every event after the sequence
// number after, and returns the backlog — the kept events after it — to
// send first. Nothing is missed and nothing repeated between the backlog
// and C.
func (l *Log) Subscribe(after int64) (*Sub, []*Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, nil, ErrClosed
	}
	if after < 0 || after > l.next-1 {
		after = l.next - 1 // a client from the future (an old server's log) starts afresh from now
	}
	if after+1 < l.first {
		return nil, nil, ErrGone
	}
	backlog := append([]*Entry(nil), l.entries[l.index(after):]...)
	s := &Sub{c: make(chan *Entry, l.subBuf), log: l}
	s.C = s.c
	l.subs[s] = struct{}{}
	return s, backlog, nil
}

// Close ends the subscription. Safe to call more than once.
func (s *Sub) Close() {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	s.log.drop(s, ErrClosed)
}

// Err says why the subscription ended, once C is closed.
func (s *Sub) Err() error {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	return s.err
}

// Subscribers returns how many subscribers the log has.
func (l *Log) Subscribers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.subs)
}

// Close ends every subscription with ErrClosed; later appends are ignored.
// Its events are let go: nothing reads a closed log.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed && l.budget != nil {
		l.budget.kept.Add(-int64(len(l.entries)))
		l.budget.keptBytes.Add(-l.bytes)
		l.budget.logs.Add(-1)
	}
	if !l.closed {
		l.bytes = 0
	}
	if !l.closed {
		l.first += int64(len(l.entries))
		l.entries = nil
	}
	l.closed = true
	for s := range l.subs {
		l.drop(s, ErrClosed)
	}
}
