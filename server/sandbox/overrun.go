package sandbox

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// OverrunGrace is how long a reader's statement may run past the
// statement timeout before its backend is ended. Postgres cancels a
// statement at its timeout only where the statement checks for
// interrupts: one that folds a huge constant while it is planned can run
// on for minutes, holding its memory, and ignore SIGTERM's cancel alike.
// A machine busy with other work is late to cancel too (a claim seen at
// 3.1 s under load, its cancel not yet handled): the grace is the
// statement timeout again, and a case whose statement was ended is
// played again like one that timed out (protocol.Failure.TimedOut).
const OverrunGrace = 2 * time.Second

// overrunEvery is how often WatchOverruns looks.
const overrunEvery = 500 * time.Millisecond

// overrunSQL ends every backend of a sandbox role (RoleSuffix) whose
// statement has run longer than $1, and says which.
const overrunSQL = `SELECT pid, usename::text, extract(epoch FROM clock_timestamp() - query_start)::float8, pg_terminate_backend(pid)
  FROM pg_stat_activity
 WHERE state = 'active' AND usename LIKE '%\` + RoleSuffix + `' AND query_start < clock_timestamp() - $1::interval`

// Overrun is a reader's statement EndOverruns ended.
type Overrun struct {
	Pid     int
	Role    string
	Ran     time.Duration
	Stopped bool // pg_terminate_backend said it signalled the backend
}

// EndOverruns ends, with pg_terminate_backend, every backend of a sandbox
// role whose statement has run longer than the statement timeout and
// OverrunGrace, and returns them. Only that backend's session ends;
// Postgres restarts nothing.
func EndOverruns(ctx context.Context, db *pgxpool.Pool) ([]Overrun, error) {
	limit := settingDuration("statement_timeout") + OverrunGrace
	rows, err := db.Query(ctx, overrunSQL, limit.String())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Overrun
	for rows.Next() {
		var o Overrun
		var secs float64
		if err := rows.Scan(&o.Pid, &o.Role, &secs, &o.Stopped); err != nil {
			return nil, err
		}
		o.Ran = time.Duration(secs * float64(time.Second))
		out = append(out, o)
	}
	return out, rows.Err()
}

// WatchOverruns calls EndOverruns twice a second until stop is called,
// and logs each statement it ends (a warning: a reader's statement that
// outlived its timeout is a stranger's attempt or a bug of ours); once,
// that a backend could not be ended (the server's role lacks
// pg_signal_backend); and once an outage, that it cannot look while the
// database does not answer. It never logs the driver's error itself: a
// failed connection's names the user and the database. stop waits for
// the watch to end.
func WatchOverruns(db *pgxpool.Pool, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(overrunEvery)
		defer t.Stop()
		down, unsignalled := false, false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
			ended, err := EndOverruns(qctx, db)
			qcancel()
			switch {
			case err != nil && ctx.Err() == nil && !down:
				down = true
				log.Warn("readers' statements that outlive their timeout cannot be looked for: the database does not answer; the watch goes on")
			case err == nil:
				down = false
			}
			for _, o := range ended {
				log.Warn("a reader's statement outlived its timeout: its backend was ended", "role", o.Role, "pid", o.Pid, "ran", o.Ran.Round(time.Millisecond), "ended", o.Stopped)
				if !o.Stopped && !unsignalled {
					unsignalled = true
					log.Warn("a reader's statement that outlived its timeout could not be ended: grant the server's role pg_signal_backend")
				}
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}
