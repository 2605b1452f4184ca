package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
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
    started timestamptz NOT NULL DEFAULT now(),
    seen    timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE fencelab_peers.instances ADD COLUMN IF NOT EXISTS seen timestamptz NOT NULL DEFAULT now();
CREATE TABLE IF NOT EXISTS fencelab_peers.sessions (
    id       text PRIMARY KEY,
    instance text NOT NULL REFERENCES fencelab_peers.instances (id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS sessions_instance ON fencelab_peers.sessions (instance);`
	peerLeaveSQL      = `DELETE FROM fencelab_peers.instances WHERE id = $1`
	peerSessionAddSQL = `INSERT INTO fencelab_peers.sessions (id, instance) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`
	peerSessionDelSQL = `DELETE FROM fencelab_peers.sessions WHERE id = $1 AND instance = $2`
	peerOwnerSQL      = `SELECT i.url FROM fencelab_peers.sessions s JOIN fencelab_peers.instances i ON i.id = s.instance
 WHERE s.id = $1 AND i.id <> $2`
)

// joinPeers makes the peers' tables if need be and records this instance
// (where the others reach it, when it says; seen now). Every instance
// joins, advertised or not: its row's seen is half of how the others
// tell it is alive (identity.go). The caller holds the instance lock.
func (m *Manager) joinPeers(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, m.cfg.Pool, func(tx pgx.Tx) error {
		if err := playground.LockSchemas(ctx, tx, peersSchema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, peersSetupSQL); err != nil {
			return err
		}
		var made bool
		return tx.QueryRow(ctx, peerSeenSQL, m.instance, m.cfg.AdvertiseURL).Scan(&made)
	})
	if err != nil {
		return fmt.Errorf("join the other instances: %w", engine.ErrUnavailable)
	}
	return nil
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := m.cfg.Pool.Exec(ctx, peerLeaveSQL, m.instance); err != nil {
		m.cfg.Log.Warn("could not leave the other instances", "err", dbErr(err))
	}
}

// SweepPeers is asked for when a request could not be passed on to the
// instance that owns its session: it sweeps the instances that are gone
// in the background, at most every few seconds, on the manager's own
// context (a request's may end halfway through a statement).
func (m *Manager) SweepPeers(context.Context) {
	m.id.mu.Lock()
	due := time.Since(m.id.lastPeer) > 5*time.Second
	if due {
		m.id.lastPeer = time.Now()
	}
	m.id.mu.Unlock()
	if !due || m.ctx.Err() != nil {
		return
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		m.sweepGone(m.ctx)
	}()
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
