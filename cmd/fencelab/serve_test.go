package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/jackc/pgx/v5"
)

// served is a `fencelab serve` process and its URL.
type served struct {
	*started
	url string
}

func serve(t *testing.T, env ...string) served {
	t.Helper()
	return serveWith(t, nil, env...)
}

// serveWith is serve with more flags.
func serveWith(t *testing.T, flags []string, env ...string) served {
	t.Helper()
	t0 := time.Now()
	p := start(t, env, append([]string{"serve", "--addr", "127.0.0.1:0", "--log-level", "warn", "--spare-runs", "2"}, flags...)...)
	line := p.waitLine(t, "playground at http://", 60*time.Second)
	url := regexp.MustCompile(`http://[0-9.:]+`).FindString(line)
	t.Logf("ready in %v at %s", time.Since(t0).Round(time.Millisecond), url)
	return served{p, url}
}

// post sends a JSON command to a session as its driver.
func post(t *testing.T, url, token, body string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if resp.StatusCode >= 300 {
		t.Fatalf("POST %s %s: %d %s", url, body, resp.StatusCode, b)
	}
	return m
}

// busy gives a server two live runs with frozen workers.
func busy(t *testing.T, s served) {
	t.Helper()
	for _, run := range []string{`{"action":"run","ordering":"free-play"}`, `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":10000}`} {
		sess := post(t, s.url+"/api/sessions", "", "")
		id, tok := sess["id"].(string), sess["token"].(string)
		cmds := s.url + "/api/sessions/" + id + "/commands"
		post(t, cmds, tok, run)
		if strings.Contains(run, "step") {
			post(t, cmds, tok, `{"action":"step"}`)
			post(t, cmds, tok, `{"action":"step"}`) // A frozen by SIGSTOP
		} else {
			post(t, cmds, tok, `{"action":"add_job"}`)
			post(t, cmds, tok, `{"action":"pause_worker","worker":"B"}`)
		}
	}
}

func flSchemas(t *testing.T) int {
	t.Helper()
	var n int
	if err := pgtest.Pool(t).QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'fl\_%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestServe_SignalsLeaveNothingBehind stops a busy `fencelab serve` by
// SIGTERM, by SIGHUP (a closed terminal) and by Ctrl-C (SIGINT): it exits 0 within 10 seconds and leaves
// no worker process and no session schema.
func TestServe_SignalsLeaveNothingBehind(t *testing.T) {
	// Not parallel with the other serve tests: it counts fl_ schemas.
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			m := marker(t)
			s := serve(t, "DATABASE_URL="+pgtest.DSN(t), m)
			busy(t, s)
			// Two runs' pairs, and up to two spare pairs (--spare-runs 2) if
			// the server saw a quiet moment since: on a loaded machine it may.
			if n := flSchemas(t); n < 4 || n > 8 {
				t.Fatalf("%d session schemas before the signal, want 4 to 8", n)
			}
			if n := len(marked(t, m)); n < 5 {
				t.Fatalf("%d processes before the signal, want the server and 4 workers", n)
			}
			t0 := time.Now()
			_ = s.cmd.Process.Signal(sig)
			select {
			case <-s.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the server did not exit within 10s")
			}
			if code := s.cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("exit code %d after %v, want 0", code, sig)
			}
			t.Logf("stopped in %v", time.Since(t0).Round(time.Millisecond))
			if left := marked(t, m); len(left) > 0 {
				t.Errorf("left running: %v", left)
			}
			if n := flSchemas(t); n != 0 {
				t.Errorf("%d session schemas left", n)
			}
		})
	}
}

