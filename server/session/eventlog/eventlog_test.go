package eventlog_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/session/eventlog"
)

func ev(i int) protocol.Event {
	return protocol.Event{Kind: protocol.KindNote, Text: fmt.Sprint(i), Run: "r1"}
}

func TestLog_NumbersKeepsAndFiltersEvents(t *testing.T) {
	l := eventlog.New(eventlog.Config{})
	for i := range 5 {
		if e := l.Append(ev(i)); e.Seq != int64(i+1) {
			t.Fatalf("event %d got seq %d", i, e.Seq)
		}
	}
	l.Append(protocol.Event{Kind: protocol.KindNote, Run: "r2"})
	got, err := l.Since(2, "r1", 0)
	if err != nil || len(got) != 3 || got[0].Seq != 3 {
		t.Fatalf("Since(2, r1) = %v, %v", got, err)
	}
	if got, _ := l.Since(0, "", 2); len(got) != 2 {
		t.Fatalf("limit ignored: %d", len(got))
	}
	if got, _ := l.Since(6, "", 0); len(got) != 0 {
		t.Fatalf("Since(last) = %v", got)
	}
}

func TestLog_DropsOldEventsAndSaysSo(t *testing.T) {
	l := eventlog.New(eventlog.Config{MaxEvents: 3})
	for i := range 10 {
		l.Append(ev(i))
	}
	if _, err := l.Since(2, "", 0); !errors.Is(err, eventlog.ErrGone) {
		t.Fatalf("Since a dropped seq = %v, want ErrGone", err)
	}
	if got, err := l.Since(7, "", 0); err != nil || len(got) != 3 || got[0].Seq != 8 {
		t.Fatalf("Since(7) = %v, %v", got, err)
	}
	if _, _, err := l.Subscribe(1); !errors.Is(err, eventlog.ErrGone) {
		t.Fatalf("Subscribe to dropped events = %v", err)
	}
}

// TestLog_ResumeHasNoGapAndNoDuplicate appends from several goroutines
// while subscribers come and go, resuming from the last seq they saw; each
// must see every number exactly once, in order.
func TestLog_ResumeHasNoGapAndNoDuplicate(t *testing.T) {
	l := eventlog.New(eventlog.Config{SubscriberBuffer: 4}) // tiny: subscribers get dropped often
	const writers, each = 4, 2000
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				l.Append(ev(i))
			}
		}()
	}
	results := make(chan []int64, 3)
	for range 3 {
		go func() {
			var seen []int64
			last := int64(0)
			for last < writers*each {
				s, backlog, err := l.Subscribe(last)
				if err != nil {
					t.Error(err)
					break
				}
				for _, en := range backlog {
					seen = append(seen, en.Event.Seq)
					last = en.Event.Seq
				}
				for last < writers*each {
					en, ok := <-s.C
					if !ok {
						break // dropped as slow: resume
					}
					seen = append(seen, en.Event.Seq)
					last = en.Event.Seq
					if len(seen)%97 == 0 {
						break // drop the socket now and then
					}
				}
				s.Close()
			}
			results <- seen
		}()
	}
	wg.Wait()
	for range 3 {
		seen := <-results
		for i, s := range seen {
			if s != int64(i+1) {
				t.Fatalf("subscriber saw seq %d at position %d: a gap or a duplicate", s, i)
			}
		}
		if len(seen) != writers*each {
			t.Fatalf("subscriber saw %d events, want %d", len(seen), writers*each)
		}
	}
}

func TestLog_SlowSubscriberIsDroppedOthersKeepUp(t *testing.T) {
	l := eventlog.New(eventlog.Config{SubscriberBuffer: 8})
	slow, _, _ := l.Subscribe(0)
	fast, _, _ := l.Subscribe(0)
	for i := range 100 {
		l.Append(ev(i))
		// The fast one reads each event as it comes; the slow one never does.
		if en, ok := <-fast.C; !ok || en.Event.Seq != int64(i+1) {
			t.Fatalf("fast subscriber: event %d missing (%v)", i+1, fast.Err())
		}
	}
	n := 0
	for range slow.C {
		n++
	}
	if n != 8 || !errors.Is(slow.Err(), eventlog.ErrSlow) {
		t.Fatalf("slow subscriber: %d events then %v; want 8 then ErrSlow", n, slow.Err())
	}
	fast.Close()
	fast.Close()
	if l.Subscribers() != 0 {
		t.Fatalf("%d subscribers left", l.Subscribers())
	}
}

