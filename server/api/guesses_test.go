package api_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/api"
)

// Guessing a class code from one address: 100 wrong codes a minute are
// answered 404, and the next 429 with Retry-After, whatever code it sends,
// the right one too — so a guess learns nothing while it waits. A school
// behind one public address, thirty students with the right code and a
// dozen typos, is never throttled, and another address is not slowed.
func TestGuesses_JoinCodesCannotBeGuessed(t *testing.T) {
	ts := startServer(t, func(c *api.Config) {
		c.TrustProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	var cl openedClass
	ts.from("192.0.2.1", "POST", "/api/classes", "", "").json(t, &cl)
	wrongCode := "ZZZ-ZZZ"
	if strings.EqualFold(cl.Code, wrongCode) {
		wrongCode = "YYY-YYY"
	}

	const school = "198.51.100.7"
	for i := range 30 {
		if i%3 == 0 { // a typo, then the right code
			if a := ts.from(school, "POST", "/api/classes/join", "", joinBody(t, wrongCode, fmt.Sprintf("Student %d", i), "")); a.Status != http.StatusNotFound {
				t.Fatalf("a typo from the school: %d %s", a.Status, a.Body)
			}
		}
		if a := ts.from(school, "POST", "/api/classes/join", "", joinBody(t, cl.Code, fmt.Sprintf("Student %d", i), "")); a.Status != http.StatusCreated {
			t.Fatalf("student %d behind the school's address: %d %s", i, a.Status, a.Body)
		}
	}

	const guesser = "203.0.113.9"
	for i := range 100 {
		if a := ts.from(guesser, "POST", "/api/classes/join", "", joinBody(t, wrongCode, "Mallory", "")); a.Status != http.StatusNotFound {
			t.Fatalf("wrong code %d: %d %s, want 404 within the budget", i+1, a.Status, a.Body)
		}
	}
	for _, code := range []string{wrongCode, cl.Code} {
		a := ts.from(guesser, "POST", "/api/classes/join", "", joinBody(t, code, "Mallory", ""))
		after, _ := strconv.Atoi(a.Header.Get("Retry-After"))
		if a.Status != http.StatusTooManyRequests || after < 50 || after > 60 || !strings.Contains(a.errText(), "too many wrong class codes") {
			t.Fatalf("code %s after 100 wrong ones: %d Retry-After %q %s; want 429 and about a minute", code, a.Status, a.Header.Get("Retry-After"), a.Body)
		}
	}
	if a := ts.from("192.0.2.77", "POST", "/api/classes/join", "", joinBody(t, cl.Code, "Late", "")); a.Status != http.StatusCreated {
		t.Fatalf("another address while the guesser waits: %d %s", a.Status, a.Body)
	}
}