// TestServe_StopsWithAClassOpen: a busy server with a class open, its
// students' checks playing through the class's line, stops by SIGTERM
// within 10 seconds, exits 0, and leaves no process and no session schema,
// with no part of the stop run out of time; the class and its students
// are still there for the next server (its rows are the database's).
// Not parallel: it counts fl_ schemas, as the test above.
func TestServe_StopsWithAClassOpen(t *testing.T) {
	m := marker(t)
	s := serveWith(t, []string{"--spare-runs", "120"}, "DATABASE_URL="+pgtest.DSN(t), m)
	busy(t, s)
	cl := post(t, s.url+"/api/classes", "", "")
	code, _ := cl["code"].(string)
	classID, _ := cl["class"].(map[string]any)["id"].(string)
	if code == "" || classID == "" {
		t.Fatalf("the class: %v", cl)
	}
	check, err := json.Marshal(map[string]any{"action": "check", "solution": sandbox.Ours()})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Ada", "Bea", "Cy"} {
		j := post(t, s.url+"/api/classes/join", "", fmt.Sprintf(`{"code":%q,"name":%q}`, code, name))
		sess, _ := j["session"].(map[string]any)
		id, _ := sess["id"].(string)
		tok, _ := sess["token"].(string)
		post(t, s.url+"/api/sessions/"+id+"/commands", tok, string(check))
	}
	// The checks are playing: their workers are up beside the four runs'.
	eventually(t, 60*time.Second, "a class's check playing", func() (bool, string) {
		left := marked(t, m)
		return len(left) >= 7, strings.Join(left, "\n")
	})
	t0 := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not exit within 10s of SIGTERM with a class open")
	}
	t.Logf("stopped in %v", time.Since(t0).Round(time.Millisecond))
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	s.mu.Lock()
	out := strings.Join(s.lines, "\n")
	s.mu.Unlock()
	if strings.Contains(out, "closed pool") || strings.Contains(out, "deadline exceeded") {
		t.Errorf("the stop ran out of time:\n%s", out)
	}
	if left := marked(t, m); len(left) > 0 {
		t.Errorf("left running: %v", left)
	}
	if n := flSchemas(t); n != 0 {
		t.Errorf("%d session schemas left", n)
	}
	var students int
	if err := pgtest.Pool(t).QueryRow(context.Background(), `SELECT count(*) FROM fencelab_classes.students WHERE class = $1`, classID).Scan(&students); err != nil || students != 3 {
		t.Errorf("the class's students after the stop: %d %v, want 3", students, err)
	}
}

// TestServe_StopsInTimeWithItsSpares: a server on its own cluster that
// has made its spare pairs of schemas (as many as it has run slots, 120 by
// default) stops within 10 seconds and exits 0. Dropped one pair a
// transaction, 120 took 4.4 s here on a machine with a hostile reader
// beside it, and 10.9 s run by hand under the same load: the stop ran out
// of time (exit 1, "shutdown: context deadline exceeded") and left them
// behind ("closed pool"); sixteen pairs a transaction, four at once, 0.8 to
// 1.5 s. Its own cluster, not the tests' shared one: the private cluster
// commits as a server's does.
func TestServe_StopsInTimeWithItsSpares(t *testing.T) {
	t.Parallel()
	m := marker(t)
	s := serveWith(t, []string{"--spare-runs", "120", "--max-runs", "120", "--prestarted-workers", "0"}, "DATABASE_URL=", m)
	var spares int
	eventually(t, 2*time.Minute, "120 spare pairs made", func() (bool, string) {
		resp, err := http.Get(s.url + "/api/stats")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var st struct {
			SpareRuns int `json:"spare_runs"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return false, err.Error()
		}
		spares = st.SpareRuns
		return spares >= 120, fmt.Sprintf("%d spare pairs", spares)
	})
	t0 := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the server did not exit within 10s of SIGTERM, with %d spare pairs", spares)
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	t.Logf("stopped in %v with %d spare pairs", time.Since(t0).Round(time.Millisecond), spares)
	s.mu.Lock()
	out := strings.Join(s.lines, "\n")
	s.mu.Unlock()
	if strings.Contains(out, "closed pool") || strings.Contains(out, "deadline exceeded") {
		t.Errorf("the stop ran out of time:\n%s", out)
	}
}

// TestServe_SIGKILL: nothing can clean up after a SIGKILL, so nothing may
// need to. Workers die by their parent-death signal; a private cluster by
// its own, with its folder removed by its watchdog; with DATABASE_URL, the
// next server drops the schemas the dead one left.
func TestServe_SIGKILL(t *testing.T) {
	t.Run("own cluster", func(t *testing.T) {
		m := marker(t)
		s := serve(t, "DATABASE_URL=", m)
		// Workers spawned ahead and waiting for a run die the same way:
		// some are there before the kill.
		eventually(t, 20*time.Second, "prestarted workers", func() (bool, string) {
			left := marked(t, m)
			return strings.Contains(strings.Join(left, "\n"), "worker --prestarted"), strings.Join(left, "\n")
		})
		busy(t, s)
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		eventually(t, 20*time.Second, "no worker, postgres or watchdog left", func() (bool, string) {
			left := marked(t, m)
			return len(left) == 0, strings.Join(left, "\n")
		})
	})
	t.Run("DATABASE_URL", func(t *testing.T) {
		m := marker(t)
		s := serve(t, "DATABASE_URL="+pgtest.DSN(t), m)
		busy(t, s)
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		eventually(t, 10*time.Second, "no worker left", func() (bool, string) {
			left := marked(t, m)
			return len(left) == 0, strings.Join(left, "\n")
		})
		if n := flSchemas(t); n < 4 || n > 8 {
			t.Fatalf("%d schemas after SIGKILL; the test expects the dead server's 4, and up to 4 spares", n)
		}
		// The next server drops them once the dead one has looked gone on
		// two sweeps (--gone-after apart): its lock free, its row unseen.
		var dead []string
		rows, err := pgtest.Pool(t).Query(context.Background(), `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'fl\_%'`)
		if err == nil {
			dead, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			t.Fatal(err)
		}
		next := serveWith(t, []string{"--gone-after", "1s"}, "DATABASE_URL="+pgtest.DSN(t), m)
		eventually(t, 20*time.Second, "the dead server's schemas dropped", func() (bool, string) {
			var n int
			if err := pgtest.Pool(t).QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname = ANY($1)`, dead).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 0, fmt.Sprintf("%d of the dead server's %d schemas left", n, len(dead))
		})
		_ = next.cmd.Process.Signal(syscall.SIGTERM)
		<-next.done
	})
}

