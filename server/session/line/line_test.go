package line

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/fault"
)

// places records what each ticket was told.
type places struct {
	mu  sync.Mutex
	got map[string][]int
}

func (p *places) told(name string) func(int) {
	return func(n int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.got[name] = append(p.got[name], n)
	}
}

func (p *places) last(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if g := p.got[name]; len(g) > 0 {
		return g[len(g)-1]
	}
	return 0
}

func turnCame(t *Ticket) bool { return isClosed(t.ready) }

// TestLine_OneAddressFloodWaitsBehindItselfAndOthersGoFirst: with room for
// one check, an address that sends five waits one at a time, and a check
// from another address that came after all five goes next; each waiting
// check is told its place as the line moves.
func TestLine_OneAddressFloodWaitsBehindItselfAndOthersGoFirst(t *testing.T) {
	l := New(1)
	p := &places{got: map[string][]int{}}
	var flood []*Ticket
	for i := range 5 {
		flood = append(flood, l.Join("203.0.113.7", nil, p.told("a"+string(rune('0'+i)))))
	}
	b := l.Join("198.51.100.9", nil, p.told("b"))
	if !turnCame(flood[0]) || turnCame(flood[1]) || turnCame(b) {
		t.Fatal("the first check of the flood should play, and no other")
	}
	if got := p.last("b"); got != 1 {
		t.Fatalf("the other address's check is told place %d, want 1 (next): the flood's second is in the second round", got)
	}
	if got := p.last("a1"); got != 2 {
		t.Fatalf("the flood's second check is told place %d, want 2", got)
	}
	if got := p.last("a4"); got != 5 {
		t.Fatalf("the flood's last check is told place %d, want 5", got)
	}
	l.Done(flood[0])
	if !turnCame(b) || turnCame(flood[1]) {
		t.Fatal("after the flood's first, the other address's check should play")
	}
	if got := p.last("a1"); got != 1 {
		t.Fatalf("the flood's second is told place %d, want 1 once the other's turn came", got)
	}
	l.Done(b)
	for i := 1; i < 5; i++ {
		if !turnCame(flood[i]) {
			t.Fatalf("the flood's check %d did not get its turn in order", i)
		}
		if i < 4 && turnCame(flood[i+1]) {
			t.Fatalf("two checks of one address play at once")
		}
		l.Done(flood[i])
	}
	if l.Len() != 0 || l.playing != 0 {
		t.Fatalf("the line holds %d and plays %d after all ended", l.Len(), l.playing)
	}
}

// TestLine_AReplacedCheckKeepsItsPlaceAndTheOldOneIsToldSo: a session's
// newer check takes its older one's place; the older one's wait ends with
// a conflict; a check that gives up leaves no trace; a turn that came as
// it gave up is given back.
func TestLine_AReplacedCheckKeepsItsPlaceAndTheOldOneIsToldSo(t *testing.T) {
	l := New(1)
	busy := l.Join("x", nil, nil)
	first := l.Join("a", nil, nil)
	second := l.Join("b", nil, nil)
	errc := make(chan error, 1)
	go func() { errc <- l.Wait(context.Background(), first, time.Minute) }()
	again := l.Join("a", first, nil)
	var fe *fault.Error
	if err := <-errc; !errors.As(err, &fe) || fe.Code != fault.Conflict {
		t.Fatalf("the replaced check's wait: %v, want a conflict", err)
	}
	l.Done(busy)
	if !turnCame(again) || turnCame(second) {
		t.Fatal("the newer check did not keep its older one's place, ahead of b")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Wait(ctx, second, time.Minute); err == nil {
		t.Fatal("a cancelled wait returned no error")
	}
	if err := l.Wait(context.Background(), l.Join("c", nil, nil), 10*time.Millisecond); !errors.As(err, &fe) || fe.Code != fault.Busy {
		t.Fatalf("a wait past its time: %v, want busy", err)
	}
	l.Done(again)
	if l.Len() != 0 || l.playing != 0 {
		t.Fatalf("the line holds %d and plays %d", l.Len(), l.playing)
	}
}

// TestLine_AnAddressPlaysOneAtATimeWithRoomToSpare: with room for two,
// an address's second check still waits for its first, while another
// address's check takes the room.
func TestLine_AnAddressPlaysOneAtATimeWithRoomToSpare(t *testing.T) {
	l := New(2)
	a1, a2 := l.Join("a", nil, nil), l.Join("a", nil, nil)
	if !turnCame(a1) || turnCame(a2) {
		t.Fatal("an address's second check played beside its first")
	}
	b := l.Join("b", nil, nil)
	if !turnCame(b) {
		t.Fatal("another address's check did not take the room left")
	}
	l.Done(a1)
	if !turnCame(a2) {
		t.Fatal("the address's second check did not play after its first")
	}
	l.Done(a2)
	l.Done(b)
}

// TestLine_ACheckPastItsYouthLeavesItsSlot: with room for one check, the
// next address's check starts once the first has played YoungFor, not
// when the first ends; and no more than three times the room play at once.
func TestLine_ACheckPastItsYouthLeavesItsSlot(t *testing.T) {
	l := New(1)
	start := time.Now()
	a := l.Join("203.0.113.1", nil, nil)
	b := l.Join("203.0.113.2", nil, nil)
	if !turnCame(a) || turnCame(b) {
		t.Fatal("the first check should play, and the second wait")
	}
	select {
	case <-b.ready:
		if waited := time.Since(start); waited < YoungFor-50*time.Millisecond {
			t.Fatalf("the second check started after %v, before the first had played %v", waited, YoungFor)
		}
		if w := b.Waited(); w < YoungFor-50*time.Millisecond || w > time.Since(start) {
			t.Fatalf("the second check says it waited %v in line, not about %v", w, YoungFor)
		}
		if w := a.Waited(); w > time.Since(start) || w < 0 {
			t.Fatalf("the first check says it waited %v, not next to nothing", w)
		}
	case <-time.After(YoungFor + 10*time.Second):
		t.Fatalf("the second check did not start when the first had played %v", YoungFor)
	}
	c := l.Join("203.0.113.3", nil, nil)
	if turnCame(c) {
		t.Fatal("a third check started while the second was young: one slot is one young check")
	}
	l.grown(b)
	if !turnCame(c) {
		t.Fatal("the third check did not start when the second grew")
	}
	d := l.Join("203.0.113.4", nil, nil)
	l.grown(c)
	if turnCame(d) {
		t.Fatal("a fourth check played beside three: at most three times the room play at once")
	}
	l.Done(a)
	if !turnCame(d) {
		t.Fatal("the fourth check did not start when the first was done")
	}
	for _, x := range []*Ticket{b, c, d} {
		l.Done(x)
	}
	if l.young != 0 || l.playing != 0 {
		t.Fatalf("all done, the line counts %d young and %d playing", l.young, l.playing)
	}
}
