package session

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/fault"
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

// Fit reads how many connections the database allows, how many clients
// other than fencelab's hold now, and how many the other live fencelab
// instances on it have reserved (their rows in fencelab_peers.instances),
// and narrows l so that its runs' workers fit in the rest: a server never
// makes Postgres refuse its own workers, and two servers on one Postgres
// share one budget rather than each counting it whole at its start. It
// returns the limits, with Connections set to what they reserve, and a
// sentence saying what it found.
func Fit(ctx context.Context, pool *pgxpool.Pool, l Limits) (Limits, string, error) {
	var maxConns, reserved, inUse, others int
	err := pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
	                                  current_setting('superuser_reserved_connections')::int,
	                                  (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'
	                                      AND NOT starts_with(coalesce(application_name, ''), 'fencelab'))::int`).Scan(&maxConns, &reserved, &inUse)
	if err != nil {
		return l, "", fmt.Errorf("read max_connections: %w", engine.ErrUnavailable)
	}
	// The other instances' reservations; no table yet means no instance.
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(conns), 0)::int FROM fencelab_peers.instances WHERE seen > now() - $1::interval`,
		l.goneAfter().String()).Scan(&others); err != nil {
		others = 0
	}
	room := maxConns - reserved - inUse - others - PoolSize(l) - extraConnections - marginOfConns
	fit := l
	for fit.MaxRuns > 1 && WorkerConnections(fit)+2*fit.MaxWorkers > room {
		fit.MaxRuns--
	}
	fit.MaxRunsPerSession = min(fit.MaxRunsPerSession, max(2, fit.MaxRuns))
	fit.Connections = WorkerConnections(fit) + 2*fit.MaxWorkers + PoolSize(fit) + extraConnections
	note := fmt.Sprintf("Postgres allows %d connections, other clients hold %d and other fencelab servers have reserved %d: room for %d runs at once", maxConns, inUse, others, fit.MaxRuns)
	if fit.MaxRuns < l.MaxRuns {
		note += fmt.Sprintf(" (fewer than --max-runs %d; raise max_connections to %d for them)", l.MaxRuns, ConnectionsFor(l)+inUse+others)
	}
	if room < 4 {
		return fit, note, fmt.Errorf("Postgres has room for no run: %d connections allowed, %d held by other clients, %d reserved by other fencelab servers: %w", maxConns, inUse, others, engine.ErrUnavailable)
	}
	return fit, note, nil
}

// roomForRun reads, at a run's start, how many connections Postgres has
// free now, whoever holds the others (every instance's workers among
// them): a run whose workers would not get theirs is refused as busy,
// rather than failing halfway with "the database is unavailable".
func (m *Manager) roomForRun(ctx context.Context, need int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var free int
	err := m.cfg.Pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
	    - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int`).Scan(&free)
	if err != nil {
		return fault.Errorf(fault.Unavailable, "could not ask Postgres for room: %v", engine.ErrUnavailable)
	}
	if free-marginOfConns/2 < need {
		return fault.Errorf(fault.Busy, "Postgres has %d connections free, too few for another run's workers; try again when a run has ended", max(free, 0))
	}
	return nil
}
