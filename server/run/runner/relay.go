package runner

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/receiver"
	"github.com/fencelab/fencelab/server/tick"
)

// The relay of the outbox mode: it sends each delivery the outbox holds to
// the receiver, after the commit that wrote it, and marks it sent. It is
// what makes a fenced zombie's effect never happen: its commit wrote
// nothing, so there is nothing to send.

// relayEvery is how often the relay looks at the outbox.
const relayEvery = 50 * time.Millisecond

func (r *Run) relay(ctx context.Context, url string) {
	defer r.bg.Done()
	hc := receiver.WithCredential(&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}, r.credential())
	r.mu.Lock()
	r.relayClient, r.relayURL = hc, url
	r.mu.Unlock()
	tick.Every(ctx, relayEvery, func() bool {
		r.relayOnce(ctx)
		return true
	})
}

// relayOnce sends what the outbox holds now and returns how many are left
// unsent; one relay at a time.
func (r *Run) relayOnce(ctx context.Context) int {
	r.relayMu.Lock()
	defer r.relayMu.Unlock()
	r.mu.Lock()
	hc, url := r.relayClient, r.relayURL
	r.mu.Unlock()
	if hc == nil {
		return 0
	}
	ms, err := r.queue.OutboxPending(ctx, 100)
	if err != nil {
		return 1 // the database will say more at the verdict; try again
	}
	if len(ms) == 0 {
		return 0
	}
	// The commit that wrote these is in the jobs' history already (one
	// transaction): it is told before they are sent, so the log never shows
	// a delivery ahead of the commit it came from, even when the commit's
	// notification is still on its way.
	if err := r.catchUp(ctx); err != nil {
		return len(ms) // not sent before its commit is told; try again
	}
	left := 0
	for _, m := range ms {
		if !r.send(ctx, hc, url, m.ID, m.Delivery) {
			left++
		}
	}
	return left
}

// send sends outbox delivery id, d, and tells it; it reports whether the
// receiver answered (taken or refused: either way it is done).
func (r *Run) send(ctx context.Context, hc *http.Client, url string, id int64, d engine.Delivery) bool {
	body, _ := json.Marshal(d) // a Delivery always encodes
	ce := &protocol.CallEvent{JobID: d.JobID, Epoch: d.Epoch, Owner: d.Owner, URL: ".../deliveries", Body: string(body)}
	at, err := receiver.Call(ctx, hc, url, body, ce)
	r.emit(ctx, protocol.Event{Kind: protocol.KindCall, Actor: protocol.ActorRelay, At: at, Call: ce})
	if errors.As(err, new(*engine.StaleError)) {
		err = nil // refused: done all the same
	}
	if err != nil {
		return false
	}
	return r.queue.OutboxSent(ctx, id) == nil
}

// drain waits, before a verdict is read, until what the run set in motion
// has arrived: the outbox's deliveries sent, and every row change Postgres
// recorded told by the listener. Bounded: a database that is gone does not
// hold the verdict up for long.
func (r *Run) drain(ctx context.Context) {
	deadline := time.Now().Add(3 * time.Second)
	if r.spec.Config.Delivery == experiments.DeliverOutbox {
		for r.relayOnce(ctx) > 0 && time.Now().Before(deadline) {
			time.Sleep(relayEvery)
		}
	}
	// Every change the history holds is told before the verdict: those
	// whose notifications are still on their way are read from it.
	if err := r.catchUp(ctx); err != nil {
		r.env.Log.Warn("could not read a run's last row changes", "run", r.spec.ID, "err", err)
	}
}
