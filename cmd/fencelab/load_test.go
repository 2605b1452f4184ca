package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine/pgtest"
)

// loadReportOf runs `fencelab load --json` with args, under marker m, and
// decodes its report. It fails the test unless the command exits 0.
func loadReportOf(t *testing.T, m string, args ...string) loadReport {
	t.Helper()
	// Few spare schemas: the tests share one Postgres, and a child server
	// would otherwise make a hundred pairs in advance.
	args = append([]string{"load", "--json", "--serve-flag=--spare-runs=2"}, args...)
	stdout, stderr, code := fencelab(t, []string{m}, args...)
	if code != 0 {
		t.Fatalf("fencelab %s: exit %d\nstderr: %s", strings.Join(args, " "), code, stderr)
	}
	var r loadReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("fencelab %s: stdout is not one JSON report: %v\n%s", strings.Join(args, " "), err, stdout)
	}
	t.Logf("%s: ok=%d busy=%d errors=%d %v p50=%dms max=%dms peak rss=%v db=%v", strings.Join(args, " "),
		r.OK, r.Busy, r.Errors, r.ErrorMessages, r.RunToVerdictMS.P50, r.RunToVerdictMS.Max, deref(r.PeakRSSBytes), deref(r.PeakDBConnections))
	return r
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// gone checks that the fencelab serve a load started has been reaped, by
// its pid, and that nothing it started (workers) is left under the marker.
func gone(t *testing.T, m string, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatal("the report names no server pid")
	}
	if st := pgtest.ProcState(pid); st != 0 {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), "serve") {
			t.Errorf("the server (pid %d) is still there after the load returned: state %c", pid, st)
		}
	}
	if left := marked(t, m); len(left) > 0 {
		t.Errorf("left running after the load returned:\n%s", strings.Join(left, "\n"))
	}
}

// TestLoad_OwnServer: three readers against a server of its own all get
// a correct build's verdict, and the server is gone when the load returns.
func TestLoad_OwnServer(t *testing.T) {
	t.Parallel()
	m := marker(t)
	r := loadReportOf(t, m, "--readers", "3")
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
	gone(t, m, r.ServerPID)
}

// TestLoad_BusyIsCounted: with room for one run, three readers at once
// cannot all run: the server answers busy, and busy is what they count.
func TestLoad_BusyIsCounted(t *testing.T) {
	t.Parallel()
	m := marker(t)
	r := loadReportOf(t, m, "--serve-flag=--max-runs=1", "--readers", "3", "--ramp", "0")
	if r.Busy < 1 || r.OK < 1 || r.Errors != 0 || r.OK+r.Busy != 3 {
		t.Errorf("ok=%d busy=%d errors=%d %v: want one ok at least, one busy at least, no error", r.OK, r.Busy, r.Errors, r.ErrorMessages)
	}
	if r.Stats != nil && r.Stats.PeakRuns > 1 {
		t.Errorf("peak runs %d with --max-runs=1", r.Stats.PeakRuns)
	}
	gone(t, m, r.ServerPID)
}

// TestLoad_URL loads a server that is already running and prints the table.
func TestLoad_URL(t *testing.T) {
	t.Parallel()
	s := serve(t, "DATABASE_URL="+pgtest.DSN(t))
	stdout, stderr, code := fencelab(t, nil, "load", "--url", s.url, "--readers", "2", "--lease", "300ms", "--pace", "0s")
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, stderr)
	}
	for _, want := range []string{"readers  ", "ok  ", "busy  ", "errors  ", "p50 ", "p95 ", "max ", "peak RSS ", "peak Postgres connections "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table has no %q:\n%s", want, stdout)
		}
	}
	if !regexp.MustCompile(`(?m)^ok +2$`).MatchString(stdout) {
		t.Errorf("want ok 2:\n%s", stdout)
	}
	// The readers ended their sessions: the server is left as found.
	resp, err := http.Get(s.url + "/api/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ Sessions, Runs int }
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Sessions != 0 {
		t.Errorf("after the load the server has %+v (%v), want no session", st, err)
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
}

// TestLoad_Refused: bad bounds are one line and exit 2, before any server
// starts or any request is sent.
func TestLoad_Refused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--readers", "0"}, "--readers 0 must be between 1 and 1000"},
		{[]string{"--readers", "1001"}, "--readers 1001 must be between 1 and 1000"},
		{[]string{"--timeout", "11m"}, "--timeout"},
		{[]string{"--timeout", "0s"}, "--timeout"},
		{[]string{"--ramp", "-1s"}, "--ramp"},
		{[]string{"--lease", "1ms"}, "--lease"},
		{[]string{"--ordering", "free-play"}, "--ordering"},
		{[]string{"--url", "http://example.com"}, "--allow-remote"},
		{[]string{"--url", "http://10.0.0.1:8080"}, "--allow-remote"},
		{[]string{"--url", "http://127.0.0.1:8080/s/abc"}, "--url"},
		{[]string{"--url", "ftp://127.0.0.1"}, "--url"},
		{[]string{"--url", "http://127.0.0.1:8080", "--serve-flag=--max-runs=2"}, "--serve-flag"},
		{[]string{"--serve-flag=--max-runs=0"}, "--max-runs 0"}, // the server's own refusal, passed on
		{[]string{"--readers", "abc"}, `--readers "abc" is not a number`},
		{[]string{"--readers", "1,0"}, "not 0"},
		{[]string{"--readers", "1,1001"}, "not 1001"},
		{[]string{"--readers", "1,1,1,1,1,1,1,1,1,1,1"}, "11 loads: at most 10"},
		{[]string{"--readers", "1,x"}, `"x" is not a number of readers`},
		{[]string{"--readers", "1,,2"}, "entry 2 is empty"},
		{[]string{"--readers", "1,"}, "entry 2 is empty"},
		{[]string{"--readers", "600,600,600,600,600,600,600,600,600"}, "5400 readers in all: at most 5000"},
		{[]string{"--readers", "1,2", "--settle", "-1s"}, "--settle"},
		{[]string{"--readers", "1,2", "--settle", "3m"}, "--settle"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			_, stderr, code := fencelab(t, nil, append([]string{"load"}, c.args...)...)
			if code != 2 {
				t.Errorf("exit %d, want 2\nstderr: %s", code, stderr)
			}
			if lines := strings.Split(strings.TrimSpace(stderr), "\n"); len(lines) != 1 || !strings.Contains(lines[0], c.want) {
				t.Errorf("stderr %q: want one line with %q", stderr, c.want)
			}
		})
	}
}

