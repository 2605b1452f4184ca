// Package runschemas is the runs' schemas in Postgres apart from the runs
// themselves: their names, the pairs made ahead while the server is quiet
// (Spares), the drop of a pair no run used, and what a gone instance left
// behind (Leftovers). Package session decides when; this package does it.
package runschemas

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Prefix starts every schema a server makes: fl_<instance>_.
const Prefix = "fl_"

// Pair names the two schemas of one of instance's runs (or spares):
// fl_<instance>_<name>_j and _r.
func Pair(instance, name string) judge.Schemas {
	base := Prefix + instance + "_" + name
	return judge.Schemas{Jobs: base + "_j", Receiver: base + "_r"}
}

// InstanceOf is the instance a schema or role name of a server's belongs
// to: fl_<instance>_…; "" for a name that is no server's.
func InstanceOf(name string) string {
	parts := strings.SplitN(strings.TrimPrefix(name, Prefix), "_", 2)
	if len(parts) != 2 || !strings.HasPrefix(name, Prefix) {
		return ""
	}
	return parts[0]
}

// Drop drops a pair a run took and never used, and says so in log if it
// cannot.
func Drop(pool *pgxpool.Pool, log *slog.Logger, s judge.Schemas) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := judge.Drop(ctx, pool, s); err != nil {
		log.Warn("could not drop a run's schemas", "err", err)
	}
}

// Spares are pairs of schemas made in advance: a run's two schemas cost
// Postgres some 25 ms of catalog work to create, and a blog post's readers
// arrive together. A run that starts takes one; only when there is none
// does it make its own.
type Spares struct {
	pool     *pgxpool.Pool
	instance string
	log      *slog.Logger
	quietIn  func() time.Duration
	ch       chan judge.Schemas
	serial   atomic.Int64
	taken    chan struct{}
}

// NewSpares keeps up to n pairs of instance's, made while quietIn says
// the server is quiet (0: now; else how long until it may be).
func NewSpares(pool *pgxpool.Pool, instance string, n int, quietIn func() time.Duration, log *slog.Logger) *Spares {
	return &Spares{pool: pool, instance: instance, log: log, quietIn: quietIn,
		ch: make(chan judge.Schemas, n), taken: make(chan struct{}, 1)}
}

// Len is how many pairs wait for a run.
func (s *Spares) Len() int { return len(s.ch) }

// Take returns a pair, if there is one.
func (s *Spares) Take() (judge.Schemas, bool) {
	select {
	case p := <-s.ch:
		select {
		case s.taken <- struct{}{}:
		default:
		}
		return p, true
	default:
		return judge.Schemas{}, false
	}
}

// Fill keeps the pairs topped up until ctx ends. A pair being made when
// it ends is finished first (some 25 ms: a setup cut off halfway would
// leave half a pair behind), so that DropAll, after Fill returns, drops it
// with the others.
func (s *Spares) Fill(ctx context.Context) {
	for ctx.Err() == nil {
		if len(s.ch) == cap(s.ch) {
			select {
			case <-ctx.Done():
				return
			case <-s.taken:
			}
			continue
		}
		if wait := s.quietIn(); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		p := Pair(s.instance, "s"+strconv.FormatInt(s.serial.Add(1), 36))
		setup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := judge.Setup(setup, s.pool, p)
		cancel()
		if err != nil {
			s.log.Warn("could not make a spare pair of schemas", "err", err)
			Drop(s.pool, s.log, p) // whatever of it was made
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
			continue
		}
		s.ch <- p // there is room: only Fill adds
	}
}

// DropAll drops the pairs nobody took: dropChunk pairs a transaction,
// dropAtOnce transactions at once. Dropped one pair a transaction, as a
// run's are, a hundred spares took over ten seconds on a busy 2-core
// machine, and a server's stop ran out of time and left them.
func (s *Spares) DropAll() {
	var names []string
	for more := true; more; {
		select {
		case p := <-s.ch:
			names = append(names, p.Jobs, p.Receiver)
		default:
			more = false
		}
	}
	sem := make(chan struct{}, dropAtOnce)
	var wg sync.WaitGroup
	for chunk := range slices.Chunk(names, 2*dropChunk) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := engine.DropSchemas(ctx, s.pool, chunk...); err != nil {
				s.log.Warn("could not drop spare schemas", "pairs", len(chunk)/2, "err", err)
			}
		})
	}
	wg.Wait()
}

const (
	dropChunk  = 16
	dropAtOnce = 4
)

// Leftovers is what the servers' instances leave in their Postgres beside
// the instances' rows: their runs' schemas (fl_<instance>_…) and their
// sandbox roles. Package instances finds which instances are gone and
// asks these to be dropped (instances.Leftovers).
type Leftovers struct{ Pool *pgxpool.Pool }

// Owners are the instances whose schemas or sandbox roles there are.
func (l Leftovers) Owners(ctx context.Context) ([]string, error) {
	names, err := l.schemas(ctx, Prefix)
	if err != nil {
		return nil, err
	}
	roles, err := sandbox.ListRoles(ctx, l.Pool, Prefix)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, n := range append(names, roles...) {
		if id := InstanceOf(n); id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

// Forget drops instance id's schemas and its runs' roles.
func (l Leftovers) Forget(ctx context.Context, id string) (int, error) {
	names, err := l.schemas(ctx, Prefix+id+"_")
	if err != nil {
		return 0, err
	}
	// One schema per transaction: a gone instance may have left many, and
	// one transaction dropping them all could outgrow the lock table.
	for i, n := range names {
		if err := engine.DropSchemas(ctx, l.Pool, n); err != nil {
			return i, err
		}
	}
	roles, err := sandbox.ListRoles(ctx, l.Pool, Prefix+id+"_")
	if err != nil {
		return len(names), err
	}
	for _, r := range roles {
		if err := sandbox.DropRole(ctx, l.Pool, r); err != nil {
			return len(names), err
		}
	}
	return len(names), nil
}

// schemas lists the schemas whose names start with prefix.
func (l Leftovers) schemas(ctx context.Context, prefix string) ([]string, error) {
	rows, err := l.Pool.Query(ctx, schemaListSQL, prefix)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// schemaListSQL lists the schemas whose names start with $1.
const schemaListSQL = `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY nspname`