func TestLog_CloseEndsEverySubscription(t *testing.T) {
	l := eventlog.New(eventlog.Config{})
	s, _, _ := l.Subscribe(0)
	l.Close()
	if _, ok := <-s.C; ok || !errors.Is(s.Err(), eventlog.ErrClosed) {
		t.Fatalf("after Close: %v", s.Err())
	}
	if _, _, err := l.Subscribe(0); !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("Subscribe after Close = %v", err)
	}
}

// BenchmarkAppend_FanOut measures one Append reaching many subscribers.
func BenchmarkAppend_FanOut(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprint("subscribers=", n), func(b *testing.B) {
			l := eventlog.New(eventlog.Config{SubscriberBuffer: b.N + 1})
			for range n {
				l.Subscribe(0)
			}
			e := ev(1)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				l.Append(e)
			}
		})
	}
}

// TestBudget_OneBusyLogCannotTakeTheOthersMemory: fifty logs under one
// budget of 30,000 events; the others append 500 each, then one appends
// 100,000. The total stays within the budget, the quiet logs keep every
// event, and the heap grows by about what the kept events weigh, not by
// what was appended.
func TestBudget_OneBusyLogCannotTakeTheOthersMemory(t *testing.T) {
	b := &eventlog.Budget{Max: 30_000}
	logs := make([]*eventlog.Log, 50)
	for i := range logs {
		logs[i] = eventlog.New(eventlog.Config{MaxEvents: 100_000, Budget: b})
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	big := ev(1)
	big.Text = strings.Repeat("x", 2000) // about the weight of a real event
	for i := 1; i < len(logs); i++ {
		for range 500 {
			logs[i].Append(big)
		}
	}
	for range 100_000 {
		logs[0].Append(big)
		if k := b.Kept(); k > b.Max+1 {
			t.Fatalf("the budget keeps %d events, over its %d", k, b.Max)
		}
	}
	for i := 1; i < len(logs); i++ {
		if n := logs[i].Kept(); n != 500 {
			t.Fatalf("quiet log %d keeps %d of its 500 events", i, n)
		}
	}
	if n := logs[0].Kept(); n > 30_000-49*500+1 {
		t.Fatalf("the busy log keeps %d events, more than the budget leaves it", n)
	}
	if _, err := logs[0].Since(0, "", 0); !errors.Is(err, eventlog.ErrGone) {
		t.Fatalf("the busy log's first events are still there: %v", err)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	perEvent := 2 * 2100 // the event's text and its encoded frame
	if limit := (b.Max + 1) * int64(perEvent) * 2; grew > limit {
		t.Fatalf("the heap grew by %d MB for %d kept events (at most %d MB expected)", grew>>20, b.Kept(), limit>>20)
	}
	t.Logf("kept %d events of %d appended; the heap grew by %.1f MB", b.Kept(), 49*500+100_000, float64(grew)/(1<<20))
	for _, l := range logs {
		l.Close()
	}
	if k := b.Kept(); k != 0 {
		t.Fatalf("closed logs still count %d events", k)
	}
}

// TestLog_AWholeRunIsGivenWholeAfterOthersAreDropped: once the log drops
// its first events, a run none of whose events were dropped is still given
// whole from 0, and Dropped says how far each run (and the log) is gone.
func TestLog_AWholeRunIsGivenWholeAfterOthersAreDropped(t *testing.T) {
	l := eventlog.New(eventlog.Config{MaxEvents: 4})
	for i := range 3 {
		l.Append(protocol.Event{Kind: protocol.KindNote, Text: fmt.Sprint(i), Run: "r1"}) // seq 1..3
	}
	for i := range 3 {
		l.Append(protocol.Event{Kind: protocol.KindNote, Text: fmt.Sprint(i), Run: "r2"}) // seq 4..6; 1 and 2 dropped
	}
	if got, err := l.Since(0, "r2", 0); err != nil || len(got) != 3 || got[0].Seq != 4 {
		t.Fatalf("Since(0, r2) of a run that is all kept = %v, %v", got, err)
	}
	if _, err := l.Since(0, "r1", 0); !errors.Is(err, eventlog.ErrGone) {
		t.Fatalf("Since(0, r1) of a run half dropped = %v, want ErrGone", err)
	}
	if _, err := l.Since(0, "", 0); !errors.Is(err, eventlog.ErrGone) {
		t.Fatalf("Since(0) of a trimmed log = %v, want ErrGone", err)
	}
	if d := l.Dropped("r1"); d != 2 {
		t.Fatalf("Dropped(r1) = %d, want 2", d)
	}
	if d := l.Dropped("r2"); d != 0 {
		t.Fatalf("Dropped(r2) = %d, want 0", d)
	}
	if d := l.Dropped(""); d != 2 {
		t.Fatalf("Dropped() = %d, want 2", d)
	}
	if got, err := l.Since(l.Dropped("r1"), "r1", 0); err != nil || len(got) != 1 || got[0].Seq != 3 {
		t.Fatalf("Since(Dropped(r1), r1) = %v, %v", got, err)
	}
	l.Close()
	if _, err := l.Since(0, "r2", 0); !errors.Is(err, eventlog.ErrGone) {
		t.Fatalf("Since(0, r2) of a closed log = %v, want ErrGone", err)
	}
}

// TestLog_AnEventOverItsCapIsCutAndSaysByHowMuch: a 2 MiB string in an
// event is cut, the event still decodes as the same kind, its frame and
// its kept event agree, and the cut string says how many bytes went.
func TestLog_AnEventOverItsCapIsCutAndSaysByHowMuch(t *testing.T) {
	l := eventlog.New(eventlog.Config{MaxEventBytes: 16 << 10})
	big := strings.Repeat("x", 2<<20)
	e := protocol.Event{Kind: protocol.KindSQL, Run: "r1", Actor: "A", SQL: &protocol.SQLEvent{Op: protocol.OpClaim, Result: protocol.ResultOK, Owner: "A" + big}}
	got := l.Append(e)
	sub, backlog, err := l.Subscribe(0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	frame := backlog[0].Frame
	if len(frame) > 16<<10+64 {
		t.Fatalf("the frame holds %d bytes, over the 16 KiB cap", len(frame))
	}
	if got.Kind != protocol.KindSQL || got.SQL == nil || !strings.HasPrefix(got.SQL.Owner, "Axxx") {
		t.Fatalf("the cut event is %+v", got)
	}
	if !strings.HasSuffix(got.SQL.Owner, " more bytes]") {
		t.Fatalf("the cut owner ends %q, want a note of how much was cut", got.SQL.Owner[len(got.SQL.Owner)-40:])
	}
	cut := got.SQL.Owner[strings.LastIndex(got.SQL.Owner, "[cut: ")+6:]
	var n int
	fmt.Sscanf(cut, "%d", &n)
	if kept := strings.Index(got.SQL.Owner, "…"); kept+n != len(e.SQL.Owner) {
		t.Fatalf("kept %d bytes and says %d were cut, of %d", kept, n, len(e.SQL.Owner))
	}
	if !strings.Contains(string(frame), "more bytes]") {
		t.Fatal("the frame sent is not the event kept")
	}
	if small := l.Append(ev(1)); small.Text != "1" {
		t.Fatalf("a small event changed: %+v", small)
	}
}

// TestLog_KeepsItsBytesUnderItsCap: a log of 1 MiB given 20 MiB of big
// events keeps at most 1 MiB of them (and the newest), and a budget of
// bytes bounds many logs together.
func TestLog_KeepsItsBytesUnderItsCap(t *testing.T) {
	big := strings.Repeat("y", 15<<10)
	l := eventlog.New(eventlog.Config{MaxBytes: 1 << 20})
	for i := range 700 {
		l.Append(protocol.Event{Kind: protocol.KindNote, Run: "r1", Text: fmt.Sprint(i) + big})
	}
	if b := l.Bytes(); b > 1<<20 || b == 0 {
		t.Fatalf("the log holds %d bytes, want at most 1 MiB", b)
	}
	if got, _ := l.Since(l.Dropped(""), "", 0); len(got) == 0 || !strings.HasPrefix(got[len(got)-1].Text, "699") {
		t.Fatal("the newest event is not kept")
	}
	b := &eventlog.Budget{Max: 1 << 30, MaxBytes: 8 << 20}
	var logs []*eventlog.Log
	for range 4 {
		logs = append(logs, eventlog.New(eventlog.Config{Budget: b}))
	}
	for i := range 2000 {
		logs[i%4].Append(protocol.Event{Kind: protocol.KindNote, Text: big})
	}
	if kb := b.KeptBytes(); kb > 8<<20+64<<10 {
		t.Fatalf("four logs hold %d bytes together, over the budget's 8 MiB", kb)
	}
	var sum int64
	for _, l := range logs {
		sum += l.Bytes()
		l.Close()
	}
	if b.KeptBytes() != 0 || sum == 0 {
		t.Fatalf("after Close the budget holds %d bytes (the logs held %d)", b.KeptBytes(), sum)
	}
}
