package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// runSchema finds the jobs schema of the one run the server has.
func runSchema(t *testing.T, ts *testServer) string {
	t.Helper()
	var names []string
	rows, err := pgtest.Pool(t).Query(context.Background(), "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1) AND nspname LIKE '%\\_j'", "fl_"+ts.Sessions.Instance()+"_")
	if err != nil {
		t.Fatal(err)
	}
	names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(names) != 1 {
		t.Fatalf("the run's jobs schema: %v %v", names, err)
	}
	return names[0]
}

// Every change Postgres recorded in a run's job_history is one row event
// of the run, exactly once: with six workers claiming, renewing and
// completing at once, transactions commit in another order than they took
// their history seqs, and a feed that kept only "the last seq I saw"
// dropped the ones that committed late (17 of 990 in each of 5 runs).
func TestRowFeed_EveryHistoryRowIsOneRowEvent(t *testing.T) {
	ts := startServer(t, nil)
	pool := pgtest.Pool(t)
	const jobs = 60
	for round := range 3 {
		s := ts.newSession()
		run := s.cmd(`{"action":"run","ordering":"free-play","lease_ms":400}`).Run
		schema := runSchema(t, ts)
		for range 4 {
			s.cmd(`{"action":"add_worker","work_ms":20}`)
		}
		for range jobs {
			s.cmd(`{"action":"add_job"}`)
		}
		history := func() map[int64]bool {
			rows, err := pool.Query(context.Background(), fmt.Sprintf("SELECT seq FROM %s.job_history", pgx.Identifier{schema}.Sanitize()))
			if err != nil {
				t.Fatal(err)
			}
			seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
			m := map[int64]bool{}
			for _, q := range seqs {
				m[q] = true
			}
			return m
		}
		waitFor(t, time.Minute, "every job done", func() bool {
			var n int
			_ = pool.QueryRow(context.Background(), fmt.Sprintf("SELECT count(*) FROM %s.jobs WHERE status = 'done'", pgx.Identifier{schema}.Sanitize())).Scan(&n)
			return n == jobs
		})
		// The workers keep claiming nothing; the history is complete.
		want := history()
		told := map[int64]int{}
		deadline := time.Now().Add(10 * time.Second)
		for {
			clear(told)
			for _, e := range s.events(0, run) {
				if e.Kind == protocol.KindRow {
					told[e.Row.HistorySeq]++
				}
			}
			if len(told) >= len(want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		var missing, doubled, unknown int
		for q := range want {
			if told[q] == 0 {
				missing++
			}
		}
		for q, n := range told {
			if n > 1 {
				doubled++
			}
			if !want[q] {
				unknown++
			}
		}
		t.Logf("round %d: %d history rows, %d row events, %d missing, %d doubled", round, len(want), len(told), missing, doubled)
		if missing+doubled+unknown > 0 {
			t.Fatalf("round %d: of %d history rows, %d never became a row event, %d became two, and %d events name no row", round, len(want), missing, doubled, unknown)
		}
		s.cmd(`{"action":"reset"}`)
		waitFor(t, 20*time.Second, "the run's schemas are dropped", func() bool { return schemasOf(t, ts) == 0 })
	}
}

// The same across a Postgres restart: the workers' connections, the
// listener's and the instance's all end; the workers connect again and
// finish the jobs, the listener catches up from the history, and still
// every history row is one row event.
func TestRowFeed_ThroughAPostgresRestart(t *testing.T) {
	c := privateCluster(t)
	ts := instanceOn(t, c, nil)
	s := ts.newSession()
	run := s.cmd(`{"action":"run","ordering":"free-play","lease_ms":1000}`).Run
	for range 4 {
		s.cmd(`{"action":"add_worker","work_ms":30}`)
	}
	const jobs = 60
	for range jobs {
		s.cmd(`{"action":"add_job"}`)
	}
	schema := ""
	waitFor(t, 10*time.Second, "the run's schema", func() bool {
		conn, err := pgx.Connect(context.Background(), c.DSN())
		if err != nil {
			return false
		}
		defer conn.Close(context.Background())
		return conn.QueryRow(context.Background(), "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'fl\\_%\\_j'").Scan(&schema) == nil
	})
	q := func(sql string) int { return count(t, c, fmt.Sprintf(sql, pgx.Identifier{schema}.Sanitize())) }
	waitFor(t, 30*time.Second, "a third of the jobs done", func() bool { return q("SELECT count(*) FROM %s.jobs WHERE status = 'done'") >= jobs/3 })
	if err := c.Restart(context.Background(), 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "every job done after the restart", func() bool { return q("SELECT count(*) FROM %s.jobs WHERE status = 'done'") == jobs })
	want := q("SELECT count(*) FROM %s.job_history")
	var told map[int64]int
	waitFor(t, 20*time.Second, "every history row told", func() bool {
		told = map[int64]int{}
		for _, e := range s.events(0, run) {
			if e.Kind == protocol.KindRow {
				told[e.Row.HistorySeq]++
			}
		}
		return len(told) >= want
	})
	doubled := 0
	for _, n := range told {
		if n > 1 {
			doubled++
		}
	}
	missing := q("SELECT count(*) FROM %s.job_history") - len(told)
	t.Logf("%d history rows, %d told, %d doubled", want, len(told), doubled)
	if missing != 0 || doubled != 0 || len(told) != want {
		t.Fatalf("through a restart: %d history rows, %d told, %d doubled", want, len(told), doubled)
	}
}
