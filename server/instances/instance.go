// Package instances is what lets several fencelab servers share one
// Postgres behind one reverse proxy: each instance's identity (an
// advisory lock and a row that says where it is reached), the table of
// which instance holds which session, the sweep that forgets an instance
// that is gone, and the passing on of a request for another instance's
// session to that instance (Forwarder).
//
// A session lives on the instance that made it: its runs' worker
// processes are that machine's. The others learn where from the tables in
// the schema fencelab_peers, and pass a request for it on.
//
// An instance's identity on its Postgres:
//
//   - its advisory lock, held by a connection of its own for as long as
//     it lives: Postgres frees it when that session ends, so a killed
//     instance's lock is free;
//   - its row in fencelab_peers.instances, whose seen it sets every
//     heartbeat through the pool.
//
// A lock alone is not proof of death: a restart of Postgres, or a
// connection a cancelled query closed, frees it while the instance lives
// on. So an instance is gone only when its lock is free AND its row has
// not been seen for GoneAfter, and that on two sweeps at least GoneAfter
// apart; only then is what it left dropped (Leftovers.Forget) and its
// rows deleted. A live instance that lost its lock takes it again within
// a second of the database's return, and its heartbeat makes its row
// seen again, well inside that window. While it holds no lock it says so
// (Healthy).
package instances

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/postgres/pgsetup"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// lockCheckEvery is how often the lock's connection is asked whether
	// it is alive; lockRetryEvery, how often a lost lock is taken again.
	lockCheckEvery = time.Second
	lockRetryEvery = 250 * time.Millisecond
	// heartbeatEvery is how often an instance marks its row seen.
	heartbeatEvery = 2 * time.Second
)

// ErrLockLost says the instance holds no lock on its database for the
// moment: it is taking it again, and starts no run meanwhile.
var ErrLockLost = errors.New("this server lost its lock on the database (a restart or an outage) and is taking it again")

// Leftovers is what an instance leaves in the database beside its rows
// (for the session manager: its runs' schemas and roles), which this
// package finds the owners of and drops for an instance that is gone.
type Leftovers interface {
	// Owners lists every instance that something left names, this one
	// included or not.
	Owners(ctx context.Context) ([]string, error)
	// Forget drops what instance id left, and says how many schemas.
	Forget(ctx context.Context, id string) (int, error)
}

// Config is what an Instance needs.
type Config struct {
	Pool *pgxpool.Pool
	// ID is this instance's id: its lock's key and its row's.
	ID string
	// URL, if set, is where the other instances reach this one: its
	// sessions are recorded, so that a request for one that reaches
	// another instance is passed on here. Empty: nothing is recorded
	// and Owner always says no.
	URL string
	// GoneAfter is how long another instance must look gone (its lock
	// free, its row unseen) on two sweeps before what it left is dropped;
	// SweepEvery, how often the sweep runs.
	GoneAfter, SweepEvery time.Duration
	// Sessions lists this instance's sessions: recorded again when a
	// peer forgot this instance (its row was deleted while it lived).
	Sessions func() []string
	// Leftovers is what a gone instance left; nil: only rows.
	Leftovers Leftovers
	Log       *slog.Logger
}

// An Instance is this server's membership of the instances on its
// Postgres. It is safe for concurrent use.
type Instance struct {
	cfg    Config
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	bg     sync.WaitGroup // the lock's watch, the heartbeats, a sweep asked for

	mu       sync.Mutex // one user of conn at a time
	conn     *pgx.Conn  // holds the lock; nil while it is being taken again
	lost     time.Time  // when the lock was lost; zero while it is held
	suspects map[string]time.Time
	lastAsk  time.Time // the last sweep a forwarding failure asked for
}

// Join takes this instance's lock (waiting for it: nobody else may hold a
// new instance's key), makes the peers' tables if need be, records this
// instance, suspects the instances that look gone (a sweep GoneAfter
// later drops what they left if they still do), and starts the lock's
// watch and the heartbeats. Close ends them.
func Join(ctx context.Context, cfg Config) (*Instance, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Sessions == nil {
		cfg.Sessions = func() []string { return nil }
	}
	if cfg.GoneAfter <= 0 || cfg.SweepEvery <= 0 {
		return nil, fmt.Errorf("instances: GoneAfter and SweepEvery must be positive: %w", engine.ErrInvalidInput)
	}
	conn, err := takeLock(ctx, cfg.Pool, cfg.ID, true)
	if err != nil {
		return nil, err
	}
	in := &Instance{cfg: cfg, conn: conn}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	if err := in.join(ctx); err != nil {
		in.cancel()
		_ = conn.Close(context.Background())
		return nil, err
	}
	in.sweep(ctx)
	in.bg.Add(2)
	go in.watchLock()
	go in.heartbeats()
	return in, nil
}

// ID is this instance's id.
func (in *Instance) ID() string { return in.cfg.ID }

// Close stops the watch and the heartbeats, deletes this instance's row
// (and so its sessions'), and gives up the lock. It is safe to call more
// than once.
func (in *Instance) Close() {
	in.cancel()
	in.bg.Wait()
	in.mu.Lock()
	conn := in.conn
	in.conn = nil
	in.mu.Unlock()
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := in.cfg.Pool.Exec(ctx, peerLeaveSQL, in.cfg.ID); err != nil {
		in.cfg.Log.Warn("could not leave the other instances", "err", dbErr(err))
	}
	_ = conn.Close(context.Background())
}

