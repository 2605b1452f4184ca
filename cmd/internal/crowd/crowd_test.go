package crowd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"math"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/run/child"
	"github.com/fencelab/fencelab/server/servertest"
)

func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	servertest.Cleanup()
	os.Exit(code)
}

// marker is an environment variable unique to one test: every process the
// crowd starts inherits it, which is how gone finds what is left.
func marker(t *testing.T) string {
	return fmt.Sprintf("FENCELAB_TEST_MARK=%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano())
}

// config is a crowd against a server of its own, under marker m, on the
// test cluster, with few spare schemas: the tests share one Postgres, and
// a child server would otherwise make a hundred pairs in advance.
func config(t *testing.T, m string, readers int, serveFlags ...string) (Config, *servertest.LogBuffer) {
	logs := &servertest.LogBuffer{}
	return Config{Readers: readers, Pace: DefaultPace, Settle: DefaultSettle, Server: Server{Executable: servertest.Binary(t),
		Env: []string{"DATABASE_URL=" + pgtest.DSN(t), m}, ServeFlags: append([]string{"--spare-runs=2"}, serveFlags...),
		Log: log.New(logs, "", 0)}}, logs
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func logReport(t *testing.T, r *Report) {
	t.Helper()
	t.Logf("readers=%d ok=%d busy=%d errors=%d %v p50=%dms max=%dms peak rss=%v db=%v", r.Readers,
		r.OK, r.Busy, r.Errors, r.ErrorMessages, r.RunToVerdictMS.P50, r.RunToVerdictMS.Max, deref(r.PeakRSSBytes), deref(r.PeakDBConnections))
}

// gone checks that the fencelab serve a crowd started has been reaped, by
// its pid, and that nothing it started (workers) is left under the marker.
func gone(t *testing.T, m string, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatal("the report names no server pid")
	}
	if st := child.State(pid); st != 0 {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), "serve") {
			t.Errorf("the server (pid %d) is still there after the crowd returned: state %c", pid, st)
		}
	}
	if left := pgtest.Marked(m); len(left) > 0 {
		t.Errorf("left running after the crowd returned:\n%s", strings.Join(left, "\n"))
	}
}

// TestRun_OwnServer: three readers against a server of its own all get a
// correct build's verdict, and the server is gone when Run returns.
func TestRun_OwnServer(t *testing.T) {
	t.Parallel()
	m := marker(t)
	cfg, logs := config(t, m, 3)
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v\nlog: %s", err, logs)
	}
	logReport(t, r)
	if r.Readers != 3 || r.OK != 3 || r.Busy != 0 || r.Errors != 0 {
		t.Errorf("readers=%d ok=%d busy=%d errors=%d %v, want 3 ok", r.Readers, r.OK, r.Busy, r.Errors, r.ErrorMessages)
	}
	if p := r.RunToVerdictMS; p.P50 <= 0 || p.P95 < p.P50 || p.Max < p.P95 {
		t.Errorf("run to verdict %+v: want 0 < p50 <= p95 <= max", p)
	}
	// The default run (zombie-first, a 1s lease at a 900ms pace) cannot be
	// over in less than its lease.
	if r.RunToVerdictMS.P50 < 1000 {
		t.Errorf("p50 %dms: shorter than the run's lease", r.RunToVerdictMS.P50)
	}
	if r.PeakRSSBytes == nil || *r.PeakRSSBytes <= 0 || r.PeakDBConnections == nil || *r.PeakDBConnections <= 0 {
		t.Errorf("peak rss %v, peak db connections %v: want both above 0", deref(r.PeakRSSBytes), deref(r.PeakDBConnections))
	}
	if r.Stats != nil && r.Stats.PeakRuns < 1 {
		t.Errorf("the stats never saw a run: %+v", r.Stats)
	}
	if !strings.Contains(logs.String(), "started fencelab serve (pid") {
		t.Errorf("the log does not say it started a server:\n%s", logs)
	}
	gone(t, m, r.ServerPID)
}

// TestRun_BusyIsCounted: with room for one run, three readers at once
// cannot all run: the server answers busy, and busy is what they count.
func TestRun_BusyIsCounted(t *testing.T) {
	t.Parallel()
	m := marker(t)
	cfg, logs := config(t, m, 3, "--max-runs=1")
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v\nlog: %s", err, logs)
	}
	logReport(t, r)
	if r.Busy < 1 || r.OK < 1 || r.Errors != 0 || r.OK+r.Busy != 3 {
		t.Errorf("ok=%d busy=%d errors=%d %v: want one ok at least, one busy at least, no error", r.OK, r.Busy, r.Errors, r.ErrorMessages)
	}
	if r.Stats != nil && r.Stats.PeakRuns > 1 {
		t.Errorf("peak runs %d with --max-runs=1", r.Stats.PeakRuns)
	}
	gone(t, m, r.ServerPID)
}

