package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// An instance's identity on its Postgres, which other instances may share:
//
//   - its advisory lock, held by a connection of its own (lockConn) for as
//     long as it lives: Postgres frees it when that session ends, so a
//     killed instance's lock is free;
//   - its row in fencelab_peers.instances, whose seen it sets every
//     heartbeat through the pool.
//
// A lock alone is not proof of death: a restart of Postgres, or a
// connection a cancelled query closed, frees it while the instance lives
// on. So an instance is gone only when its lock is free AND its row has
// not been seen for GoneAfter, and that on two sweeps at least GoneAfter
// apart; only then are its schemas, roles and rows dropped. A live
// instance that lost its lock takes it again within a second of the
// database's return (watchLock), and its heartbeat makes its row seen
// again, well inside that window. While it holds no lock it says so
// (Healthy) and starts no run.

const (
	// lockCheckEvery is how often the lock's connection is asked whether
	// it is alive; lockRetryEvery, how often a lost lock is taken again.
	lockCheckEvery = time.Second
	lockRetryEvery = 250 * time.Millisecond
	// heartbeatEvery is how often an instance marks its row seen.
	heartbeatEvery = 2 * time.Second
)

// The identity's statements: the server's own bookkeeping.
const (
	peerSeenSQL = `INSERT INTO fencelab_peers.instances (id, url) VALUES ($1, $2)
ON CONFLICT (id) DO UPDATE SET url = EXCLUDED.url, seen = now()
RETURNING xmax = 0`
	// peerStaleSQL lists the instances not seen for $2, but this one.
	peerStaleSQL = `SELECT id, seen < now() - $2::interval FROM fencelab_peers.instances WHERE id <> $1`
	peerMineSQL  = `SELECT id FROM fencelab_peers.sessions WHERE instance = $1`
)

// ErrLockLost says the instance holds no lock on its database for the
// moment: it is taking it again, and starts no run meanwhile.
var ErrLockLost = errors.New("this server lost its lock on the database (a restart or an outage) and is taking it again")

// identity is the instance's lock and what watches it.
type identity struct {
	mu       sync.Mutex // one user of conn at a time
	conn     *pgx.Conn  // holds the lock; nil while it is being taken again
	lost     time.Time  // when the lock was lost; zero while it is held
	suspects map[string]time.Time
	lastPeer time.Time // the last sweep of the peers a forwarding failure asked for
}

// takeLock opens the lock's connection and takes the instance's lock:
// blocking at start (nobody else may hold a new instance's key), trying
// once when it is taken again.
func (m *Manager) takeLock(ctx context.Context, wait bool) (*pgx.Conn, error) {
	cfg := m.cfg.Pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "fencelab instance lock"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("instance lock: %w", engine.ErrUnavailable)
	}
	st := advisoryTryLock(instanceKey(m.instance))
	if wait {
		st = advisoryLock(instanceKey(m.instance))
	}
	var got bool
	if wait {
		_, err = conn.Exec(ctx, st.SQL, st.Args...)
		got = err == nil
	} else {
		err = conn.QueryRow(ctx, st.SQL, st.Args...).Scan(&got)
	}
	if err != nil || !got {
		_ = conn.Close(context.Background())
		if err == nil {
			err = errors.New("another session holds it for the moment")
		}
		return nil, fmt.Errorf("instance lock: %w", err)
	}
	return conn, nil
}

// Healthy says whether the instance holds its lock: nil, or ErrLockLost
// with how long ago it was lost.
func (m *Manager) Healthy() error {
	m.id.mu.Lock()
	defer m.id.mu.Unlock()
	if m.id.lost.IsZero() {
		return nil
	}
	return fmt.Errorf("%w (%v ago)", ErrLockLost, time.Since(m.id.lost).Round(time.Second))
}

