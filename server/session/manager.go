// Package session keeps the playground's sessions: each visitor's own runs,
// with their own Postgres schemas, their event log, and the control token
// that lets one person drive while any number watch.
//
// A Manager owns every session, the server-wide cap on concurrent runs, the
// receiver endpoints of live runs, and the server instance's advisory lock
// that tells its schemas from those a dead server left behind.
package session

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/recording"
	"github.com/fencelab/fencelab/server/supervisor"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Error is a kind of refusal, with the HTTP status it is answered with.
type Error struct {
	Status int
	Kind   string
}

func (e *Error) Error() string { return e.Kind }

// HTTPStatus is the status the HTTP layer answers with.
func (e *Error) HTTPStatus() int { return e.Status }

// The refusals a session can give.
var (
	// ErrBusy: a server-wide capacity is used up (sessions, runs).
	ErrBusy = &Error{503, "busy"}
	// ErrNotFound: no such session, run or receiver (or it expired).
	ErrNotFound = &Error{404, "not found"}
	// ErrForbidden: the request needs the session's control token.
	ErrForbidden = &Error{403, "forbidden"}
	// ErrConflict: the session is not in a state for this command.
	ErrConflict = &Error{409, "conflict"}
)

// Limits are the server's caps. Each has a flag; Fill gives the defaults.
type Limits struct {
	MaxSessions int           `json:"max_sessions"`
	MaxRuns     int           `json:"max_runs"`         // concurrent runs, server-wide
	MaxWorkers  int           `json:"max_workers"`      // live workers per free-play run
	MaxJobs     int           `json:"max_jobs"`         // jobs per free-play run
	MaxStall    time.Duration `json:"max_stall_ms"`     // a worker frozen longer is killed
	MaxRunTime  time.Duration `json:"max_run_time_ms"`  // a run older is finished
	SessionIdle time.Duration `json:"session_idle_ms"`  // an idle session is dropped
	MaxEvents   int           `json:"max_events"`       // kept per session
	MinLease    time.Duration `json:"min_lease_ms"`     // bounds of a run's lease
	MaxLease    time.Duration `json:"max_lease_ms"`     //
	MaxPace     time.Duration `json:"max_pace_ms"`      // slowest auto pace
	MaxMatrix   int           `json:"max_matrix_cells"` // cells of one matrix
	// SocketBuffer is how many events a socket may fall behind before it is
	// closed (it resumes from where it was).
	SocketBuffer int `json:"socket_buffer"`
}

// Fill sets every zero limit to its default.
func (l *Limits) Fill() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	dur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	def(&l.MaxSessions, 5000)
	def(&l.MaxRuns, 12)
	def(&l.MaxWorkers, 6)
	def(&l.MaxJobs, 100)
	dur(&l.MaxStall, 10*time.Minute)
	dur(&l.MaxRunTime, 30*time.Minute)
	dur(&l.SessionIdle, 15*time.Minute)
	def(&l.MaxEvents, 100_000)
	dur(&l.MinLease, engine.MinRunLease)
	dur(&l.MaxLease, engine.MaxRunLease)
	dur(&l.MaxPace, 10*time.Second)
	def(&l.MaxMatrix, 64)
	def(&l.SocketBuffer, 1024)
}

// Config configures a Manager.
type Config struct {
	Pool        *pgxpool.Pool
	DatabaseURL string
	Supervisor  *supervisor.Supervisor
	Log         *slog.Logger
	// ReceiverBase is where this server's receiver endpoints are reached by
	// the workers, such as http://127.0.0.1:8080/receiver/ (a run adds its
	// key and /deliveries).
	ReceiverBase string
	// ExternalReceiver, if set, is a standalone `fencelab receiver` that
	// every run delivers to instead.
	ExternalReceiver string
	Limits           Limits
	// Recordings, if set, keeps every scripted run that finishes, to replay
	// when the server is too busy to start another.
	Recordings *recording.Store
}

// Manager owns every session. It is safe for concurrent use.
type Manager struct {
	cfg      Config
	instance string
	ctx      context.Context // ends at Close
	cancel   context.CancelFunc
	runSlots chan struct{}
	lockConn *pgx.Conn // holds the instance lock for the Manager's life

	mu        sync.Mutex
	sessions  map[string]*Session
	receivers map[string]*runHandle
	serial    int64
	closed    bool
}

// NewManager takes this instance's lock in Postgres, drops the schemas of
// instances that are gone, and returns a Manager.
func NewManager(ctx context.Context, cfg Config) (*Manager, error) {
	cfg.Limits.Fill()
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	m := &Manager{cfg: cfg, instance: hex.EncodeToString(b[:]), runSlots: make(chan struct{}, cfg.Limits.MaxRuns),
		sessions: map[string]*Session{}, receivers: map[string]*runHandle{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	pc, err := cfg.Pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("session manager: %w", err)
	}
	conn := pc.Hijack() // out of the pool: the lock lives as long as this connection
	st := engine.InstanceLock(instanceKey(m.instance))
	if _, err := conn.Exec(ctx, st.SQL, st.Args...); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("session manager: instance lock: %w", err)
	}
	m.lockConn = conn
	if n, err := m.sweepOrphans(ctx); err != nil {
		cfg.Log.Warn("could not drop the schemas of gone servers", "err", err)
	} else if n > 0 {
		cfg.Log.Info("dropped schemas left by servers that are gone", "schemas", n)
	}
	return m, nil
}

// Instance returns this server's instance id, the second part of every
// schema name it makes (fl_<instance>_...).
func (m *Manager) Instance() string { return m.instance }

// schemaPrefix starts every schema a server makes: fl_<instance>_.
const schemaPrefix = "fl_"