// TestServe_HealthAndReady checks /healthz and /readyz of a real server.
func TestServe_HealthAndReady(t *testing.T) {
	s := serve(t, "DATABASE_URL="+pgtest.DSN(t))
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"status"`) {
			t.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
	_ = fmt.Sprint()
}

// TestServe_ProfilesOnLoopbackAlone: --pprof serves Go's profiles on a
// loopback address of its own, says where, and not on the API's listener;
// no command line among them.
func TestServe_ProfilesOnLoopbackAlone(t *testing.T) {
	s := serveWith(t, []string{"--pprof", "127.0.0.1:0"}, "DATABASE_URL="+pgtest.DSN(t))
	line := s.waitLine(t, "Go's profiles at http://", 10*time.Second)
	base := regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+`).FindString(line)
	if base == "" {
		t.Fatalf("the profiles' line names no loopback address: %q", line)
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(base + "/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile") {
		t.Errorf("the goroutine profile: %d %.100s", code, body)
	}
	if code, _ := get(base + "/debug/pprof/cmdline"); code == 200 {
		t.Error("the command line is served")
	}
	if code, _ := get(s.url + "/debug/pprof/"); code == 200 {
		t.Error("the API's listener serves the profiles too")
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
}

// TestServe_LoopbackByDefault: with no --addr the server takes connections
// on loopback alone, and says the address it listens on; --addr :PORT opens
// it to every interface and says so. A server that runs visitors' SQL is
// never offered to the room by accident.
func TestServe_LoopbackByDefault(t *testing.T) {
	outside := machineAddr(t)
	dsn := "DATABASE_URL=" + pgtest.DSN(t)
	reach := func(host, port string) error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(host, port), 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}

	// PORT=0 keeps the default host and lets the kernel pick the port.
	p := start(t, []string{dsn, "PORT=0"}, "serve", "--log-level", "warn", "--spare-runs", "0")
	line := p.waitLine(t, "playground at http://", 60*time.Second)
	m := regexp.MustCompile(`http://127\.0\.0\.1:([0-9]+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("the default listener's address is not loopback: %q", line)
	}
	if err := reach("127.0.0.1", m[1]); err != nil {
		t.Fatalf("the printed address does not answer: %v", err)
	}
	if err := reach(outside, m[1]); err == nil {
		t.Errorf("with no --addr the server answers on %s:%s, an address other machines reach", outside, m[1])
	}
	p.mu.Lock()
	for _, l := range p.lines {
		if strings.Contains(l, "every interface") {
			t.Errorf("a loopback server says it listens everywhere: %q", l)
		}
	}
	p.mu.Unlock()

	open := start(t, []string{dsn}, "serve", "--addr", ":0", "--log-level", "warn", "--spare-runs", "0")
	line = open.waitLine(t, "listening on every interface", 60*time.Second)
	m = regexp.MustCompile(`:([0-9]+)\)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no port in %q", line)
	}
	if err := reach(outside, m[1]); err != nil {
		t.Errorf("--addr :0 does not answer on %s: %v", outside, err)
	}
}

// machineAddr is an address of this machine's that is not loopback: what
// another machine on its network would connect to.
func machineAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatal("this machine has no address but loopback: nothing to tell loopback from every interface by")
	return ""
}

// TestParseMemAvailable reads /proc/meminfo's MemAvailable, and nothing
// else, the way prestarted workers are sized to the machine.
func TestParseMemAvailable(t *testing.T) {
	const meminfo = "MemTotal:       24598432 kB\nMemFree:        1000 kB\nMemAvailable:   23812344 kB\nBuffers:          2000 kB\n"
	if got, ok := parseMemAvailable(meminfo); !ok || got != 23812344<<10 {
		t.Errorf("got %d, %v", got, ok)
	}
	for _, bad := range []string{"", "MemFree: 1 kB\n", "MemAvailable: x kB\n", "MemAvailable: 12 MB\n"} {
		if got, ok := parseMemAvailable(bad); ok {
			t.Errorf("%q: %d, want not read", bad, got)
		}
	}
	if avail, ok := memAvailable(); runtime.GOOS == "linux" && (!ok || avail == 0) {
		t.Errorf("this Linux machine's MemAvailable: %d, %v", avail, ok)
	}
}
