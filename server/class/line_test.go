package class_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/class"
	"github.com/fencelab/fencelab/server/sandbox"
)

// The line in Postgres, served by two pools as two instances would: a
// student has one check in line at a time (a second one waiting takes the
// first's place and statements); each is told its place; a check whose
// student is not on an instance is tried again until the instance that
// holds them plays it; and each check's report is kept exactly once.
func TestLine_OnePerStudentPlacesAndKeptOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := open(t, class.Config{})
	c, _, err := s.Create(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	ada, _, err := s.Join(ctx, c.Code, "Ada", "")
	if err != nil {
		t.Fatal(err)
	}
	bea, _, err := s.Join(ctx, c.Code, "Bea", "")
	if err != nil {
		t.Fatal(err)
	}

	// Instance "here" holds Ada and Bea; instance "there" holds nobody.
	var mu sync.Mutex
	played := map[string][]sandbox.Solution{}
	elsewhere := 0
	line := func(holds bool) *class.Line {
		l, err := s.OpenLine(ctx, class.LineConfig{Owner: engine.UniqueOwner("test"), Retry: 100 * time.Millisecond,
			Play: func(ctx context.Context, tu class.Turn) (class.Played, error) {
				mu.Lock()
				defer mu.Unlock()
				if tu.Class != c.ID {
					return class.Played{}, class.ErrElsewhere // another test's class
				}
				if !holds {
					elsewhere++
					return class.Played{}, class.ErrElsewhere
				}
				played[tu.Student] = append(played[tu.Student], tu.Solution)
				rep := report(tu.Solution == sandbox.Ours())
				return class.Played{Report: &rep}, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	here, there := line(true), line(false)

	wrong := sandbox.Start()
	first, err := here.Submit(ctx, c.ID, ada.ID, wrong, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	again, err := here.Submit(ctx, c.ID, ada.ID, sandbox.Ours(), time.Second)
	if err != nil || again != first {
		t.Fatalf("a second check of Ada's while her first waits: job %d, %v; want her first's, %d", again, err, first)
	}
	beas, err := there.Submit(ctx, c.ID, bea.ID, wrong, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if p, done, err := here.Place(ctx, beas); err != nil || done || p < 2 {
		t.Fatalf("Bea's place behind Ada's: %d %v %v", p, done, err)
	}

	var wg sync.WaitGroup
	for _, l := range []*class.Line{there, here} {
		wg.Go(func() { _ = l.Run(ctx) })
	}
	for _, job := range []int64{first, beas} {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if _, done, err := here.Place(ctx, job); err != nil || done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %d did not end", job)
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(played[ada.ID]) != 1 || played[ada.ID][0] != sandbox.Ours() {
		t.Errorf("Ada's checks played: %d, want one, with the statements she sent last", len(played[ada.ID]))
	}
	if len(played[bea.ID]) != 1 {
		t.Errorf("Bea's checks played: %d, want one", len(played[bea.ID]))
	}
	b, err := s.Board(context.Background(), c, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range b.Students {
		if r.Checks != 1 {
			t.Errorf("%s has %d checks kept, want 1", r.Name, r.Checks)
		}
	}
	if b.Summary.Passing != 1 {
		t.Errorf("passing %d, want Ada's alone", b.Summary.Passing)
	}
	t.Logf("checks tried on the instance that did not hold the student: %d", elsewhere)
}
