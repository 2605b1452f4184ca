package session

import (
	"context"
	"fmt"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/run/runner"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The connections a server holds besides its workers': its pool, the
// notifier's one, the instance lock's one, and a margin for a person with
// psql.
const (
	extraConnections = 2  // the notifier and the instance lock
	marginOfConns    = 10 // psql, a monitoring probe
)

// PoolSize is the server's own pool for limits l: the receivers' upserts,
// the runs' reads, schema setup and removal. It grows with the runs.
func PoolSize(l Limits) int { return max(20, l.MaxRuns/5) }

// WorkerConnections is how many connections the workers of l's runs may
// hold at once: one per worker, two per scripted run, MaxWorkers for a run
// of free play.
func WorkerConnections(l Limits) int { return 2 * l.MaxRuns }

// ConnectionsFor is the max_connections a Postgres of our own needs for l.
func ConnectionsFor(l Limits) int {
	return WorkerConnections(l) + PoolSize(l) + extraConnections + marginOfConns + 3 // superuser_reserved_connections
}

// Fit reads how many connections the database allows and how many other
// clients hold now, and narrows l so that its runs' workers fit in the
// rest: a server never plans for more workers than Postgres has
// connections. What it finds is a view at its start; what is free when a
// run or a worker starts is read again then (roomForRun), so that several
// servers on one Postgres share its connections as they are, whoever
// started first. It returns the limits and a sentence saying what it
// found.
func Fit(ctx context.Context, pool *pgxpool.Pool, l Limits) (Limits, string, error) {
	var maxConns, reserved, inUse int
	err := pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
	                                  current_setting('superuser_reserved_connections')::int,
	                                  (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int`).Scan(&maxConns, &reserved, &inUse)
	if err != nil {
		return l, "", fmt.Errorf("read max_connections: %w", engine.ErrUnavailable)
	}
	// What is in use now includes this server's own pool so far; count the
	// whole pool as ours.
	room := maxConns - reserved - max(inUse, 1) - (PoolSize(l) - 1) - extraConnections - marginOfConns
	fit := l
	for fit.MaxRuns > 1 && WorkerConnections(fit)+2*fit.MaxWorkers > room {
		fit.MaxRuns--
	}
	fit.MaxRunsPerSession = min(fit.MaxRunsPerSession, max(2, fit.MaxRuns))
	note := fmt.Sprintf("Postgres allows %d connections and %d are in use: room for %d runs at once (each run's start, and each worker's, checks what is free then)", maxConns, inUse, fit.MaxRuns)
	if fit.MaxRuns < l.MaxRuns {
		note += fmt.Sprintf("; fewer than --max-runs %d: raise max_connections to %d for them", l.MaxRuns, ConnectionsFor(l)+inUse)
	}
	if room < 4 {
		return fit, note, fmt.Errorf("Postgres has room for no run: %d connections allowed, %d in use: %w", maxConns, inUse, engine.ErrUnavailable)
	}
	return fit, note, nil
}

// roomForRun reads, at a run's start, how many connections Postgres has
// free now, whoever holds the others (every instance's workers among
// them): a run whose workers would not get theirs is refused as busy,
// rather than failing halfway with "the database is unavailable".
func (m *Manager) roomForRun(ctx context.Context, need int) error {
	return runner.RoomFor(ctx, m.cfg.Pool, need, "another run's workers")
}
