package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/instances"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgcluster"
	"github.com/fencelab/fencelab/server/servertest"
	"github.com/fencelab/fencelab/server/session"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// privateCluster starts a Postgres of the test's own, to restart: the
// package's shared one serves the other tests meanwhile.
func privateCluster(t *testing.T) *pgcluster.Cluster {
	t.Helper()
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{MaxConnections: 200})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// poolOn is a pool of the cluster's, like each instance's own.
func poolOn(t *testing.T, c *pgcluster.Cluster) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// instanceOn starts a server on the cluster, with its own pool.
func instanceOn(t *testing.T, c *pgcluster.Cluster, tweak func(*api.Config)) *testServer {
	t.Helper()
	return startServer(t, func(cfg *api.Config) {
		cfg.Pool, cfg.DatabaseURL = poolOn(t, c), c.DSN()
		cfg.Limits.GoneAfter, cfg.Limits.SweepEvery = time.Second, 300*time.Millisecond
		if tweak != nil {
			tweak(cfg)
		}
	})
}

// count runs a count on the cluster on a fresh connection: a pool's idle
// ones die with a restart.
func count(t *testing.T, c *pgcluster.Cluster, sql string, args ...any) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// schemasOn counts an instance's schemas on the cluster.
func schemasOn(t *testing.T, c *pgcluster.Cluster, ts *testServer) int {
	t.Helper()
	return count(t, c, "SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)", "fl_"+ts.Sessions.Instance()+"_")
}

// holdLock takes an advisory lock on a connection of the test's own, if
// nobody holds it, and returns what lets it go; nil when another session
// holds it.
func holdLock(t *testing.T, c *pgcluster.Cluster, key int64) (release func()) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	var got bool
	if err := conn.QueryRow(context.Background(), "SELECT pg_try_advisory_lock($1)", key).Scan(&got); err != nil || !got {
		conn.Close(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return nil
	}
	return func() { conn.Close(context.Background()) }
}