// TestRun_URL plays against a server that is already running, and leaves
// it as it found it; the table has every figure.
func TestRun_URL(t *testing.T) {
	t.Parallel()
	m := marker(t)
	logs := &servertest.LogBuffer{}
	srv, err := startServe(context.Background(), servertest.Binary(t), []string{"DATABASE_URL=" + pgtest.DSN(t), m}, []string{"--spare-runs=2"}, log.New(logs, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.stop() })
	r, err := Run(context.Background(), Config{Readers: 2, Lease: 300 * time.Millisecond, Server: Server{URL: srv.url.String(), Log: log.New(logs, "", 0)}})
	if err != nil {
		t.Fatalf("Run: %v\nlog: %s", err, logs)
	}
	logReport(t, r)
	out := r.Table()
	for _, want := range []string{"readers  ", "ok  ", "busy  ", "errors  ", "p50 ", "p95 ", "max ", "Run to start ", "peak RSS ", "peak Postgres connections "} {
		if !strings.Contains(out, want) {
			t.Errorf("the table has no %q:\n%s", want, out)
		}
	}
	// The start is a real share of the whole: more than nothing, less than
	// Run to verdict.
	if st := r.RunToStartMS; st == nil || st.P50 <= 0 || st.Max >= r.RunToVerdictMS.Max {
		t.Errorf("Run to start %+v, against Run to verdict %+v", st, r.RunToVerdictMS)
	}
	if !regexp.MustCompile(`(?m)^ok +2$`).MatchString(out) || r.ServerPID != 0 {
		t.Errorf("want ok 2 and no server pid (%d):\n%s", r.ServerPID, out)
	}
	// The readers ended their sessions: the server is left as found.
	resp, err := http.Get(srv.url.String() + "/api/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ Sessions, Runs int }
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Sessions != 0 {
		t.Errorf("after the crowd the server has %+v (%v), want no session", st, err)
	}
	if err := srv.stop(); err != nil {
		t.Errorf("the server did not stop cleanly: %v", err)
	}
	gone(t, m, srv.pid)
}

// TestRun_ServeFlagRefused: a flag the server refuses is the caller's bad
// input, in the server's own words, and no server is left.
func TestRun_ServeFlagRefused(t *testing.T) {
	t.Parallel()
	m := marker(t)
	cfg, _ := config(t, m, 1, "--max-runs=0")
	r, err := Run(context.Background(), cfg)
	if r != nil || fault.CodeOf(err) != fault.Invalid || !strings.Contains(fmt.Sprint(err), "--max-runs 0") {
		t.Errorf("Run: %v, %v: want no report and an invalid --max-runs 0", r, err)
	}
	if left := pgtest.Marked(m); len(left) > 0 {
		t.Errorf("left running:\n%s", strings.Join(left, "\n"))
	}
}

// TestConfig_Validate: out of bounds is one sentence naming the flag,
// fault.Invalid, before any server starts; the zero fields get defaults.
func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	ok := Config{Server: Server{URL: "http://127.0.0.1:1"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if ok.Readers != DefaultReaders || ok.Timeout != DefaultTimeout || ok.Lease != DefaultLease || ok.Ordering != DefaultOrdering || ok.Log == nil || ok.Pace != 0 || ok.Settle != 0 {
		t.Errorf("defaults: %+v", ok)
	}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Readers = -1 }, "--readers -1 must be between 1 and 1000"},
		{func(c *Config) { c.Readers = 1001 }, "--readers 1001 must be between 1 and 1000"},
		{func(c *Config) { c.Timeout = 11 * time.Minute }, "--timeout"},
		{func(c *Config) { c.Timeout = -time.Second }, "--timeout"},
		{func(c *Config) { c.Ramp = -time.Second }, "--ramp"},
		{func(c *Config) { c.Lease = time.Millisecond }, "--lease"},
		{func(c *Config) { c.Pace = -time.Second }, "--pace"},
		{func(c *Config) { c.Settle = 3 * time.Minute }, "--settle"},
		{func(c *Config) { c.Settle = -time.Second }, "--settle"},
		{func(c *Config) { c.Ordering = "free-play" }, "--ordering"},
		{func(c *Config) { c.Ordering = "nope" }, "--ordering"},
		{func(c *Config) { c.URL = "http://example.com" }, "--allow-remote"},
		{func(c *Config) { c.URL = "http://10.0.0.1:8080" }, "--allow-remote"},
		{func(c *Config) { c.URL = "http://127.0.0.1:8080/s/abc" }, "names a server, not a page"},
		{func(c *Config) { c.URL = "ftp://127.0.0.1" }, "is not an http(s) URL"},
		{func(c *Config) { c.ServeFlags = []string{"--max-runs=2"} }, "--serve-flag"},
		{func(c *Config) { c.URL, c.ServeFlags = "", []string{"max-runs=2"} }, "is not a flag"},
		{func(c *Config) { c.URL, c.Executable = "", "" }, "no fencelab binary"},
	} {
		cfg := Config{Server: Server{URL: "http://127.0.0.1:1", Executable: "/bin/false"}}
		c.edit(&cfg)
		err := cfg.Validate()
		if fault.CodeOf(err) != fault.Invalid || !strings.Contains(fmt.Sprint(err), c.want) || strings.Contains(fmt.Sprint(err), "\n") {
			t.Errorf("%+v: Validate: %v, want one invalid line with %q", cfg, err, c.want)
		}
	}
}

