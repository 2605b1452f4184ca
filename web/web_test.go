package web_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/static"
	"github.com/fencelab/fencelab/web"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func start(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startWith(t, ln, nil, web.Options{FrameAncestors: []string{"https://blog.example.com"}})
}

// startWith starts a server on ln with the pages of opts, logging to log
// (nil: nowhere), and returns its URL.
func startWith(t *testing.T, ln net.Listener, log *slog.Logger, opts web.Options) string {
	t.Helper()
	srv, err := api.New(context.Background(), api.Config{Listener: ln, Pool: pgtest.Pool(t), DatabaseURL: pgtest.DSN(t), Log: log,
		PagesFunc: web.Register(opts)})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv.URL()
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestIndex_RendersWithAStrictCSPThatAllowsTheBlog(t *testing.T) {
	base := start(t)
	resp, html := get(t, base+"/?ordering=new-owner-first&break=epoch-check&lease=1500")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /: %d", resp.StatusCode)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	m := regexp.MustCompile(`script-src 'self' 'nonce-([^']+)'`).FindStringSubmatch(csp)
	if m == nil || !strings.Contains(html, `nonce="`+m[1]+`"`) {
		t.Fatalf("CSP %q does not carry the page's nonce", csp)
	}
	for _, want := range []string{"default-src 'self'", "style-src 'self'", "object-src 'none'", "base-uri 'none'", "frame-ancestors 'self' https://blog.example.com"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP lacks %q: %s", want, csp)
		}
	}
	if xfo := resp.Header.Get("X-Frame-Options"); xfo != "" {
		t.Errorf("X-Frame-Options %q would block the embed", xfo)
	}
	if !strings.Contains(html, `"token":"`) || !strings.Contains(html, `<option value="new-owner-first" selected>`) {
		t.Error("the new session's page lacks its token or its setup")
	}
}

// TestPage_WeighsUnder60KBOnTheWire adds up the page and everything it
// loads — the stylesheet, the icon, and every module main.js imports — as
// they cross the network (compressed), and as they are (uncompressed).
func TestPage_WeighsUnder60KBOnTheWire(t *testing.T) {
	base := start(t)
	_, html := get(t, base+"/")
	total, wire := len(html), gzipped(t, base+"/")
	seen := map[string]bool{}
	var fetch func(u string)
	fetch = func(u string) {
		if seen[u] {
			return
		}
		seen[u] = true
		resp, body := get(t, base+u)
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", u, resp.StatusCode)
			return
		}
		total += len(body)
		wire += gzipped(t, base+u)
		if strings.HasSuffix(u, ".js") {
			dir := u[:strings.LastIndex(u, "/")+1]
			for _, m := range regexp.MustCompile(`from "\./([a-z]+\.js)"`).FindAllStringSubmatch(body, -1) {
				fetch(dir + m[1])
			}
		}
	}
	for _, m := range regexp.MustCompile(`(?:href|src)="(/static/[^"]+)"`).FindAllStringSubmatch(html, -1) {
		fetch(m[1])
	}
	t.Logf("page weight: %d bytes on the wire, %d uncompressed, in %d files", wire, total, len(seen)+1)
	if wire > 60<<10 {
		t.Fatalf("the page weighs %d bytes on the wire, over 60 KB", wire)
	}
	if total > 200<<10 {
		t.Fatalf("the page weighs %d bytes uncompressed, over 200 KB", total)
	}
	if len(seen) < 5 {
		t.Fatalf("only %d static files found: %v", len(seen), seen)
	}
}

func TestStatic_VersionedAndCachedForAYear(t *testing.T) {
	base := start(t)
	v := static.Version()
	for path, want := range map[string]string{"js/main.js": "text/javascript; charset=utf-8", "css/app.css": "text/css; charset=utf-8", "img/icon.svg": "image/svg+xml"} {
		resp, _ := get(t, base+"/static/"+v+"/"+path)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != want || !strings.Contains(resp.Header.Get("Cache-Control"), "immutable") {
			t.Errorf("%s: %d %q %q", path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"))
		}
	}
	if resp, _ := get(t, base+"/static/old/js/main.js"); resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Errorf("an old version: %d %q", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
	for _, bad := range []string{"/static/" + v + "/js/nope.js", "/static/" + v + "/../static.go", "/static/" + v + "/"} {
		if resp, _ := get(t, base+bad); resp.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", bad, resp.StatusCode)
		}
	}
}

func TestPermalink_BadPartsAreIgnoredAndSaid(t *testing.T) {
	base := start(t)
	resp, html := get(t, base+"/?ordering=sideways&lease=5&break=seatbelt,epoch-check")
	if resp.StatusCode != 200 {
		t.Fatalf("%d", resp.StatusCode)
	}
	for _, want := range []string{`data-testid="notice"`, `ordering &#34;sideways&#34;`, `lease &#34;5&#34;`, `guard &#34;seatbelt&#34;`,
		`value="epoch-check" data-testid="guard-epoch-check">`} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	resp, html = get(t, base+"/s/no-such-session")
	if resp.StatusCode != 404 || !strings.Contains(html, "no such session") || !strings.Contains(html, `"token":"`) {
		t.Errorf("an unknown session: %d; it should say so and give a new one", resp.StatusCode)
	}
}

// gzipped fetches url accepting gzip and returns the bytes that came.
func gzipped(t *testing.T, url string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if len(b) > 1024 && resp.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("%s: %d bytes sent uncompressed to a client that accepts gzip", url, len(b))
	}
	return len(b)
}
