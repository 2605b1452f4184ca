package inbox_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/run/inbox"
)

// recorder is an owner whose orders are ints: it notes each it carries
// out, and how many it carries out at once.
type recorder struct {
	mu      sync.Mutex
	done    []int
	now     int
	most    int
	block   chan struct{} // order 0 waits for it
	started chan struct{} // closed when order 0 begins
}

func newRecorder() *recorder {
	return &recorder{block: make(chan struct{}), started: make(chan struct{})}
}

func (r *recorder) carry(ctx context.Context, n int) (int, error) {
	r.mu.Lock()
	r.now++
	r.most = max(r.most, r.now)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.now--
		r.done = append(r.done, n)
		r.mu.Unlock()
	}()
	switch n {
	case 0:
		close(r.started)
		<-r.block
	case -1:
		panic("an order that panics")
	}
	return n * 10, nil
}

// Orders are carried out one at a time, in the order they came, each
// caller answered with its own reply; while one is carried out, a caller
// that gives up is answered at once and its order is skipped; beyond
// MaxWaiting the line refuses at once as busy; a panic is its caller's
// Internal error and the line goes on; and an idle inbox keeps no
// goroutine.
func TestInbox_OneAtATimeInOrderBoundedAndSkipsTheGivenUp(t *testing.T) {
	before := runtime.NumGoroutine()
	r := newRecorder()
	in := inbox.New("the test's owner", r.carry)
	ctx := context.Background()

	first := make(chan error, 1)
	go func() { _, err := in.Do(ctx, "zero", 0); first <- err }()
	<-r.started

	// A caller that gives up while order 0 holds the line.
	gctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := in.Do(gctx, "given up", 99); fault.CodeOf(err) != fault.Unavailable {
		t.Fatalf("a caller that gave up: %v, want an Unavailable fault", err)
	}

	// The line fills, in order, with the given-up order still in it.
	type answer struct {
		n   int
		res int
		err error
	}
	answers := make(chan answer, 2*inbox.MaxWaiting)
	var wg sync.WaitGroup
	for n := 1; n < inbox.MaxWaiting; n++ {
		for in.Waiting() != n { // each joins after the one before
			time.Sleep(time.Millisecond)
		}
		wg.Go(func() {
			res, err := in.Do(ctx, "order", n)
			answers <- answer{n, res, err}
		})
	}
	for in.Waiting() != inbox.MaxWaiting {
		time.Sleep(time.Millisecond)
	}
	bctx, bcancel := context.WithTimeout(ctx, time.Second)
	defer bcancel()
	if _, err := in.Do(bctx, "one too many", 1000); fault.CodeOf(err) != fault.Busy {
		t.Fatalf("an order beyond %d waiting: %v, want a Busy fault", inbox.MaxWaiting, err)
	}
	select {
	case a := <-answers:
		t.Fatalf("order %d was answered while order 0 held the line", a.n)
	case <-time.After(100 * time.Millisecond):
	}

	close(r.block)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.err != nil || a.res != a.n*10 {
			t.Errorf("order %d: %d, %v; want %d", a.n, a.res, a.err, a.n*10)
		}
	}
	r.mu.Lock()
	done, most := append([]int(nil), r.done...), r.most
	r.mu.Unlock()
	want := []int{0}
	for n := 1; n < inbox.MaxWaiting; n++ {
		want = append(want, n)
	}
	if len(done) != len(want) {
		t.Fatalf("carried out %v, want %v (the given-up 99 and the refused 1000 never)", done, want)
	}
	for i := range want {
		if done[i] != want[i] {
			t.Fatalf("carried out %v, want %v: in the order they came", done, want)
		}
	}
	if most != 1 {
		t.Errorf("%d orders were carried out at once, want 1", most)
	}

	// A panic is its caller's error; the line goes on.
	if _, err := in.Do(ctx, "panics", -1); fault.CodeOf(err) != fault.Internal || errors.Is(err, context.Canceled) {
		t.Fatalf("an order that panicked: %v, want an Internal fault", err)
	}
	if res, err := in.Do(ctx, "after", 7); err != nil || res != 70 {
		t.Fatalf("an order after a panic: %d, %v", res, err)
	}

	// Idle, it keeps no goroutine.
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after the line emptied, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}
