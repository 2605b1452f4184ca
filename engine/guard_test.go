package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine/internal/hook"
)

// TestGuards_EachIsExactlyOneClause shows that turning a guard off changes
// one visible clause of one statement, and leaves a comment in its place.
func TestGuards_EachIsExactlyOneClause(t *testing.T) {
	t.Parallel()
	now := time.Now()
	d := Delivery{JobID: 1, Epoch: 2, Owner: "o", Payload: []byte(`{}`)}
	statements := func(gs hook.Guards) []hook.Statement {
		return []hook.Statement{
			jobClaim("s", gs, "o", time.Second, now),
			leaseRenew("s", gs, 1, "o", 2, time.Second, now),
			jobComplete("s", gs, 1, "o", 2, []byte(`{}`)),
			jobFail("s", gs, 1, "o", 2, "why", 0),
			jobCompleteOutbox("s", gs, 1, "o", 2, []byte(`{}`), d),
			receiverDeliver("r", gs, d),
		}
	}
	clause := map[hook.Guard]string{
		hook.StatusCheck:    "AND status = 'running'",
		hook.OwnerCheck:     "AND owner = $",
		hook.EpochCheck:     "AND epoch = $",
		hook.EpochIncrement: "epoch = epoch + 1,",
		hook.ReceiverCheck:  "WHERE held.epoch <= EXCLUDED.epoch",
		hook.DBClock:        "lease_until = now() + ",
		hook.SkipLocked:     "SKIP LOCKED",
	}
	on := statements(0)
	for _, g := range hook.AllGuards() {
		off := statements(hook.Guards(0).Break(g))
		changed := 0
		for i := range on {
			if on[i].SQL == off[i].SQL {
				continue
			}
			changed++
			if !strings.Contains(on[i].SQL, clause[g]) {
				t.Errorf("%s on: %s lacks %q", g, on[i].Name, clause[g])
			}
			// Breaking g takes out exactly one clause: the statement keeps
			// any other use of the same words (the claim's end of spent jobs
			// passes over locked rows whatever skip-locked says).
			// The claim locks in two parts (the pending jobs, and those
			// whose lease ran out): skip-locked takes the words out of both.
			fewer := 1
			if g == hook.SkipLocked {
				fewer = 2
			}
			if n, m := liveCount(on[i].SQL, clause[g]), liveCount(off[i].SQL, clause[g]); m != n-fewer {
				t.Errorf("%s off: %s has %q %d times, and %d with the guard on; want %d fewer:\n%s", g, off[i].Name, clause[g], m, n, fewer, off[i].SQL)
			}
			if !strings.Contains(off[i].SQL, "("+g.String()+" off)") {
				t.Errorf("%s off: %s does not say the guard is off:\n%s", g, off[i].Name, off[i].SQL)
			}
		}
		want := 1
		if g == hook.StatusCheck || g == hook.OwnerCheck || g == hook.EpochCheck {
			want = 4 // renew, complete, fail and the outbox's complete share the compare-and-set
		}
		if g == hook.DBClock {
			want = 2 // the claim and the renewal read the clock
		}
		if changed != want {
			t.Errorf("%s changes %d statements, want %d", g, changed, want)
		}
	}
}

// liveCount counts the lines of sql that hold s outside a comment.
func liveCount(sql, s string) int {
	n := 0
	for _, line := range strings.Split(sql, "\n") {
		code, _, _ := strings.Cut(line, "--")
		if strings.Contains(code, s) {
			n++
		}
	}
	return n
}
