package class_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/class"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
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
	c, students := classOf(t, s, "Ada", "Bea")
	ada, bea := students[0], students[1]

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

// A check put in line by an older server carries its statements in the
// job (no row of the student's says what to play): it is played as it is,
// and kept; a check whose student is gone completes with nothing kept.
func TestLine_ACheckFromAnOlderServerIsPlayed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := open(t, class.Config{})
	c, students := classOf(t, s, "Ada")
	ada := students[0]
	var mu sync.Mutex
	var played []sandbox.Solution
	l, err := s.OpenLine(ctx, class.LineConfig{Owner: engine.UniqueOwner("test"), Retry: 100 * time.Millisecond,
		Play: func(ctx context.Context, tu class.Turn) (class.Played, error) {
			if tu.Class != c.ID {
				return class.Played{}, class.ErrElsewhere // another test's class
			}
			mu.Lock()
			defer mu.Unlock()
			played = append(played, tu.Solution)
			rep := report(tu.Solution == sandbox.Ours())
			return class.Played{Report: &rep}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	q, err := engine.NewQueue(pgtest.Pool(t), engine.QueueConfig{Schema: "fencelab_checkline"})
	if err != nil {
		t.Fatal(err)
	}
	old, err := json.Marshal(map[string]any{"class": c.ID, "student": ada.ID, "solution": sandbox.Ours(), "lease_ms": 1000})
	if err != nil {
		t.Fatal(err)
	}
	job, err := q.Insert(ctx, old, 3)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := q.Insert(ctx, []byte(`{"class":"`+c.ID+`","student":"c-nobody"}`), 3)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	for _, id := range []int64{job, gone} {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if _, end, err := l.Place(ctx, id); err != nil || end {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %d did not end", id)
			}
		}
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(played) != 1 || played[0] != sandbox.Ours() {
		t.Errorf("played %d checks, want the older server's one with its statements", len(played))
	}
	b, err := s.Board(context.Background(), c, false)
	if err != nil || len(b.Students) != 1 || b.Students[0].Checks != 1 {
		t.Errorf("the board: %+v %v, want Ada's one check kept", b, err)
	}
}

// classOf opens a class in s with a student of each name.
func classOf(t *testing.T, s *class.Store, names ...string) (class.Class, []class.Student) {
	t.Helper()
	c, _, err := s.Create(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var sts []class.Student
	for _, n := range names {
		st, _, err := s.Join(context.Background(), c.Code, n, "")
		if err != nil {
			t.Fatal(err)
		}
		sts = append(sts, st)
	}
	return c, sts
}
