package receiver_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/run/receiver"
)

// run is one run's receiver as a registry serves it: the receiver, what
// the registry hands its senders, and the events it emitted.
type run struct {
	r      *engine.Receiver
	served *receiver.Served
	events *recorder
}

// keyOf is the secret key in a served URL: BaseURL/KEY/deliveries.
func keyOf(t *testing.T, reg *receiver.Registry, s *receiver.Served) string {
	t.Helper()
	rest, ok := strings.CutPrefix(s.URL, reg.BaseURL+"/")
	key, ok2 := strings.CutSuffix(rest, "/deliveries")
	if !ok || !ok2 || key == "" || strings.Contains(key, "/") {
		t.Fatalf("served URL %q is not BaseURL/KEY/deliveries under %q", s.URL, reg.BaseURL)
	}
	return key
}

// serveRegistry starts a registry on a loopback listener of its own, as
// `fencelab run` does.
func serveRegistry(t *testing.T) *receiver.Registry {
	t.Helper()
	reg, stop, err := receiver.Serve(quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if !strings.HasPrefix(reg.BaseURL, "http://127.0.0.1:") || !strings.HasSuffix(reg.BaseURL, "/receiver") {
		t.Fatalf("BaseURL %q is not a loopback /receiver", reg.BaseURL)
	}
	return reg
}

func newRun(t *testing.T, reg *receiver.Registry) run {
	t.Helper()
	r, _ := newReceiver(t)
	rec := &recorder{}
	s := reg.Serve(r, rec.emit)
	t.Cleanup(s.Stop)
	return run{r: r, served: s, events: rec}
}

func bearer(credential string) string { return "Bearer " + credential }

func TestRegistry_TheRunsOwnCredentialIsLetIn(t *testing.T) {
	t.Parallel()
	reg := serveRegistry(t)
	ru := newRun(t, reg)
	cred := ru.served.Credential()

	a := deliver(t, ru.served.URL, bearer(cred), 1, 1, "worker-a", "A")
	mustStatus(t, "the run's worker", a, 200)
	if got := a.answerOf(t); got.Decision != engine.AcceptedFirst || got.HeldEpoch != 1 {
		t.Errorf("answer %+v, want accepted-first", got)
	}
	// A second credential of the same run (the outbox's relay) works too,
	// and the first still does.
	mustStatus(t, "the run's relay", deliver(t, ru.served.URL, bearer(ru.served.Credential()), 1, 2, "relay", "B"), 200)
	mustStatus(t, "the run's worker again", deliver(t, ru.served.URL, bearer(cred), 1, 1, "worker-a", "A"), 409)

	if h, _ := heldOf(t, ru.r, 1); h.Epoch != 2 || h.Owner != "relay" {
		t.Errorf("held %+v, want the relay's epoch 2", h)
	}
	events := ru.events.all()
	if len(events) != 3 {
		t.Fatalf("the run's emit saw %d events, want 3", len(events))
	}
	want := []protocol.Decision{protocol.AcceptedFirst, protocol.AcceptedNewer, protocol.RefusedStale}
	for i, e := range events {
		if e.Kind != protocol.KindReceiver || e.Receiver == nil || e.Receiver.Decision != want[i] {
			t.Errorf("event %d = %+v, want the receiver's %s", i, e, want[i])
		}
	}

	// The GET routes are the run's too.
	base := strings.TrimSuffix(ru.served.URL, "/deliveries")
	mustStatus(t, "GET held with the credential", do(t, "GET", base+"/deliveries/1", "", bearer(cred), nil), 200)
	mustStatus(t, "GET decisions with the credential", do(t, "GET", base+"/decisions/1", "", bearer(cred), nil), 200)
}

// TestRegistry_NoCredentialIsRefusedEvenWithTheKey: the key only routes;
// a request that does not carry one of the run's credentials is a 403
// that changes nothing, whatever it sends.
func TestRegistry_NoCredentialIsRefusedEvenWithTheKey(t *testing.T) {
	t.Parallel()
	reg := serveRegistry(t)
	ru := newRun(t, reg)
	cred := ru.served.Credential()
	key := keyOf(t, reg, ru.served)

	for name, auth := range map[string]string{
		"no Authorization":          "",
		"an empty bearer":           "Bearer ",
		"the key as the bearer":     bearer(key),
		"a made-up credential":      bearer("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
		"the credential, but Basic": "Basic " + cred,
		"the credential, lowercase": "bearer " + cred,
		"the credential bare":       cred,
		"the credential cut short":  bearer(cred[:len(cred)-1]),
		"the credential and more":   bearer(cred + "x"),
	} {
		a := deliver(t, ru.served.URL, auth, 1, 5, "mallory", "M")
		if a.Status != 403 {
			t.Errorf("%s: %s, want 403", name, a)
			continue
		}
		if b := a.errorBody(t); b.Code != "forbidden" || b.Error == "" {
			t.Errorf("%s: answered %+v", name, b)
		}
		base := strings.TrimSuffix(ru.served.URL, "/deliveries")
		for _, path := range []string{"/deliveries/1", "/decisions/1"} {
			if a := do(t, "GET", base+path, "", auth, nil); a.Status != 403 {
				t.Errorf("%s: GET %s: %s, want 403", name, path, a)
			}
		}
	}
	if h, ok := heldOf(t, ru.r, 1); ok {
		t.Errorf("a refused request was delivered: %+v", h)
	}
	if ds := decisionsOf(t, ru.r, 1); len(ds) != 0 {
		t.Errorf("a refused request was decided: %+v", ds)
	}
	if n := len(ru.events.all()); n != 0 {
		t.Errorf("the run's emit saw %d events from refused requests", n)
	}
}

// TestRegistry_AnotherRunsKeyIsRefused: one run's credential opens no
// other run's receiver, in either direction, and the refusal changes
// neither.
func TestRegistry_AnotherRunsKeyIsRefused(t *testing.T) {
	t.Parallel()
	reg := serveRegistry(t)
	a, b := newRun(t, reg), newRun(t, reg)
	credA, credB := a.served.Credential(), b.served.Credential()
	if keyOf(t, reg, a.served) == keyOf(t, reg, b.served) || credA == credB {
		t.Fatalf("two runs share a key or a credential: %s %s", a.served.URL, b.served.URL)
	}

	mustStatus(t, "run B's own worker", deliver(t, b.served.URL, bearer(credB), 1, 2, "worker-b", "B"), 200)
	mustStatus(t, "run A's worker at B's receiver", deliver(t, b.served.URL, bearer(credA), 1, 9, "worker-a", "A"), 403)
	mustStatus(t, "run B's worker at A's receiver", deliver(t, a.served.URL, bearer(credB), 1, 9, "worker-b", "B"), 403)

	if h, _ := heldOf(t, b.r, 1); h.Epoch != 2 || h.Owner != "worker-b" || h.Accepted != 1 {
		t.Errorf("run B holds %+v, want its own epoch 2 alone", h)
	}
	if h, ok := heldOf(t, a.r, 1); ok {
		t.Errorf("run A holds %+v from run B's worker", h)
	}
	if n, m := len(a.events.all()), len(b.events.all()); n != 0 || m != 1 {
		t.Errorf("run A emitted %d events, run B %d; want 0 and 1", n, m)
	}
}

// TestRegistry_SecretsNeverAppearInAnswers: no answer of the registry,
// accepted, refused or failed, carries the run's key or credential.
func TestRegistry_SecretsNeverAppearInAnswers(t *testing.T) {
	t.Parallel()
	reg := serveRegistry(t)
	ru := newRun(t, reg)
	cred := ru.served.Credential()
	key := keyOf(t, reg, ru.served)
	base := strings.TrimSuffix(ru.served.URL, "/deliveries")

	answers := map[string]answer{
		"accepted":         deliver(t, ru.served.URL, bearer(cred), 1, 2, "a", "A"),
		"refused as stale": deliver(t, ru.served.URL, bearer(cred), 1, 1, "a", "A"),
		"no credential":    deliver(t, ru.served.URL, "", 1, 3, "a", "A"),
		"bad body":         do(t, "POST", ru.served.URL, "application/json", bearer(cred), []byte(`{"job_id":`+key+`}`)),
		"bad job id":       do(t, "GET", base+"/deliveries/abc", "", bearer(cred), nil),
		"held":             do(t, "GET", base+"/deliveries/1", "", bearer(cred), nil),
		"unknown job":      do(t, "GET", base+"/deliveries/2", "", bearer(cred), nil),
		"decisions":        do(t, "GET", base+"/decisions/1", "", bearer(cred), nil),
		"too large":        do(t, "POST", ru.served.URL, "application/json", bearer(cred), []byte(strings.Repeat(" ", engine.MaxPayloadBytes+8<<10))),
	}
	ru.served.Stop()
	answers["after Stop"] = deliver(t, ru.served.URL, bearer(cred), 1, 3, "a", "A")

	for name, a := range answers {
		if a.Status == 0 {
			t.Errorf("%s: no answer", name)
		}
		for what, secret := range map[string]string{"key": key, "credential": cred} {
			if strings.Contains(string(a.Body), secret) {
				t.Errorf("%s: the answer's body carries the run's %s: %s", name, what, a)
			}
			for h, vs := range a.Header {
				for _, v := range vs {
					if strings.Contains(v, secret) {
						t.Errorf("%s: header %s carries the run's %s", name, h, what)
					}
				}
			}
		}
	}
}

// TestRegistry_StopForgetsTheRunsKey: once its run ends, a receiver's URL
// answers 404 to its own credentials, Stop may be called again, and other
// runs are untouched.
func TestRegistry_StopForgetsTheRunsKey(t *testing.T) {
	t.Parallel()
	reg := serveRegistry(t)
	ended, live := newRun(t, reg), newRun(t, reg)
	credEnded, credLive := ended.served.Credential(), live.served.Credential()
	mustStatus(t, "before Stop", deliver(t, ended.served.URL, bearer(credEnded), 1, 1, "a", "A"), 200)

	ended.served.Stop()
	ended.served.Stop() // safe again

	a := deliver(t, ended.served.URL, bearer(credEnded), 1, 2, "a", "A")
	mustStatus(t, "after Stop", a, 404)
	if b := a.errorBody(t); b.Code != "not_found" {
		t.Errorf("after Stop: %+v", b)
	}
	base := strings.TrimSuffix(ended.served.URL, "/deliveries")
	mustStatus(t, "GET after Stop", do(t, "GET", base+"/deliveries/1", "", bearer(credEnded), nil), 404)
	// A credential issued after the end opens nothing either.
	mustStatus(t, "a late credential", deliver(t, ended.served.URL, bearer(ended.served.Credential()), 1, 2, "a", "A"), 404)

	if h, _ := heldOf(t, ended.r, 1); h.Epoch != 1 {
		t.Errorf("the ended run's receiver holds %+v, want its epoch 1 alone", h)
	}
	if n := len(ended.events.all()); n != 1 {
		t.Errorf("the ended run emitted %d events, want 1", n)
	}
	mustStatus(t, "the live run", deliver(t, live.served.URL, bearer(credLive), 1, 1, "b", "B"), 200)
}

// TestRegistry_KeysAndCredentialsAreFreshAndLong: every Serve gets a key of
// its own and every Credential call a new credential, long enough that
// guessing one is hopeless.
func TestRegistry_KeysAndCredentialsAreFreshAndLong(t *testing.T) {
	t.Parallel()
	reg := receiver.NewRegistry("http://example.invalid/receiver")
	r, _ := newReceiver(t)
	seen := map[string]bool{}
	for range 50 {
		s := reg.Serve(r, nil)
		key := keyOf(t, reg, s)
		cred := s.Credential()
		for _, v := range []string{key, cred, s.Credential()} {
			if len(v) < 24 {
				t.Errorf("secret %q is shorter than 24 characters", v)
			}
			if strings.ContainsAny(v, "/?#%+= ") {
				t.Errorf("secret %q is not URL- and header-safe", v)
			}
			if seen[v] {
				t.Fatalf("secret %q handed out twice", v)
			}
			seen[v] = true
		}
		s.Stop()
	}
}

// TestRegistry_ConcurrentRunsStartDeliverAndStop exercises the registry's
// locks: runs starting, delivering and ending at once (go test -race).
func TestRegistry_ConcurrentRunsStartDeliverAndStop(t *testing.T) {
	t.Parallel()
	reg := serveRegistry(t)
	r, _ := newReceiver(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			s := reg.Serve(r, nil) // a nil emit is allowed
			cred := s.Credential()
			hc := receiver.WithCredential(&http.Client{}, cred)
			rc, status, err := receiver.Post(context.Background(), hc, s.URL, []byte(`{"job_id":`+string(rune('1'+i))+`,"epoch":1,"owner":"w","payload":{}}`))
			if err != nil || status != 200 || rc.Decision != engine.AcceptedFirst {
				t.Errorf("run %d: %+v %d %v", i, rc, status, err)
			}
			s.Stop()
			if _, status, _ := receiver.Post(context.Background(), hc, s.URL, []byte(`{"job_id":1,"epoch":1,"owner":"w","payload":{}}`)); status != 404 {
				t.Errorf("run %d after Stop: HTTP %d, want 404", i, status)
			}
		})
	}
	wg.Wait()
}
