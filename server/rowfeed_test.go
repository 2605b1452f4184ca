package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine/lab"
	"github.com/fencelab/fencelab/engine/pgtest"
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
				if e.Kind == lab.KindRow {
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