func instanceKey(instance string) int64 {
	h := fnv.New64a()
	h.Write([]byte("fencelab instance " + instance))
	return int64(h.Sum64())
}

// sweepOrphans drops the schemas of server instances whose lock nobody
// holds: servers that were killed before they could clean up.
func (m *Manager) sweepOrphans(ctx context.Context) (int, error) {
	st := engine.SchemaList(schemaPrefix)
	rows, err := m.cfg.Pool.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		return 0, err
	}
	byInstance := map[string][]string{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return 0, err
		}
		parts := strings.SplitN(strings.TrimPrefix(name, schemaPrefix), "_", 2)
		if len(parts) == 2 && parts[0] != m.instance {
			byInstance[parts[0]] = append(byInstance[parts[0]], name)
		}
	}
	rows.Close()
	dropped := 0
	for inst, names := range byInstance {
		key := instanceKey(inst)
		try := engine.InstanceTryLock(key)
		var free bool
		if err := m.lockConn.QueryRow(ctx, try.SQL, try.Args...).Scan(&free); err != nil {
			return dropped, err
		}
		if !free {
			continue // that server is alive
		}
		for _, n := range names {
			d := engine.SchemaDropOne(n)
			if _, err := m.cfg.Pool.Exec(ctx, d.SQL); err != nil {
				return dropped, err
			}
			dropped++
		}
		un := engine.InstanceUnlock(key)
		if _, err := m.lockConn.Exec(ctx, un.SQL, un.Args...); err != nil {
			return dropped, err
		}
	}
	return dropped, nil
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Create makes a new session with an unguessable id and control token.
func (m *Manager) Create() (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("%w: the server is shutting down", ErrBusy)
	}
	if len(m.sessions) >= m.cfg.Limits.MaxSessions {
		return nil, fmt.Errorf("%w: the server has %d sessions, its limit; try again in a few minutes", ErrBusy, m.cfg.Limits.MaxSessions)
	}
	m.serial++
	s := newSession(m, randomToken(16), randomToken(24), strconv.FormatInt(m.serial, 36))
	m.sessions[s.ID] = s
	m.cfg.Log.Info("session created", "session", s.short(), "sessions", len(m.sessions))
	return s, nil
}

// Get finds a session by id.
func (m *Manager) Get(id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[id]
	if s == nil {
		return nil, fmt.Errorf("%w: no session %q here (sessions end after %v without use, and when the server restarts)",
			ErrNotFound, shorten(id), m.cfg.Limits.SessionIdle)
	}
	return s, nil
}

func shorten(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Count returns how many sessions there are.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// Delete ends a session: its runs end, their workers are killed, their
// schemas dropped, its sockets closed.
func (m *Manager) Delete(id string) error {
	m.mu.Lock()
	s := m.sessions[id]
	delete(m.sessions, id)
	m.mu.Unlock()
	if s == nil {
		return fmt.Errorf("%w: no session %q", ErrNotFound, shorten(id))
	}
	s.close("the session was ended")
	return nil
}

// Sweep ends every session idle for longer than the limit, and finishes
// runs that have gone on too long. The server calls it periodically.
func (m *Manager) Sweep() {
	m.mu.Lock()
	var idle []*Session
	var all []*Session
	for id, s := range m.sessions {
		all = append(all, s)
		if s.idleFor() > m.cfg.Limits.SessionIdle {
			idle = append(idle, s)
			delete(m.sessions, id)
		}
	}
	m.mu.Unlock()
	for _, s := range idle {
		m.cfg.Log.Info("session expired", "session", s.short())
		s.close(fmt.Sprintf("the session was idle for %v and has ended", m.cfg.Limits.SessionIdle))
	}
	for _, s := range all {
		s.expireRuns(m.cfg.Limits.MaxRunTime)
	}
}

// acquireRun takes a run slot, waiting up to wait for one.
func (m *Manager) acquireRun(ctx context.Context, wait time.Duration) error {
	select {
	case m.runSlots <- struct{}{}:
		return nil
	default:
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case m.runSlots <- struct{}{}:
			return nil
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return fmt.Errorf("%w: the server is running %d runs at once, its limit; try again in a moment", ErrBusy, m.cfg.Limits.MaxRuns)
}

func (m *Manager) releaseRun() { <-m.runSlots }

// RunsInFlight returns how many runs hold a slot.
func (m *Manager) RunsInFlight() int { return len(m.runSlots) }

// receiverFor registers a live run's receiver endpoint under a new key.
func (m *Manager) registerReceiver(h *runHandle) string {
	key := randomToken(18)
	m.mu.Lock()
	m.receivers[key] = h
	m.mu.Unlock()
	return key
}

func (m *Manager) unregisterReceiver(key string) {
	m.mu.Lock()
	delete(m.receivers, key)
	m.mu.Unlock()
}

// Receiver finds the live run a receiver key belongs to.
func (m *Manager) Receiver(key string) (*engine.Receiver, func(engine.Event), error) {
	m.mu.Lock()
	h := m.receivers[key]
	m.mu.Unlock()
	if h == nil || h.receiver == nil {
		return nil, nil, fmt.Errorf("%w: no live run has receiver %q", ErrNotFound, shorten(key))
	}
	return h.receiver, h.emitFromOutside, nil
}

// Close ends every session — runs, workers, schemas, sockets — and gives
// up the instance lock. It is safe to call more than once.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.sessions = map[string]*Session{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.close("the server is shutting down")
		}()
	}
	wg.Wait()
	m.cancel()
	if m.lockConn != nil {
		_ = m.lockConn.Close(context.Background())
	}
}