// watchLock asks the lock's connection every second whether it is alive,
// and when it is not, takes the lock again on a new one, as soon as the
// database answers; then marks the row seen and records the sessions
// again (a peer may have forgotten them).
func (m *Manager) watchLock() {
	defer m.bg.Done()
	t := time.NewTicker(lockCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		if m.lockAlive() {
			continue
		}
		m.cfg.Log.Warn("the instance lock was lost with its connection; taking it again", "instance", m.instance)
		for m.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
			conn, err := m.takeLock(ctx, false)
			cancel()
			if err == nil {
				m.id.mu.Lock()
				old := m.id.conn
				m.id.conn, m.id.lost = conn, time.Time{}
				m.id.mu.Unlock()
				if old != nil {
					_ = old.Close(context.Background())
				}
				m.cfg.Log.Info("took the instance lock again", "instance", m.instance)
				m.heartbeat()
				break
			}
			select {
			case <-m.ctx.Done():
				return
			case <-time.After(lockRetryEvery):
			}
		}
	}
}

// lockAlive pings the lock's connection; a dead one marks the lock lost.
func (m *Manager) lockAlive() bool {
	m.id.mu.Lock()
	defer m.id.mu.Unlock()
	if m.id.conn != nil {
		ctx, cancel := context.WithTimeout(m.ctx, 3*time.Second)
		err := m.id.conn.Ping(ctx)
		cancel()
		if err == nil {
			return true
		}
		_ = m.id.conn.Close(context.Background())
		m.id.conn = nil
	}
	if m.id.lost.IsZero() {
		m.id.lost = time.Now()
	}
	return false
}

// heartbeats marks the instance's row seen every heartbeatEvery, and
// sweeps the instances that are gone every SweepEvery.
func (m *Manager) heartbeats() {
	defer m.bg.Done()
	beat := time.NewTicker(heartbeatEvery)
	defer beat.Stop()
	// The first sweep at start only suspects; the one that can confirm
	// comes GoneAfter later, then one every SweepEvery.
	sweep := time.NewTimer(m.cfg.Limits.GoneAfter)
	defer sweep.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-beat.C:
			m.heartbeat()
		case <-sweep.C:
			m.sweepGone(m.ctx)
			// A suspect is confirmed or cleared GoneAfter later, not a
			// whole SweepEvery.
			next := m.cfg.Limits.SweepEvery
			m.id.mu.Lock()
			if len(m.id.suspects) > 0 {
				next = min(next, m.cfg.Limits.GoneAfter)
			}
			m.id.mu.Unlock()
			sweep.Reset(next)
		}
	}
}