// instanceLocks counts the instance locks held on the cluster.
func instanceLocks(t *testing.T, c *pgcluster.Cluster) int {
	t.Helper()
	return count(t, c, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = 'fencelab instance lock'`)
}

// Two instances on one Postgres, and the database restarts under them
// (pg_ctl restart -m fast ends every session: each instance's advisory
// lock is freed). X takes its lock again and says so; a third instance
// starting right after the restart, and Y's sweeps meanwhile, never drop
// X's live schemas; X's run, stepped through the restart, ends with a
// verdict or an error that says why, never a 500.
func TestFault_ALiveInstanceOutlivesARestart(t *testing.T) {
	c := privateCluster(t)
	x := instanceOn(t, c, nil)
	y := instanceOn(t, c, nil)
	s := x.newSession()
	run := s.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":1000}`).Run
	s.cmd(`{"action":"step"}`)
	s.cmd(`{"action":"step"}`)
	live := schemasOn(t, c, x)
	if live == 0 {
		t.Fatal("X's run has no schemas")
	}

	if err := c.Restart(context.Background(), 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// While X holds no lock, its /readyz says so. The test takes X's lock
	// itself as soon as the database is back (X looks for its lock once a
	// second), so X stays without it until the test lets go: judged on a
	// state, not on a race with X's next try.
	if release := holdLock(t, c, instances.Key(x.Sessions.Instance())); release != nil {
		waitFor(t, 15*time.Second, "X to see its lock gone", func() bool { return x.Sessions.Instances().Healthy() != nil })
		if a := x.do("GET", "/readyz", "", "", ""); a.Status != http.StatusServiceUnavailable || !strings.Contains(string(a.Body), "lock") {
			t.Errorf("X's /readyz without its lock: %d %s", a.Status, a.Body)
		}
		release()
	} else {
		// X was back first: only a /readyz read between two reads that
		// both find X without its lock says anything.
		t.Log("X took its lock back before the test could hold it")
		before := x.Sessions.Instances().Healthy()
		a := x.do("GET", "/readyz", "", "", "")
		if before != nil && x.Sessions.Instances().Healthy() != nil && a.Status != http.StatusServiceUnavailable {
			t.Errorf("X's /readyz without its lock: %d %s", a.Status, a.Body)
		}
	}
	// A third instance, started while X may not hold its lock yet.
	z := instanceOn(t, c, nil)
	waitFor(t, 15*time.Second, "X holds its lock again", func() bool { return x.Sessions.Instances().Healthy() == nil && instanceLocks(t, c) == 3 })
	// Long enough for every sweep of Y and Z to have confirmed X gone, if
	// they were going to.
	time.Sleep(3 * time.Second)
	if got := schemasOn(t, c, x); got != live {
		t.Fatalf("X's live schemas: %d before the restart, %d after (another instance dropped them)", live, got)
	}
	for i := 0; ; i++ {
		a := s.try(`{"action":"step"}`)
		if a.Status >= 500 && a.Status != http.StatusServiceUnavailable {
			t.Fatalf("a step after the restart: %d %s", a.Status, a.Body)
		}
		var res struct{ Done bool }
		if a.Status == http.StatusOK {
			a.json(t, &res)
		}
		if res.Done || a.Status != http.StatusOK || i > 10 {
			break
		}
	}
	end := s.waitEvent(30*time.Second, "the run's end", func(e protocol.Event) bool {
		return e.Run == run && (e.Kind == protocol.KindVerdict || (e.Kind == protocol.KindError && e.Error.Message != ""))
	})
	if end.Kind == protocol.KindError && strings.Contains(end.Error.Message, "internal error") {
		t.Fatalf("the run ended saying only %q", end.Error.Message)
	}
	t.Logf("X's run ended: %s", end.Text)
	for _, ts := range []*testServer{x, y, z} {
		if err := ts.Sessions.Instances().Healthy(); err != nil {
			t.Errorf("instance %s: %v", ts.Sessions.Instance(), err)
		}
	}
}

// A frozen owner: X's address answers nothing, and 300 requests for its
// session reach Y. Y passes none on for long, and keeps its own lock: a
// cancelled request no longer closes the connection that holds it.
func TestFault_RequestsForAFrozenOwnerLeaveTheLockAlone(t *testing.T) {
	c := privateCluster(t)
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hole.Close() })
	go func() { // accepts, and never answers: a frozen process's socket
		for {
			conn, err := hole.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
		}
	}()
	x := instanceOn(t, c, func(cfg *api.Config) { cfg.AdvertiseURL = "http://" + hole.Addr().String() })
	y := instanceOn(t, c, nil)
	s := x.newSession()
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 300 * time.Millisecond}
	for range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(fmt.Sprintf("%s/api/sessions/%s", y.base, s.ID))
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	time.Sleep(2 * time.Second) // a lost lock is noticed within a second
	if err := y.Sessions.Instances().Healthy(); err != nil {
		t.Fatalf("Y after 300 requests for a frozen owner: %v", err)
	}
	if n := instanceLocks(t, c); n != 2 {
		t.Fatalf("%d instance locks are held, want X's and Y's", n)
	}
	if schemasOn(t, c, x) == 0 && x.Sessions.Count() == 0 {
		t.Fatal("X was forgotten")
	}
}

// Two instances share one connection budget: each was sized at its start
// to the whole of a small Postgres, and together they are asked for far
// more runs than it has connections for. Every run either starts whole
// (its workers ready) or is refused as busy with why; none fails halfway
// ("worker never became ready", the 3 of 47), since each run's
// and each worker's start reads what is free then.
func TestFault_TwoInstancesShareOneConnectionBudget(t *testing.T) {
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{MaxConnections: 70})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	ctx := context.Background()
	var l session.Limits
	l.Fill()
	l.MaxRuns = 16
	fit, note, err := session.Fit(ctx, poolOn(t, c), l)
	if err != nil {
		t.Fatal(err)
	}
	// Each sized at its start, when the other was not there yet.
	t.Logf("each instance at its start: %s", note)
	fit.MaxRuns = 30
	tweak := func(cfg *api.Config) { cfg.Limits = fit; cfg.Limits.MaxRunsPerSession = 50 }
	a, b := instanceOn(t, c, tweak), instanceOn(t, c, tweak)
	started, busy := 0, 0
	for i := range 2 * fit.MaxRuns {
		ts := a
		if i%2 == 1 {
			ts = b
		}
		s := ts.newSession()
		ans := s.try(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":1000}`)
		switch {
		case ans.Status == http.StatusOK:
			started++
		case ans.Status == http.StatusServiceUnavailable && strings.Contains(ans.errText(), "free"):
			busy++
		default:
			t.Fatalf("run %d of %d: %d %s", i+1, 2*fit.MaxRuns, ans.Status, ans.Body)
		}
	}
	t.Logf("%d runs started whole, %d refused as busy", started, busy)
	if busy == 0 || started == 0 {
		t.Fatalf("%d started and %d refused: the test asked for no more than Postgres has", started, busy)
	}
}

