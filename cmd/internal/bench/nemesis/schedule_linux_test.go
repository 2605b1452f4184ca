package nemesis_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/fencelab/fencelab/cmd/internal/bench/nemesis"
	"github.com/fencelab/fencelab/server/run/child"
)

// TestSchedule_FreezesAtMostTwoAndThawsAll runs the nemesis over four real
// processes and watches their states in /proc while it runs: some are
// stopped (T), never more than two at once, each freeze lasts the lease
// plus 50 to 500 ms, and none is left stopped when Run returns.
func TestSchedule_FreezesAtMostTwoAndThawsAll(t *testing.T) {
	t.Parallel()
	var cmds []*exec.Cmd
	for range 4 {
		cmds = append(cmds, exec.Command("sleep", "60"))
	}
	g, err := nemesis.Start(cmds)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Kill()
	stopped := func() int {
		n := 0
		for i := range g.Len() {
			if child.State(g.Pid(i)) == 'T' {
				n++
			}
		}
		return n
	}
	const lease = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	done := make(chan nemesis.Stats, 1)
	go func() {
		st, err := nemesis.Schedule{Lease: lease, Seed: 1}.Run(ctx, g)
		if err != nil {
			t.Error(err)
		}
		done <- st
	}()
	most := 0
	for ctx.Err() == nil {
		most = max(most, stopped())
		time.Sleep(2 * time.Millisecond)
	}
	st := <-done
	if n := stopped(); n != 0 {
		t.Errorf("%d processes are still stopped after Run returned", n)
	}
	if most == 0 || most > 2 {
		t.Errorf("at most %d processes were seen stopped at once, want 1 or 2", most)
	}
	if st.MaxFrozen > 2 || len(st.Freezes) < 3 {
		t.Errorf("%d freezes, %d at most at once: want a few, and at most 2 at once", len(st.Freezes), st.MaxFrozen)
	}
	for _, f := range st.Freezes {
		if f.For < lease+50*time.Millisecond || f.For > lease+500*time.Millisecond {
			t.Errorf("a freeze of %v: want the lease %v plus 50 to 500 ms", f.For, lease)
		}
	}
}
