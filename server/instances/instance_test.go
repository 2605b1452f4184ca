package instances

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// forgets is a Leftovers that names the instances it is told of and
// records which it was asked to forget.
type forgets struct {
	mu     sync.Mutex
	named  []string
	forgot []string
}

func (f *forgets) Owners(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.named), nil
}

func (f *forgets) Forget(_ context.Context, id string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgot = append(f.forgot, id)
	return 1, nil
}

func (f *forgets) forgotten() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.forgot)
}

func join(t *testing.T, pool *pgxpool.Pool, id, url string, left Leftovers) *Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, err := Join(ctx, Config{Pool: pool, ID: id, URL: url, GoneAfter: 300 * time.Millisecond, SweepEvery: 100 * time.Millisecond, Leftovers: left})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	return in
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 15s: %s", what)
		}
	}
}

// TestOwner_ASessionIsFoundWhereItLives: a session one instance adds is
// owned, for the other, by the first one's URL; not for the first itself;
// and by nobody once removed, or once its instance has closed.
func TestOwner_ASessionIsFoundWhereItLives(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	a := join(t, pool, "owna", "http://a.example:1", nil)
	b := join(t, pool, "ownb", "http://b.example:2", nil)
	a.Add("s1")
	a.Add("s2")
	if url, ok := b.Owner(ctx, "s1"); !ok || url != "http://a.example:1" {
		t.Errorf("b.Owner(s1) = %q, %v; want a's URL", url, ok)
	}
	if url, ok := a.Owner(ctx, "s1"); ok {
		t.Errorf("a.Owner(s1) = %q: its own session is no other instance's", url)
	}
	a.Remove("s1")
	if url, ok := b.Owner(ctx, "s1"); ok {
		t.Errorf("after Remove, b.Owner(s1) = %q", url)
	}
	if _, ok := b.Owner(ctx, string(make([]byte, 65))); ok {
		t.Error("an id of 65 bytes has an owner")
	}
	a.Close()
	if url, ok := b.Owner(ctx, "s2"); ok {
		t.Errorf("after a closed, b.Owner(s2) = %q: its sessions' rows go with its own", url)
	}
}