// TestLoad_Series: --readers 1,2 runs two loads one after the other
// against one server of its own, settling between them, and reports both
// with the second's p50 as a ratio to the first's.
func TestLoad_Series(t *testing.T) {
	t.Parallel()
	m := marker(t)
	args := []string{"load", "--json", "--serve-flag=--spare-runs=2", "--readers", "1,2"}
	stdout, stderr, code := fencelab(t, []string{m}, args...)
	if code != 0 {
		t.Fatalf("fencelab %s: exit %d\nstderr: %s", strings.Join(args, " "), code, stderr)
	}
	var s loadSeries
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("stdout is not one JSON series: %v\n%s", err, stdout)
	}
	if len(s.Loads) != 2 {
		t.Fatalf("%d loads, want 2: %s\nstderr: %s", len(s.Loads), stdout, stderr)
	}
	for i, want := range []int{1, 2} {
		r := s.Loads[i]
		t.Logf("load %d: readers=%d ok=%d busy=%d errors=%d %v p50=%dms ratio=%v pid=%d url=%s",
			i+1, r.Readers, r.OK, r.Busy, r.Errors, r.ErrorMessages, r.RunToVerdictMS.P50, deref(r.P50Ratio), r.ServerPID, r.URL)
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
	if !strings.Contains(stderr, "settle: no run in flight") {
		t.Errorf("stderr says nothing of settling between the loads:\n%s", stderr)
	}
	if strings.Count(stderr, "started fencelab serve") != 1 {
		t.Errorf("want one server started:\n%s", stderr)
	}
	gone(t, m, a.ServerPID)
}

// TestLoad_SeriesTable: a series prints one table, a row per load, with
// the first load named as the baseline of the ratios.
func TestLoad_SeriesTable(t *testing.T) {
	t.Parallel()
	rss, db := int64(50<<20), 30
	load := func(readers, ok int, p50 int64, ratio *float64) *loadReport {
		r := &loadReport{URL: "http://127.0.0.1:1", ServerPID: 42, Command: json.RawMessage(`{"ordering":"zombie-first","lease_ms":1000,"pace_ms":900}`),
			Readers: readers, OK: ok, Errors: readers - ok, TimeoutMS: 120000, PeakRSSBytes: &rss, PeakDBConnections: &db, P50Ratio: ratio}
		r.RunToVerdictMS.P50, r.RunToVerdictMS.P95, r.RunToVerdictMS.Max = p50, p50+100, p50+200
		if ok < readers {
			r.ErrorMessages = []errorCount{{Message: "the run failed", Count: readers - ok}}
		}
		return r
	}
	one, ratio := 1.0, 1.125
	base := int64(6400)
	s := &loadSeries{Loads: []*loadReport{load(1, 1, 6400, &one), load(60, 59, 7200, &ratio)}, BaselineP50MS: &base, SettleMS: 5000}
	out := s.table()
	for _, want := range []string{
		"  the first load (1 reader), p50 6.40s: the column p50 ×1 reader is",
		"readers  ok  busy  errors  p50    p95    max    p50 ×1 reader  peak RSS  ",
		"errors, 60 readers  1× the run failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table has no %q:\n%s", want, out)
		}
	}
	for _, row := range []string{`(?m)^1 +1 +0 +0 +6\.40s +6\.50s +6\.60s +1\.00 +50\.0 MiB +30$`, `(?m)^60 +59 +0 +1 +7\.20s +7\.30s +7\.40s +1\.12 +50\.0 MiB +30$`} {
		if !regexp.MustCompile(row).MatchString(out) {
			t.Errorf("no row matching %s:\n%s", row, out)
		}
	}
}

// TestLoad_KilledLeavesNothing: SIGKILL gives the load no chance to stop
// its server; the parent-death signal does, and the server then stops its
// runs and workers.
func TestLoad_KilledLeavesNothing(t *testing.T) {
	t.Parallel()
	m := marker(t)
	p := start(t, []string{"DATABASE_URL=" + pgtest.DSN(t), m}, "load", "--readers", "2", "--lease", "5s", "--serve-flag=--spare-runs=2")
	line := p.waitLine(t, "started fencelab serve (pid", 60*time.Second)
	pid, _ := strconv.Atoi(regexp.MustCompile(`pid (\d+)`).FindStringSubmatch(line)[1])
	p.waitLine(t, "readers against", 30*time.Second)
	eventually(t, 20*time.Second, "workers running", func() (bool, string) {
		left := marked(t, m)
		return len(left) >= 4, strings.Join(left, "\n") // the load, its server, two workers at least
	})
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	eventually(t, 20*time.Second, "the server and its workers gone", func() (bool, string) {
		left := marked(t, m)
		st := pgtest.ProcState(pid) // reaped, or a zombie if nothing reaps orphans here
		return len(left) == 0 && (st == 0 || st == 'Z'), fmt.Sprintf("server state %q; %s", st, strings.Join(left, "\n"))
	})
}
