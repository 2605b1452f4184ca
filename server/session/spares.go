package session

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/judge"
)

// Spare schemas: a run's two schemas cost Postgres some 25 ms of catalog
// work to create, and a blog post's readers arrive together. The manager
// keeps a few pairs made in advance, while it is quiet, and a run that
// starts takes one; only when there is none does it make its own.
type spares struct {
	ch        chan judge.Schemas
	serial    atomic.Int64
	lastStart atomic.Int64 // unix nanoseconds of the last run that started
	taken     chan struct{}
	wg        sync.WaitGroup
}

// Spares are made between bursts, never during one: once no run has
// started for quietFor, and, while more than a quarter of the run slots
// are in use (a burst's runs playing on the same cores), only once none
// has started for quietLong.
const (
	quietFor  = time.Second
	quietLong = 10 * time.Second
)

// quietIn is how long until the server is quiet enough to make things
// ahead of runs (spare schemas, prestarted workers): 0 when it is now.
func (m *Manager) quietIn() time.Duration {
	since := time.Since(time.Unix(0, m.spares.lastStart.Load()))
	busy := m.RunsInFlight() > cap(m.runSlots)/4 && since < quietLong
	if since >= quietFor && !busy {
		return 0
	}
	wait := quietFor - since
	if busy {
		wait = quietFor
	}
	return max(wait, 50*time.Millisecond)
}

// fillPrestarted keeps Limits.PrestartedWorkers worker processes spawned
// ahead of runs, while the server is quiet, until the manager closes; the
// supervisor kills those nobody took when it closes.
func (m *Manager) fillPrestarted() {
	defer m.spares.wg.Done()
	sup := m.cfg.Supervisor
	for {
		wait := m.quietIn()
		if wait == 0 && sup.Prestarted() >= m.cfg.Limits.PrestartedWorkers {
			wait = 250 * time.Millisecond
		}
		if wait == 0 {
			if _, err := sup.Prestart(); err == nil {
				continue
			} else if m.fill.Err() == nil {
				m.cfg.Log.Warn("could not prestart a worker", "err", err)
			}
			wait = 5 * time.Second
		}
		select {
		case <-m.fill.Done():
			return
		case <-time.After(wait):
		}
	}
}

// Spares is how many spare pairs wait for a run.
func (m *Manager) Spares() int { return len(m.spares.ch) }

// take returns a spare pair, if there is one.
func (m *Manager) takeSpare() (judge.Schemas, bool) {
	m.spares.lastStart.Store(time.Now().UnixNano())
	select {
	case s := <-m.spares.ch:
		select {
		case m.spares.taken <- struct{}{}:
		default:
		}
		return s, true
	default:
		return judge.Schemas{}, false
	}
}

// fillSpares keeps the spare pairs topped up until the manager closes.
func (m *Manager) fillSpares() {
	defer m.spares.wg.Done()
	for m.fill.Err() == nil {
		if len(m.spares.ch) == cap(m.spares.ch) {
			select {
			case <-m.fill.Done():
				return
			case <-m.spares.taken:
			}
			continue
		}
		if wait := m.quietIn(); wait > 0 {
			select {
			case <-m.fill.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		n := strconv.FormatInt(m.spares.serial.Add(1), 36)
		base := schemaPrefix + m.instance + "_s" + n
		s := judge.Schemas{Jobs: base + "_j", Receiver: base + "_r"}
		// Not cancelled when the manager closes: a setup cut off halfway
		// would leave half a pair behind. Close waits for it (some 25 ms),
		// then drops it with the other spares.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := judge.Setup(ctx, m.cfg.Pool, s)
		cancel()
		if err != nil {
			m.cfg.Log.Warn("could not make a spare pair of schemas", "err", err)
			m.dropSchemas(s) // whatever of it was made
			select {
			case <-m.fill.Done():
				return
			case <-time.After(5 * time.Second):
			}
			continue
		}
		m.spares.ch <- s // there is room: only this goroutine adds
	}
}

// dropSchemas drops a pair a run took and never used.
func (m *Manager) dropSchemas(s judge.Schemas) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := judge.Drop(ctx, m.cfg.Pool, s); err != nil {
		m.cfg.Log.Warn("could not drop a run's schemas", "err", err)
	}
}

// dropSpares drops the spare pairs nobody took: dropChunk pairs a
// transaction, dropAtOnce transactions at once. Dropped one pair a
// transaction, as a run's are, a hundred spares took over ten seconds on a
// busy 2-core machine, and a server's stop ran out of time and left them.
func (m *Manager) dropSpares() {
	var names []string
	for more := true; more; {
		select {
		case s := <-m.spares.ch:
			names = append(names, s.Jobs, s.Receiver)
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
			if err := engine.DropSchemas(ctx, m.cfg.Pool, chunk...); err != nil {
				m.cfg.Log.Warn("could not drop spare schemas", "pairs", len(chunk)/2, "err", err)
			}
		})
	}
	wg.Wait()
}

const (
	dropChunk  = 16
	dropAtOnce = 4
)