// Key is the advisory lock key of instance id.
func Key(id string) int64 {
	h := fnv.New64a()
	h.Write([]byte("fencelab instance " + id))
	return int64(h.Sum64())
}

// takeLock opens the lock's connection and takes instance id's lock:
// blocking (wait), or trying once.
func takeLock(ctx context.Context, pool *pgxpool.Pool, id string, wait bool) (*pgx.Conn, error) {
	cfg := pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "fencelab instance lock"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("instance lock: %w", engine.ErrUnavailable)
	}
	st := advisoryTryLock(Key(id))
	if wait {
		st = advisoryLock(Key(id))
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

// join makes the peers' tables if need be and records this instance
// (where the others reach it, when it says; seen now). Every instance
// joins, advertised or not: its row's seen is half of how the others
// tell it is alive. The tables are made once a database (pgsetup.Once):
// where they are in place the join only writes its row.
func (in *Instance) join(ctx context.Context) error {
	err := pgsetup.Once(ctx, in.cfg.Pool, peersSchema, peersReadySQL, peersSetupSQL)
	if err == nil {
		var made bool
		err = in.cfg.Pool.QueryRow(ctx, peerSeenSQL, in.cfg.ID, in.cfg.URL).Scan(&made)
	}
	if err != nil {
		return fmt.Errorf("join the other instances (%s): %w", dbErr(err), engine.ErrUnavailable)
	}
	return nil
}

// Healthy says whether the instance holds its lock: nil, or ErrLockLost
// with how long ago it was lost.
func (in *Instance) Healthy() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.lost.IsZero() {
		return nil
	}
	return fmt.Errorf("%w (%v ago)", ErrLockLost, time.Since(in.lost).Round(time.Second))
}

// watchLock asks the lock's connection every second whether it is alive,
// and when it is not, takes the lock again on a new one, as soon as the
// database answers; then marks the row seen and records the sessions
// again (a peer may have forgotten them).
func (in *Instance) watchLock() {
	defer in.bg.Done()
	t := time.NewTicker(lockCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-in.ctx.Done():
			return
		case <-t.C:
		}
		if in.lockAlive() {
			continue
		}
		in.cfg.Log.Warn("the instance lock was lost with its connection; taking it again", "instance", in.cfg.ID)
		for in.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(in.ctx, 5*time.Second)
			conn, err := takeLock(ctx, in.cfg.Pool, in.cfg.ID, false)
			cancel()
			if err == nil {
				in.mu.Lock()
				old := in.conn
				in.conn, in.lost = conn, time.Time{}
				in.mu.Unlock()
				if old != nil {
					_ = old.Close(context.Background())
				}
				in.cfg.Log.Info("took the instance lock again", "instance", in.cfg.ID)
				in.heartbeat()
				break
			}
			select {
			case <-in.ctx.Done():
				return
			case <-time.After(lockRetryEvery):
			}
		}
	}
}

// lockAlive pings the lock's connection; a dead one marks the lock lost.
func (in *Instance) lockAlive() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.conn != nil {
		ctx, cancel := context.WithTimeout(in.ctx, 3*time.Second)
		err := in.conn.Ping(ctx)
		cancel()
		if err == nil {
			return true
		}
		_ = in.conn.Close(context.Background())
		in.conn = nil
	}
	if in.lost.IsZero() {
		in.lost = time.Now()
	}
	return false
}

// heartbeats marks the instance's row seen every heartbeatEvery, and
// sweeps the instances that are gone every SweepEvery.
func (in *Instance) heartbeats() {
	defer in.bg.Done()
	beat := time.NewTicker(heartbeatEvery)
	defer beat.Stop()
	// The first sweep at start only suspects; the one that can confirm
	// comes GoneAfter later, then one every SweepEvery.
	sweep := time.NewTimer(in.cfg.GoneAfter)
	defer sweep.Stop()
	for {
		select {
		case <-in.ctx.Done():
			return
		case <-beat.C:
			in.heartbeat()
		case <-sweep.C:
			in.sweep(in.ctx)
			// A suspect is confirmed or cleared GoneAfter later, not a
			// whole SweepEvery.
			next := in.cfg.SweepEvery
			in.mu.Lock()
			if len(in.suspects) > 0 {
				next = min(next, in.cfg.GoneAfter)
			}
			in.mu.Unlock()
			sweep.Reset(next)
		}
	}
}

// heartbeat marks the row seen; when it had to make the row again (a
// peer forgot this instance), it records the instance's sessions again.
func (in *Instance) heartbeat() {
	if in.Healthy() != nil {
		return // a row seen while the lock is not held would say too much
	}
	ctx, cancel := context.WithTimeout(in.ctx, 2*time.Second)
	defer cancel()
	var made bool
	if err := in.cfg.Pool.QueryRow(ctx, peerSeenSQL, in.cfg.ID, in.cfg.URL).Scan(&made); err != nil {
		in.cfg.Log.Debug("could not mark this instance seen", "err", dbErr(err))
		return
	}
	if !made {
		return
	}
	for _, id := range in.cfg.Sessions() {
		in.Add(id)
	}
}
