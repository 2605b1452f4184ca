package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/jackc/pgx/v5"
)

// Peers: several servers behind one reverse proxy, on one Postgres. A
// session lives on the instance that made it (its runs' worker processes
// are that machine's); the others learn where from a table of the
// Postgres they already share, and pass a request for it on to its
// instance (see server's forwarding). Each instance's row says where the
// others reach it; its sessions' rows name it. The rows of an instance
// that is gone — its advisory lock free — are deleted by the next
// instance to start, as its schemas are.

// peersSchema holds the peers' tables. It does not start with fl_, so
// the sweep of gone instances' run schemas never drops it.
const peersSchema = "fencelab_peers"

// The peers' statements: the server's own bookkeeping, not the queue's,
// so they live here rather than in engine/queries.go.
const (
	peersSetupSQL = `CREATE SCHEMA IF NOT EXISTS fencelab_peers;
CREATE TABLE IF NOT EXISTS fencelab_peers.instances (
    id      text        PRIMARY KEY,
    url     text        NOT NULL,
    started timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS fencelab_peers.sessions (
    id       text PRIMARY KEY,
    instance text NOT NULL REFERENCES fencelab_peers.instances (id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS sessions_instance ON fencelab_peers.sessions (instance);`
	peerJoinSQL = `INSERT INTO fencelab_peers.instances (id, url) VALUES ($1, $2)
ON CONFLICT (id) DO UPDATE SET url = EXCLUDED.url`
	peerLeaveSQL      = `DELETE FROM fencelab_peers.instances WHERE id = $1`
	peerListSQL       = `SELECT id FROM fencelab_peers.instances WHERE id <> $1`
	peerSessionAddSQL = `INSERT INTO fencelab_peers.sessions (id, instance) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`
	peerSessionDelSQL = `DELETE FROM fencelab_peers.sessions WHERE id = $1 AND instance = $2`
	peerOwnerSQL      = `SELECT i.url FROM fencelab_peers.sessions s JOIN fencelab_peers.instances i ON i.id = s.instance
 WHERE s.id = $1 AND i.id <> $2`
)

// joinPeers makes the peers' tables if need be and says where this
// instance is reached. The caller holds the instance lock.
func (m *Manager) joinPeers(ctx context.Context) error {
	if m.cfg.AdvertiseURL == "" {
		return nil
	}
	err := pgx.BeginFunc(ctx, m.lockConn, func(tx pgx.Tx) error {
		st := engine.SchemaLock(peersSchema)
		if _, err := tx.Exec(ctx, st.SQL, st.Args...); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, peersSetupSQL); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, peerJoinSQL, m.instance, m.cfg.AdvertiseURL)
		return err
	})
	if err != nil {
		return fmt.Errorf("join the other instances: %w", engine.ErrUnavailable)
	}
	return nil
}

// sweepPeers deletes the rows of instances that are gone (their lock is
// free), and so their sessions' rows.
func (m *Manager) sweepPeers(ctx context.Context) error {
	if m.cfg.AdvertiseURL == "" {
		return nil
	}
	m.lockMu.Lock()
	defer m.lockMu.Unlock()
	rows, err := m.lockConn.Query(ctx, peerListSQL, m.instance)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, id := range ids {
		free, err := m.tryInstanceLock(ctx, id)
		if err != nil {
			return err
		}
		if !free {
			continue
		}
		_, err = m.lockConn.Exec(ctx, peerLeaveSQL, id)
		if uerr := m.unlockInstance(ctx, id); err == nil {
			err = uerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// tryInstanceLock takes a gone instance's lock, if nobody holds it: then
// that instance is gone. unlockInstance gives it back.
func (m *Manager) tryInstanceLock(ctx context.Context, instance string) (bool, error) {
	st := engine.AdvisoryTryLock(instanceKey(instance))
	var free bool
	err := m.lockConn.QueryRow(ctx, st.SQL, st.Args...).Scan(&free)
	return free, err
}

func (m *Manager) unlockInstance(ctx context.Context, instance string) error {
	st := engine.AdvisoryUnlock(instanceKey(instance))
	_, err := m.lockConn.Exec(ctx, st.SQL, st.Args...)
	return err
}

// peerSessionAdd records that a session lives here, so that a request for
// it reaching another instance is passed on. A database that does not
// answer costs the session nothing but that.
func (m *Manager) peerSessionAdd(id string) {
	if m.cfg.AdvertiseURL == "" {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 2*time.Second)
	defer cancel()
	if _, err := m.cfg.Pool.Exec(ctx, peerSessionAddSQL, id, m.instance); err != nil {
		m.cfg.Log.Warn("could not tell the other instances of a session", "err", dbErr(err))
	}
}

// peerSessionDel forgets a session that has ended.
func (m *Manager) peerSessionDel(id string) {
	if m.cfg.AdvertiseURL == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := m.cfg.Pool.Exec(ctx, peerSessionDelSQL, id, m.instance); err != nil {
		m.cfg.Log.Warn("could not tell the other instances a session ended", "err", dbErr(err))
	}
}

// leavePeers deletes this instance's row, and so its sessions'.
func (m *Manager) leavePeers() {
	if m.cfg.AdvertiseURL == "" || m.lockConn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := m.lockConn.Exec(ctx, peerLeaveSQL, m.instance); err != nil {
		m.cfg.Log.Warn("could not leave the other instances", "err", dbErr(err))
	}
}

// SweepPeers forgets the instances that are gone, and their sessions: a
// request for one of them is then answered as for any unknown session.
func (m *Manager) SweepPeers(ctx context.Context) {
	if err := m.sweepPeers(ctx); err != nil {
		m.cfg.Log.Warn("could not forget the instances that are gone", "err", dbErr(err))
	}
}

// Owner returns where the instance that owns session id is reached, when
// it is another live instance than this one; ok is false when no other
// instance owns it (or nobody can tell).
func (m *Manager) Owner(ctx context.Context, id string) (url string, ok bool) {
	if m.cfg.AdvertiseURL == "" || len(id) > 64 {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := m.cfg.Pool.QueryRow(ctx, peerOwnerSQL, id, m.instance).Scan(&url)
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			m.cfg.Log.Warn("could not ask which instance owns a session", "err", dbErr(err))
		}
		return "", false
	}
	return url, true
}

// Has reports whether session id lives on this instance.
func (m *Manager) Has(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessions[id] != nil
}

// dbErr is an error for the log without what a connection error says of
// where and as whom it connected.
func dbErr(err error) string {
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		return "SQLSTATE " + pe.SQLState()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer in time"
	}
	return "the database did not answer"
}