// heartbeat marks the row seen; when it had to make the row again (a
// peer forgot this instance), it records the instance's sessions again.
func (m *Manager) heartbeat() {
	if m.Healthy() != nil {
		return // a row seen while the lock is not held would say too much
	}
	ctx, cancel := context.WithTimeout(m.ctx, 2*time.Second)
	defer cancel()
	var made bool
	if err := m.cfg.Pool.QueryRow(ctx, peerSeenSQL, m.instance, m.cfg.AdvertiseURL).Scan(&made); err != nil {
		m.cfg.Log.Debug("could not mark this instance seen", "err", dbErr(err))
		return
	}
	if !made {
		return
	}
	m.mu.Lock()
	ids := make([]string, 0, len(m.sessions))
	for id := range m.sessions {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	for _, id := range ids {
		m.peerSessionAdd(id)
	}
}

// gone lists the other instances that look gone now: their lock is free
// and their row is missing or was not seen for GoneAfter. It takes each
// such lock on conn (the caller's, pinned) and leaves it held, so that
// nobody starts under that id while the caller drops what it left;
// release gives them back.
func (m *Manager) gone(ctx context.Context, conn *pgxpool.Conn) (gone []string, release func(), err error) {
	release = func() {}
	ids := map[string]bool{} // every instance something names: true when its row is stale or missing
	rows, err := conn.Query(ctx, peerStaleSQL, m.instance, m.cfg.Limits.GoneAfter.String())
	if err != nil {
		return nil, release, err
	}
	for rows.Next() {
		var id string
		var stale bool
		if err := rows.Scan(&id, &stale); err != nil {
			rows.Close()
			return nil, release, err
		}
		ids[id] = stale
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, release, err
	}
	named, err := m.namedInstances(ctx)
	if err != nil {
		return nil, release, err
	}
	for _, id := range named {
		if _, ok := ids[id]; !ok {
			ids[id] = true // no row: never joined, or left without its schemas
		}
	}
	var held []string
	release = func() {
		for _, id := range held {
			un := advisoryUnlock(instanceKey(id))
			_, _ = conn.Exec(context.WithoutCancel(ctx), un.SQL, un.Args...)
		}
	}
	for id, stale := range ids {
		if !stale || id == m.instance {
			continue
		}
		try := advisoryTryLock(instanceKey(id))
		var free bool
		if err := conn.QueryRow(ctx, try.SQL, try.Args...).Scan(&free); err != nil {
			return nil, release, err
		}
		if free {
			held = append(held, id)
			gone = append(gone, id)
		}
	}
	return gone, release, nil
}

// namedInstances are the instances whose schemas or sandbox roles there
// are, this one's aside.
func (m *Manager) namedInstances(ctx context.Context) ([]string, error) {
	st := schemaList(schemaPrefix)
	rows, err := m.cfg.Pool.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	roles, err := sandbox.ListRoles(ctx, m.cfg.Pool, schemaPrefix)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, n := range append(names, roles...) {
		if id := instanceOf(n); id != "" && id != m.instance && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

// instanceOf is the instance a schema or role name of a server's
// belongs to: fl_<instance>_….
func instanceOf(name string) string {
	parts := strings.SplitN(strings.TrimPrefix(name, schemaPrefix), "_", 2)
	if len(parts) != 2 || !strings.HasPrefix(name, schemaPrefix) {
		return ""
	}
	return parts[0]
}

// sweepGone forgets the instances that have looked gone on two sweeps at
// least GoneAfter apart: their schemas, their roles, their rows and
// their sessions' rows. It returns how many schemas it dropped.
func (m *Manager) sweepGone(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := m.cfg.Pool.Acquire(ctx)
	if err != nil {
		m.cfg.Log.Warn("could not look for the instances that are gone", "err", dbErr(err))
		return 0
	}
	defer conn.Release()
	gone, release, err := m.gone(ctx, conn)
	defer release()
	if err != nil {
		m.cfg.Log.Warn("could not look for the instances that are gone", "err", dbErr(err))
		return 0
	}
	now := time.Now()
	m.id.mu.Lock()
	if m.id.suspects == nil {
		m.id.suspects = map[string]time.Time{}
	}
	confirmed := []string{}
	still := map[string]time.Time{}
	for _, id := range gone {
		since, ok := m.id.suspects[id]
		switch {
		case !ok:
			still[id] = now
		case now.Sub(since) >= m.cfg.Limits.GoneAfter:
			confirmed = append(confirmed, id)
		default:
			still[id] = since
		}
	}
	m.id.suspects = still // an instance seen alive since is no suspect any more
	m.id.mu.Unlock()
	dropped := 0
	for _, id := range confirmed {
		n, err := m.forgetInstance(ctx, id)
		dropped += n
		if err != nil {
			m.cfg.Log.Warn("could not forget an instance that is gone", "instance", id, "err", err)
			continue
		}
		m.cfg.Log.Info("forgot an instance that is gone", "instance", id, "schemas", n)
	}
	return dropped
}

// forgetInstance drops what a gone instance left: its schemas, its runs'
// roles, its row (and so its sessions' rows).
func (m *Manager) forgetInstance(ctx context.Context, id string) (int, error) {
	st := schemaList(schemaPrefix + id + "_")
	rows, err := m.cfg.Pool.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		return 0, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	dropped := 0
	for _, n := range names {
		d := schemaDrop(n)
		if _, err := m.cfg.Pool.Exec(ctx, d.SQL); err != nil {
			return dropped, err
		}
		dropped++
	}
	roles, err := sandbox.ListRoles(ctx, m.cfg.Pool, schemaPrefix+id+"_")
	if err != nil {
		return dropped, err
	}
	for _, r := range roles {
		if err := sandbox.DropRole(ctx, m.cfg.Pool, r); err != nil {
			return dropped, err
		}
	}
	if _, err := m.cfg.Pool.Exec(ctx, peerLeaveSQL, id); err != nil {
		return dropped, err
	}
	return dropped, nil
}
