package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/api"
)

// Any page a teacher or reader visits can send a POST to the server: a
// form, a text/plain fetch, with its own Origin. Every write from another
// site's page is refused and changes nothing — the teacher's own "Start a
// class" still works after a flood of them — while the server's own pages,
// an origin --allow-origin names, and programs (no Origin) go on.
func TestCrossSite_WritesFromAnotherSitesPageAreRefused(t *testing.T) {
	ts := startServer(t, func(cfg *api.Config) { cfg.AllowOrigins = []string{"https://blog.example.com"} })
	evil := "http://evil.example"
	refused := []struct {
		what   string
		path   string
		header map[string]string
		body   string
		want   int
	}{
		{"a form opening a class", "/api/classes", map[string]string{"Origin": evil, "Content-Type": "application/x-www-form-urlencoded"}, "", 403},
		{"a text/plain fetch opening a class", "/api/classes", map[string]string{"Origin": evil, "Content-Type": "text/plain"}, "{}", 403},
		{"a JSON fetch opening a session", "/api/sessions", map[string]string{"Origin": evil, "Content-Type": "application/json"}, "{}", 403},
		{"an opaque origin", "/api/classes", map[string]string{"Origin": "null"}, "", 403},
		{"a look-alike of an allowed origin", "/api/classes", map[string]string{"Origin": "https://blog.example.com.evil.net"}, "", 403},
		{"another scheme of an allowed origin", "/api/classes", map[string]string{"Origin": "http://blog.example.com"}, "", 403},
		{"cross-site by Sec-Fetch-Site alone", "/api/classes", map[string]string{"Sec-Fetch-Site": "cross-site"}, "", 403},
		{"a subdomain's page", "/api/classes", map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://other.localhost"}, "", 403},
		{"a same-origin text/plain body", "/api/classes", map[string]string{"Origin": ts.base, "Content-Type": "text/plain"}, "{}", 415},
		{"a program's form body", "/api/sessions", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, "a=b", 415},
		{"a body with no type", "/api/sessions", map[string]string{}, "{}", 415},
		{"the join by form", "/api/classes/join", map[string]string{"Origin": evil, "Content-Type": "application/x-www-form-urlencoded"}, "code=ABC234&name=Ada", 403},
	}
	for range 5 {
		for _, r := range refused {
			if a := ts.send("POST", r.path, r.header, r.body); a.Status != r.want || !strings.Contains(string(a.Body), `"error"`) {
				t.Fatalf("%s: %d %s; want %d with one sentence", r.what, a.Status, a.Body, r.want)
			}
		}
	}
	if n := ts.Sessions.Count(); n != 0 {
		t.Fatalf("the refused writes left %d sessions", n)
	}

	// A driver's command from another site's page, with the right token.
	s := ts.newSession()
	cmd := `{"action":"run","ordering":"zombie-first","mode":"step"}`
	if a := ts.send("POST", "/api/sessions/"+s.ID+"/commands", map[string]string{"Origin": evil, "Content-Type": "application/json", "Authorization": "Bearer " + s.Token}, cmd); a.Status != 403 {
		t.Fatalf("a cross-site command: %d %s", a.Status, a.Body)
	}
	if a := ts.send("DELETE", "/api/sessions/"+s.ID, map[string]string{"Origin": evil, "Authorization": "Bearer " + s.Token}, ""); a.Status != 403 {
		t.Fatalf("a cross-site DELETE: %d %s", a.Status, a.Body)
	}
	if runs := ts.Sessions.RunsInFlight(); runs != 0 {
		t.Fatalf("a refused command started %d runs", runs)
	}

	allowed := []struct {
		what   string
		header map[string]string
	}{
		{"the server's own page", map[string]string{"Origin": ts.base, "Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"}},
		{"its own page behind a proxy that rewrote Host", map[string]string{"Origin": "https://fencelab.example.org", "Sec-Fetch-Site": "same-origin"}},
		{"an origin --allow-origin names", map[string]string{"Origin": "https://blog.example.com", "Content-Type": "application/json; charset=utf-8"}},
		{"a program (curl -XPOST)", map[string]string{}},
		{"a page typed into the address bar", map[string]string{"Sec-Fetch-Site": "none"}},
	}
	for _, r := range allowed {
		if a := ts.send("POST", "/api/classes", r.header, ""); a.Status != http.StatusCreated {
			t.Errorf("%s: opening a class got %d %s", r.what, a.Status, a.Body)
		}
	}
	if a := ts.send("GET", "/api/scenarios", map[string]string{"Origin": evil, "Sec-Fetch-Site": "cross-site"}, ""); a.Status != 200 {
		t.Errorf("a cross-site read: %d; reads change nothing and stay open", a.Status)
	}
}
