package judge_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/labtest"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

var (
	at      = labtest.At
	payload = labtest.Payload
)

func i64(v int64) *int64 { return &v }

func tm(t time.Time) *time.Time { return &t }

func decision(seq int64, worker string, epoch int64, d engine.Decision, prev *int64) engine.DecisionRecord {
	return engine.DecisionRecord{Seq: seq, JobID: 1, Epoch: epoch, Owner: "worker-" + strings.ToLower(worker), Payload: payload(worker), Decision: d, PrevEpoch: prev, At: at(int(seq))}
}

func invariants(vs []protocol.Violation) []protocol.Invariant {
	out := []protocol.Invariant{}
	for _, v := range vs {
		out = append(out, v.Invariant)
	}
	return out
}

func TestCheck_TheFencedStoryBreaksNothing(t *testing.T) {
	h := labtest.NewHistory()
	h.Claim(10, "A", 1, 1000)
	h.Claim(1100, "B", 2, 1000) // A's lease ran out at 1010
	h.Complete(1500, "B")
	ds := []engine.DecisionRecord{decision(1, "A", 1, engine.AcceptedFirst, nil), decision(2, "B", 2, engine.AcceptedNewer, i64(1))}
	held := &engine.Held{JobID: 1, Epoch: 2, Payload: payload("B")}
	if vs := judge.Violations(h.Recs, ds, held); len(vs) != 0 {
		t.Fatalf("the correct build's story breaks %v", vs)
	}
}

func TestCheck_EachInvariant(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func() ([]protocol.HistoryRecord, []engine.DecisionRecord, *engine.Held)
		want  []protocol.Invariant
		// guards must be among the violation's guards (what let it happen).
		guards playground.Guard
	}{
		{"a zombie's late commit lands", func() ([]protocol.HistoryRecord, []engine.DecisionRecord, *engine.Held) {
			h := labtest.NewHistory()
			h.Claim(10, "A", 1, 1000)
			h.Claim(1100, "B", 2, 1000)
			h.Complete(1200, "A")
			return h.Recs, nil, nil
		}, []protocol.Invariant{protocol.InvStaleWrite, protocol.InvRowLastOwner}, playground.EpochCheck},
		{"a holder's late commit lands after its job was ended", func() ([]protocol.HistoryRecord, []engine.DecisionRecord, *engine.Held) {
			h := labtest.NewHistory()
			h.Claim(10, "A", 1, 1000)
			h.Change("expire", 1100, "B", "failed", 2, nil, nil) // B's claim found A's last attempt spent
			h.Complete(1200, "A")                                // status and epoch checks broken: it lands
			return h.Recs, nil, nil
		}, []protocol.Invariant{protocol.InvStaleWrite}, playground.StatusCheck},
		{"a late heartbeat lands", func() ([]protocol.HistoryRecord, []engine.DecisionRecord, *engine.Held) {
			h := labtest.NewHistory()
			h.Claim(10, "A", 1, 1000)
			h.Claim(1100, "B", 2, 1000)
			h.Change("renew", 1150, "A", "running", 2, tm(at(2150)), nil)
			h.Complete(1500, "B")
			return h.Recs, nil, nil
		}, []protocol.Invariant{protocol.InvStaleWrite}, playground.OwnerCheck},
		{"two claims share a token", func() ([]protocol.HistoryRecord, []engine.DecisionRecord, *engine.Held) {
			h := labtest.NewHistory()
			h.Claim(10, "A", 0, 1000)
			h.Claim(1100, "B", 0, 1000)
			h.Complete(1500, "B")
			return h.Recs, nil, nil
		}, []protocol.Invariant{protocol.InvEpochUnique}, playground.EpochIncrement},
		{"a live lease is taken", func() ([]protocol.HistoryRecord, []engine.DecisionRecord, *engine.Held) {
			h := labtest.NewHistory()
			h.Claim(10, "A", 1, 5000)
			h.Claim(100, "B", 2, 5000)
			h.Complete(200, "B")
			return h.Recs, nil, nil
		}, []protocol.Invariant{protocol.InvLeaseRespected}, playground.DBClock},
		{"the receiver goes backwards", func() ([]protocol.HistoryRecord, []engine.DecisionRecord, *engine.Held) {
			h := labtest.NewHistory()
			h.Claim(10, "A", 1, 1000)
			h.Claim(1100, "B", 2, 1000)
			h.Complete(1200, "B")
			ds := []engine.DecisionRecord{decision(1, "B", 2, engine.AcceptedFirst, nil), decision(2, "A", 1, engine.AcceptedOlder, i64(2))}
			return h.Recs, ds, &engine.Held{JobID: 1, Epoch: 1, Payload: payload("A")}
		}, []protocol.Invariant{protocol.InvReceiverLastOwner, protocol.InvReceiverMonotonic}, playground.ReceiverCheck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := judge.Violations(tc.build())
			if got := invariants(vs); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Check = %v, want %v (ranked)", got, tc.want)
			}
			found := false
			for _, g := range vs[0].Guards {
				found = found || g == tc.guards
			}
			if !found {
				t.Errorf("%s: guards %v lack %s", vs[0].Invariant, vs[0].Guards, tc.guards)
			}
			for _, v := range vs {
				if v.Text == "" || strings.Contains(v.Text, "%!") || v.JobID != 1 {
					t.Errorf("violation %+v: want a sentence about job 1", v)
				}
			}
		})
	}
}

