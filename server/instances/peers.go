package instances

import (
	"context"
	"errors"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Add records that session id lives here, so that a request for it
// reaching another instance is passed on. A database that does not answer
// costs the session nothing but that.
func (in *Instance) Add(id string) {
	if in.cfg.URL == "" {
		return
	}
	ctx, cancel := context.WithTimeout(in.ctx, 2*time.Second)
	defer cancel()
	if _, err := in.cfg.Pool.Exec(ctx, peerSessionAddSQL, id, in.cfg.ID); err != nil {
		in.cfg.Log.Warn("could not tell the other instances of a session", "err", dbErr(err))
	}
}

// Remove forgets a session that has ended.
func (in *Instance) Remove(id string) {
	if in.cfg.URL == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := in.cfg.Pool.Exec(ctx, peerSessionDelSQL, id, in.cfg.ID); err != nil {
		in.cfg.Log.Warn("could not tell the other instances a session ended", "err", dbErr(err))
	}
}

// Owner returns where the instance that owns session id is reached, when
// it is another instance than this one; ok is false when no other
// instance owns it (or nobody can tell).
func (in *Instance) Owner(ctx context.Context, id string) (url string, ok bool) {
	if in.cfg.URL == "" || len(id) > 64 {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := in.cfg.Pool.QueryRow(ctx, peerOwnerSQL, id, in.cfg.ID).Scan(&url)
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			in.cfg.Log.Warn("could not ask which instance owns a session", "err", dbErr(err))
		}
		return "", false
	}
	return url, true
}

// AskSweep is called when a request could not be passed on to the
// instance that owns its session: it sweeps the instances that are gone
// in the background, at most every few seconds, on the instance's own
// context (a request's may end halfway through a statement).
func (in *Instance) AskSweep() {
	in.mu.Lock()
	due := time.Since(in.lastAsk) > 5*time.Second
	if due {
		in.lastAsk = time.Now()
	}
	in.mu.Unlock()
	if !due || in.ctx.Err() != nil {
		return
	}
	in.bg.Add(1)
	go func() {
		defer in.bg.Done()
		in.sweep(in.ctx)
	}()
}

// Sweep forgets now the instances that have looked gone on two sweeps at
// least GoneAfter apart: what they left, their rows and their sessions'
// rows. It returns how many schemas it dropped. The heartbeats call it
// every SweepEvery; a test may call it itself.
func (in *Instance) Sweep(ctx context.Context) int { return in.sweep(ctx) }

func (in *Instance) sweep(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := in.cfg.Pool.Acquire(ctx)
	if err != nil {
		in.cfg.Log.Warn("could not look for the instances that are gone", "err", dbErr(err))
		return 0
	}
	defer conn.Release()
	gone, release, err := in.gone(ctx, conn)
	defer release()
	if err != nil {
		in.cfg.Log.Warn("could not look for the instances that are gone", "err", dbErr(err))
		return 0
	}
	now := time.Now()
	in.mu.Lock()
	confirmed := []string{}
	still := map[string]time.Time{}
	for _, id := range gone {
		since, ok := in.suspects[id]
		switch {
		case !ok:
			still[id] = now
		case now.Sub(since) >= in.cfg.GoneAfter:
			confirmed = append(confirmed, id)
		default:
			still[id] = since
		}
	}
	in.suspects = still // an instance seen alive since is no suspect any more
	in.mu.Unlock()
	dropped := 0
	for _, id := range confirmed {
		n, err := in.forget(ctx, id)
		dropped += n
		if err != nil {
			in.cfg.Log.Warn("could not forget an instance that is gone", "instance", id, "err", err)
			continue
		}
		in.cfg.Log.Info("forgot an instance that is gone", "instance", id, "schemas", n)
	}
	return dropped
}

// gone lists the other instances that look gone now: their lock is free
// and their row is missing or was not seen for GoneAfter. It takes each
// such lock on conn (the caller's, pinned) and leaves it held, so that
// nobody starts under that id while the caller drops what it left;
// release gives them back.
func (in *Instance) gone(ctx context.Context, conn *pgxpool.Conn) (gone []string, release func(), err error) {
	release = func() {}
	ids := map[string]bool{} // every instance something names: true when its row is stale or missing
	rows, err := conn.Query(ctx, peerStaleSQL, in.cfg.ID, in.cfg.GoneAfter.String())
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
	if in.cfg.Leftovers != nil {
		named, err := in.cfg.Leftovers.Owners(ctx)
		if err != nil {
			return nil, release, err
		}
		for _, id := range named {
			if _, ok := ids[id]; !ok {
				ids[id] = true // no row: never joined, or left without its schemas
			}
		}
	}
	var held []string
	release = func() {
		for _, id := range held {
			un := advisoryUnlock(Key(id))
			_, _ = conn.Exec(context.WithoutCancel(ctx), un.SQL, un.Args...)
		}
	}
	for id, stale := range ids {
		if !stale || id == in.cfg.ID {
			continue
		}
		try := advisoryTryLock(Key(id))
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

// forget drops what a gone instance left, then its row (and so its
// sessions' rows).
func (in *Instance) forget(ctx context.Context, id string) (int, error) {
	dropped := 0
	if in.cfg.Leftovers != nil {
		n, err := in.cfg.Leftovers.Forget(ctx, id)
		dropped += n
		if err != nil {
			return dropped, err
		}
	}
	if _, err := in.cfg.Pool.Exec(ctx, peerLeaveSQL, id); err != nil {
		return dropped, err
	}
	return dropped, nil
}

// dbErr is an error for the log without what a connection error says of
// where and as whom it connected.
func dbErr(err error) string {
	if state, ok := fault.SQLState(err); ok {
		return "SQLSTATE " + state
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer in time"
	}
	return "the database did not answer"
}
