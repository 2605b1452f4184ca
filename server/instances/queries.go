package instances

import "github.com/fencelab/fencelab/engine/playground"

// The instances' statements: the server's own bookkeeping, not the
// queue's, so they live here rather than in engine/queries.go.

// peersSchema holds the peers' tables. It does not start with fl_, so the
// sweep of gone instances' run schemas never drops it.
const peersSchema = "fencelab_peers"

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
	// peersReadySQL says whether peersSetupSQL has nothing to do: the
	// last thing it makes is there, and the column it adds. It reads the
	// catalog as tables, with the statement's snapshot.
	peersReadySQL = `SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute a
    JOIN pg_catalog.pg_class c ON c.oid = a.attrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'fencelab_peers' AND c.relname = 'instances' AND a.attname = 'seen' AND NOT a.attisdropped)
  AND EXISTS (SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'fencelab_peers' AND c.relname = 'sessions_instance')`
	peerSeenSQL = `INSERT INTO fencelab_peers.instances (id, url) VALUES ($1, $2)
ON CONFLICT (id) DO UPDATE SET url = EXCLUDED.url, seen = now()
RETURNING xmax = 0`
	// peerStaleSQL lists the instances not seen for $2, but this one.
	peerStaleSQL      = `SELECT id, seen < now() - $2::interval FROM fencelab_peers.instances WHERE id <> $1`
	peerLeaveSQL      = `DELETE FROM fencelab_peers.instances WHERE id = $1`
	peerSessionAddSQL = `INSERT INTO fencelab_peers.sessions (id, instance) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`
	peerSessionDelSQL = `DELETE FROM fencelab_peers.sessions WHERE id = $1 AND instance = $2`
	peerOwnerSQL      = `SELECT i.url FROM fencelab_peers.sessions s JOIN fencelab_peers.instances i ON i.id = s.instance
 WHERE s.id = $1 AND i.id <> $2`
)

// advisoryLock takes a session-level advisory lock and holds it for as
// long as the connection lives: "I am alive".
func advisoryLock(key int64) playground.Statement {
	return playground.Statement{Name: "AdvisoryLock", SQL: "SELECT pg_advisory_lock($1)", Args: []any{key}}
}

// advisoryTryLock takes an advisory lock if nobody holds it: a lock that
// is free means the process that held it is gone.
func advisoryTryLock(key int64) playground.Statement {
	return playground.Statement{Name: "AdvisoryTryLock", SQL: "SELECT pg_try_advisory_lock($1)", Args: []any{key}}
}

// advisoryUnlock gives back a lock taken with advisoryTryLock.
func advisoryUnlock(key int64) playground.Statement {
	return playground.Statement{Name: "AdvisoryUnlock", SQL: "SELECT pg_advisory_unlock($1)", Args: []any{key}}
}