// A run ended while Postgres is down still leaves no schema: its drop
// tries again until the database is back ("could not drop … 57P03", and
// schemas left behind, before).
func TestFault_SchemasAreDroppedThroughAnOutage(t *testing.T) {
	c := privateCluster(t)
	x := instanceOn(t, c, nil)
	s := x.newSession()
	s.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":1000}`)
	if schemasOn(t, c, x) == 0 {
		t.Fatal("the run has no schemas")
	}
	restarted := make(chan error, 1)
	go func() { restarted <- c.Restart(context.Background(), 2*time.Second) }()
	time.Sleep(700 * time.Millisecond) // down now
	ans := s.try(`{"action":"reset"}`)
	t.Logf("reset during the outage: %d %s", ans.Status, ans.Body)
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the run's schemas are dropped once the database is back", func() bool { return schemasOn(t, c, x) == 0 })
}

// A worker that stops because Postgres ended its connection is said as
// such, in its own words: not "from outside the run".
func TestFault_AWorkerTheDatabaseDropsSaysSo(t *testing.T) {
	c := privateCluster(t)
	x := instanceOn(t, c, nil)
	s := x.newSession()
	run := s.cmd(`{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":1000}`).Run
	if n := count(t, c, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'fencelab worker A'"); n != 1 {
		t.Fatalf("terminated %d backends of worker A", n)
	}
	ans := s.try(`{"action":"step"}`)
	s.waitEvent(20*time.Second, "worker A's exit", func(e protocol.Event) bool {
		return e.Run == run && e.Process != nil && e.Process.Change == protocol.ProcExited && e.Actor == "A"
	})
	time.Sleep(500 * time.Millisecond)
	said := []string{ans.errText()}
	for _, e := range s.events(0, run) {
		if e.Kind == protocol.KindError || (e.Kind == protocol.KindNote && e.Note.Code == protocol.NoteStopped) {
			said = append(said, e.Text)
		}
	}
	all := strings.Join(said, " | ")
	t.Logf("%s", all)
	if strings.Contains(all, "outside the run") || !strings.Contains(all, "database") {
		t.Fatalf("a worker the database dropped: %q", all)
	}
}

// A reset while a run is still setting up stops it, and that is no error
// of the server's: the log says nothing at ERROR ("a run failed … context
// canceled" at every such reset, before).
func TestFault_AResetDuringSetupLogsNoError(t *testing.T) {
	var logged servertest.LogBuffer
	ts := startServer(t, func(c *api.Config) {
		c.Log = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	s := ts.newSession()
	for i := range 8 {
		s.try(`{"action":"batch","name":"epoch-check","lease_ms":300}`)
		time.Sleep(time.Duration(i*15) * time.Millisecond) // its cells are setting up
		s.try(`{"action":"reset"}`)
	}
	s.try(`{"action":"reset"}`)
	if strings.Contains(logged.String(), "level=ERROR") {
		t.Fatalf("resets during setup logged errors:\n%s", logged.String())
	}
}

// A load lab that a Postgres restart cuts short says the database went
// away, not "internal error".
func TestFault_ALoadLabCutByARestartSaysWhy(t *testing.T) {
	c := privateCluster(t)
	var logged servertest.LogBuffer
	x := instanceOn(t, c, func(cfg *api.Config) {
		cfg.Log = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	s := x.newSession()
	s.cmd(`{"action":"load","workers":4,"jobs":400,"lease_ms":300}`)
	s.waitEvent(60*time.Second, "the load lab under way", func(e protocol.Event) bool {
		return e.Kind == protocol.KindLoad && e.Load.Phase == experiments.LoadTick
	})
	if err := c.Restart(context.Background(), 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	e := s.waitEvent(60*time.Second, "the load lab's end", func(e protocol.Event) bool {
		return e.Kind == protocol.KindLoad && (e.Load.Phase == experiments.LoadStopped || e.Load.Phase == experiments.LoadFinished)
	})
	t.Logf("%s: %s", e.Load.Phase, e.Text)
	if strings.Contains(e.Text, "internal error") {
		t.Fatalf("the load lab ended saying %q\n%s", e.Text, logged.String())
	}
	waitFor(t, 40*time.Second, "the load lab's schemas dropped", func() bool { return schemasOn(t, c, x) == 0 })
}