func TestCheck_SaysEachViolationOnce(t *testing.T) {
	h := labtest.NewHistory()
	h.Claim(10, "A", 1, 1000)
	h.Claim(1100, "B", 2, 1000)
	h.Change("renew", 1150, "A", "running", 2, tm(at(2150)), nil)
	h.Change("renew", 1160, "A", "running", 2, tm(at(2160)), nil)
	h.Complete(1500, "B")
	if vs := judge.Violations(h.Recs, nil, nil); len(vs) != 1 {
		t.Fatalf("two late heartbeats of one worker are one violation, got %v", invariants(vs))
	}
}

func TestRank_PlainestFirst(t *testing.T) {
	vs := []protocol.Violation{
		{Invariant: protocol.InvFinished},
		{Invariant: protocol.InvStaleWrite, Op: "renew"},
		{Invariant: protocol.InvEpochUnique},
		{Invariant: protocol.InvLeaseRespected},
		{Invariant: protocol.InvReceiverMonotonic},
		{Invariant: protocol.InvReceiverLastOwner},
		{Invariant: protocol.InvRowLastOwner},
		{Invariant: protocol.InvStaleWrite, Op: "complete"},
	}
	judge.Rank(vs)
	var got []string
	for _, v := range vs {
		got = append(got, string(v.Invariant)+"/"+v.Op)
	}
	want := []string{"stale-write/complete", "row-last-owner/", "receiver-last-owner/", "receiver-monotonic/",
		"lease-respected/", "epoch-unique/", "stale-write/renew", "finished/"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Rank = %v\nwant   %v", got, want)
	}
}

func TestLoadVerdict_SaysEachStyleAndFencelabsThroughput(t *testing.T) {
	rs := []experiments.LoadStyleResult{
		{Style: "fencelab", PerSecond: 200, Check: experiments.LoadCheck{Jobs: 10000}, Agrees: true},
		{Style: "state-only", PerSecond: 205, Check: experiments.LoadCheck{Jobs: 10000, ZombieResult: 37}, Agrees: true},
		{Style: "id-only", PerSecond: 195, Check: experiments.LoadCheck{Jobs: 10000, ZombieResult: 120}, Agrees: true},
	}
	want := "State only: 37 of 10,000 jobs ended with a zombie's result; job id only: 120; fencelab: 0, at 1.00× their throughput, in one round: no spread to judge by."
	if got := judge.LoadVerdict(rs); got != want {
		t.Errorf("verdict\n got %q\nwant %q", got, want)
	}
	rs[0].PerSecond, rs[1].Agrees = 100, false
	got := judge.LoadVerdict(rs)
	for _, w := range []string{"at 0.50× their throughput", "disagree for state only"} {
		if !strings.Contains(got, w) {
			t.Errorf("verdict %q does not say %q", got, w)
		}
	}
}

func TestCheck_AnEpochNoClaimHeld(t *testing.T) {
	h := labtest.NewHistory()
	h.Claim(10, "A", 1, 1000)
	h.Claim(1100, "B", 2, 1000)
	h.Complete(1200, "B")
	ds := []engine.DecisionRecord{decision(1, "B", 2, engine.AcceptedFirst, nil), decision(2, "B", 99, engine.AcceptedNewer, i64(2))}
	vs := judge.Violations(h.Recs, ds, &engine.Held{JobID: 1, Epoch: 99, Payload: payload("B")})
	if got := invariants(vs); !reflect.DeepEqual(got, []protocol.Invariant{protocol.InvReceiverKnown}) {
		t.Fatalf("Check = %v, want receiver-known", got)
	}
	if !strings.Contains(vs[0].Text, "epoch 99") || len(vs[0].Guards) != 0 {
		t.Fatalf("the violation: %+v", vs[0])
	}
	// A refusal of an unknown epoch changes nothing: no violation.
	ds[1] = decision(2, "B", 99, engine.RefusedStale, i64(2))
	if vs := judge.Violations(h.Recs, ds[:2], &engine.Held{JobID: 1, Epoch: 2, Payload: payload("B")}); len(vs) != 0 {
		t.Fatalf("a refused unknown epoch: %v", vs)
	}
}