// TestHealthy_ALostLockIsTakenAgain: when the lock's connection is cut
// (a restart of Postgres, a cancelled query), the instance says so, then
// takes its lock again and is healthy.
func TestHealthy_ALostLockIsTakenAgain(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	in := join(t, pool, "heal", "", nil)
	if err := in.Healthy(); err != nil {
		t.Fatalf("a new instance: %v", err)
	}
	// The lock's connection is cut, and someone else takes the key before
	// the instance can: it says it holds no lock while that lasts.
	var killed bool
	if err := pool.QueryRow(ctx, `SELECT pg_terminate_backend(l.pid) FROM pg_locks l
		WHERE l.locktype = 'advisory' AND l.granted AND ((l.classid::bigint << 32) | l.objid::bigint) = $1`, Key("heal")).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the lock's connection: %v, %v", killed, err)
	}
	other, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	if _, err := other.Exec(ctx, "SELECT pg_advisory_lock($1)", Key("heal")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lost lock is said", func() bool { return errors.Is(in.Healthy(), ErrLockLost) })
	time.Sleep(2 * lockCheckEvery)
	if !errors.Is(in.Healthy(), ErrLockLost) {
		t.Fatalf("healthy while another holds its lock: %v", in.Healthy())
	}
	if _, err := other.Exec(ctx, "SELECT pg_advisory_unlock($1)", Key("heal")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lock is taken again", func() bool { return in.Healthy() == nil })
	var held int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND ((classid::bigint << 32) | objid::bigint) = $1`, Key("heal")).Scan(&held); err != nil || held != 1 {
		t.Errorf("the lock is held %d times (%v), want once", held, err)
	}
}

// TestSweep_OnlyTheGoneAreForgotten: an instance whose lock is free and
// whose row was not seen for GoneAfter, on two sweeps that far apart, is
// forgotten (what it left, then its row); one whose lock is held, or
// whose row is seen, is not; neither is one named by leftovers alone until
// it has looked gone twice.
func TestSweep_OnlyTheGoneAreForgotten(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	left := &forgets{named: []string{"swpnorow"}}
	in := join(t, pool, "swpme", "", left)
	_ = join(t, pool, "swplive", "", nil) // holds its lock, and its row is seen
	if _, err := pool.Exec(ctx, `INSERT INTO fencelab_peers.instances (id, url, seen) VALUES
		('swpdead', '', now() - interval '1 hour'), ('swpseen', '', now())`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DELETE FROM fencelab_peers.instances WHERE id IN ('swpdead', 'swpseen')`)
	})
	stop := make(chan struct{})
	defer close(stop)
	go func() { // swpseen's heartbeat goes on with its lock free
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				_, _ = pool.Exec(context.Background(), `UPDATE fencelab_peers.instances SET seen = now() WHERE id = 'swpseen'`)
			}
		}
	}()
	if n := in.Sweep(ctx); n != 0 || len(left.forgotten()) != 0 {
		t.Fatalf("the first sweep forgot %v (%d schemas): it may only suspect", left.forgotten(), n)
	}
	waitFor(t, "swpdead and swpnorow forgotten", func() bool {
		f := left.forgotten()
		return slices.Contains(f, "swpdead") && slices.Contains(f, "swpnorow")
	})
	time.Sleep(time.Second)
	for _, id := range left.forgotten() {
		if id != "swpdead" && id != "swpnorow" {
			t.Errorf("forgot %s, which is alive", id)
		}
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fencelab_peers.instances WHERE id = 'swpdead'`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("swpdead's row: %d (%v), want gone", rows, err)
	}
}

// TestJoin_RefusesNoSweepTimes: a configuration without the sweep's
// times is refused before anything is taken.
func TestJoin_RefusesNoSweepTimes(t *testing.T) {
	_, err := Join(context.Background(), Config{Pool: pgtest.Pool(t), ID: "nosweep"})
	if !errors.Is(err, engine.ErrInvalidInput) {
		t.Errorf("Join without GoneAfter: %v, want ErrInvalidInput", err)
	}
}

// TestJoin_TheFirstInstancesOfADatabaseJoinTogether: instances that
// start at once on a database no instance has used all join. Each pool's
// connections have looked for the peers' schema first, as a server's do
// before it joins, so each remembers it absent: the first join made it
// while the others waited for its lock.
func TestJoin_TheFirstInstancesOfADatabaseJoinTogether(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := pgtest.Database(t)
	cfg.MaxConns, cfg.MinConns = 1, 1
	const n = 6
	pools := make([]*pgxpool.Pool, n)
	for i := range pools {
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		if _, err := p.Exec(ctx, "SELECT to_regnamespace('fencelab_peers'), to_regclass('fencelab_peers.instances')"); err != nil {
			t.Fatal(err)
		}
		pools[i] = p
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, p := range pools {
		wg.Go(func() {
			in, err := Join(ctx, Config{Pool: p, ID: fmt.Sprintf("first%d", i), URL: "http://x", GoneAfter: time.Minute, SweepEvery: time.Minute})
			if err == nil {
				in.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("instance %d: %v", i, err)
		}
	}
}

// TestJoin_BesideABusyInstance: an instance joins while another records
// and forgets sessions as fast as it can, as a server's readers come and
// go: the join takes no lock the other's writes wait on (a join that
// altered the peers' tables each time deadlocked with them: 40P01, and a
// serve starting beside a busy one exited).
func TestJoin_BesideABusyInstance(t *testing.T) {
	pool := pgtest.Pool(t)
	busy := join(t, pool, "busyone", "http://busy", nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("busy-%d-%d", w, i)
				busy.Add(id)
				busy.Remove(id)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	for i := range 40 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		in, err := Join(ctx, Config{Pool: pool, ID: fmt.Sprintf("besidebusy%d", i), URL: "http://x", GoneAfter: time.Minute, SweepEvery: time.Minute})
		cancel()
		if err != nil {
			t.Fatalf("join %d beside a busy instance: %v", i, err)
		}
		in.Close()
	}
}