// TestParseReaders: one number or a list; anything else is one sentence
// that names --readers.
func TestParseReaders(t *testing.T) {
	t.Parallel()
	for s, want := range map[string][]int{"12": {12}, " 3 ": {3}, "1,12,30": {1, 12, 30}, "1, 2": {1, 2}} {
		if got, err := ParseReaders(s); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ParseReaders(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for s, want := range map[string]string{
		"0":                                   "--readers 0 must be between 1 and 1000",
		"-1":                                  "--readers -1 must be between 1 and 1000",
		"1001":                                "--readers 1001 must be between 1 and 1000",
		"99999999999999999999":                "--readers 99999999999999999999 must be between 1 and 1000",
		"abc":                                 `--readers "abc" is not a number`,
		"":                                    `--readers "" is not a number`,
		"1\x00":                               `--readers "1\x00" is not a number`,
		"1,0":                                 "not 0",
		"1,1001":                              "not 1001",
		"1,99999999999999999999":              "not 99999999999999999999",
		"1,1,1,1,1,1,1,1,1,1,1":               "11 loads: at most 10",
		"1,x":                                 `"x" is not a number of readers`,
		"1,,2":                                "entry 2 is empty",
		"1,":                                  "entry 2 is empty",
		"600,600,600,600,600,600,600,600,600": "5400 readers in all: at most 5000",
	} {
		got, err := ParseReaders(s)
		if got != nil || fault.CodeOf(err) != fault.Invalid || !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("ParseReaders(%q) = %v, %v; want an invalid error with %q", s, got, err, want)
		}
	}
	if _, err := RunSeries(context.Background(), Config{Server: Server{URL: "http://127.0.0.1:1"}}, []int{600, 600, 600, 600, 600, 600, 600, 600, 600}); fault.CodeOf(err) != fault.Invalid {
		t.Errorf("RunSeries of 5400 readers: %v, want invalid", err)
	}
}

// TestRunSeries: two loads one after the other against one server of its
// own, settling between them, with the second's p50 as a ratio to the
// first's.
func TestRunSeries(t *testing.T) {
	t.Parallel()
	m := marker(t)
	cfg, logs := config(t, m, 0)
	s, err := RunSeries(context.Background(), cfg, []int{1, 2})
	if err != nil {
		t.Fatalf("RunSeries: %v\nlog: %s", err, logs)
	}
	if len(s.Loads) != 2 {
		t.Fatalf("%d loads, want 2\nlog: %s", len(s.Loads), logs)
	}
	for i, want := range []int{1, 2} {
		r := s.Loads[i]
		logReport(t, r)
		if r.Readers != want || r.OK != want || r.Busy != 0 || r.Errors != 0 {
			t.Errorf("load %d: readers=%d ok=%d busy=%d errors=%d %v, want %d ok", i+1, r.Readers, r.OK, r.Busy, r.Errors, r.ErrorMessages, want)
		}
	}
	a, b := s.Loads[0], s.Loads[1]
	if a.ServerPID <= 0 || a.ServerPID != b.ServerPID || a.URL == "" || a.URL != b.URL {
		t.Errorf("the loads ran against pid %d at %s and pid %d at %s: want one server", a.ServerPID, a.URL, b.ServerPID, b.URL)
	}
	if s.BaselineP50MS == nil || *s.BaselineP50MS != a.RunToVerdictMS.P50 || *s.BaselineP50MS <= 0 {
		t.Errorf("baseline_p50_ms %v, want the first load's p50 %dms", deref(s.BaselineP50MS), a.RunToVerdictMS.P50)
	}
	if b.P50Ratio == nil || *b.P50Ratio <= 0 {
		t.Errorf("the second load's p50_ratio is %v: want a ratio above 0", deref(b.P50Ratio))
	} else if want := float64(b.RunToVerdictMS.P50) / float64(a.RunToVerdictMS.P50); math.Abs(*b.P50Ratio-want) > 0.001 {
		t.Errorf("p50_ratio %v, want %v (%dms / %dms)", *b.P50Ratio, want, b.RunToVerdictMS.P50, a.RunToVerdictMS.P50)
	}
	if a.P50Ratio == nil || *a.P50Ratio != 1 {
		t.Errorf("the first load's p50_ratio is %v, want 1", deref(a.P50Ratio))
	}
	if l := logs.String(); !strings.Contains(l, "settle: no run in flight") || strings.Count(l, "started fencelab serve") != 1 {
		t.Errorf("want one server started and a settle between the loads:\n%s", l)
	}
	gone(t, m, a.ServerPID)
}

// TestSeries_Table: a series prints one table, a row per load, with the
// first load named as the baseline of the ratios.
func TestSeries_Table(t *testing.T) {
	t.Parallel()
	rss, db := int64(50<<20), 30
	load := func(readers, ok int, p50 int64, ratio *float64) *Report {
		r := &Report{URL: "http://127.0.0.1:1", ServerPID: 42, Command: json.RawMessage(`{"ordering":"zombie-first","lease_ms":1000,"pace_ms":900}`),
			Readers: readers, OK: ok, Errors: readers - ok, TimeoutMS: 120000, PeakRSSBytes: &rss, PeakDBConnections: &db, P50Ratio: ratio}
		r.RunToVerdictMS.P50, r.RunToVerdictMS.P95, r.RunToVerdictMS.Max = p50, p50+100, p50+200
		r.RunToStartMS = &Spread{P50: p50 - 6000, P95: p50 - 5900, Max: p50 - 5800}
		if ok < readers {
			r.ErrorMessages = []ErrorCount{{Message: "the run failed", Count: readers - ok}}
		}
		return r
	}
	one, ratio := 1.0, 1.125
	base := int64(6400)
	s := &Series{Loads: []*Report{load(1, 1, 6400, &one), load(60, 59, 7200, &ratio)}, BaselineP50MS: &base, SettleMS: 5000}
	out := s.Table()
	for _, want := range []string{
		"each reader  presses Run (zombie-first, lease 1s, pace 900ms), all at once",
		"  the first load (1 reader), p50 6.40s: the column p50 ×1 reader is",
		"readers  ok  busy  errors  p50    p95    max    p50 ×1 reader  start p50  start p95  peak RSS  ",
		"errors, 60 readers  1× the run failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table has no %q:\n%s", want, out)
		}
	}
	for _, row := range []string{`(?m)^1 +1 +0 +0 +6\.40s +6\.50s +6\.60s +1\.00 +0\.40s +0\.50s +50\.0 MiB +30$`, `(?m)^60 +59 +0 +1 +7\.20s +7\.30s +7\.40s +1\.12 +1\.20s +1\.30s +50\.0 MiB +30$`} {
		if !regexp.MustCompile(row).MatchString(out) {
			t.Errorf("no row matching %s:\n%s", row, out)
		}
	}
}

// TestRun_Interrupted: a cancelled context ends the crowd with what it
// has and ErrInterrupted, and stops the server it started.
func TestRun_Interrupted(t *testing.T) {
	t.Parallel()
	m := marker(t)
	cfg, logs := config(t, m, 2)
	cfg.Lease = 10 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for !strings.Contains(logs.String(), "readers against") {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Second)
		cancel()
	}()
	r, err := Run(ctx, cfg)
	if !errors.Is(err, ErrInterrupted) || r == nil || !r.Interrupted || r.OK != 0 {
		t.Fatalf("Run: %+v, %v: want an interrupted report with no reader ok", r, err)
	}
	gone(t, m, r.ServerPID)
}
