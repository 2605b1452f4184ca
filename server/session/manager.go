// Package session keeps the playground's sessions: each visitor's own runs,
// with their own Postgres schemas, their event log, and the control token
// that lets one person drive while any number watch.
//
// A Manager owns every session, the server-wide caps on runs, checks and
// load labs, and when spare schemas are made ahead of runs. Its membership
// of the instances sharing its Postgres (the lock that tells its schemas
// from those a dead server left behind, and where each session lives) is
// package instances'; the runs' schemas apart from the runs (their names,
// the spares, what a gone instance left) are package runschemas'.
package session

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/instances"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/recording"
	"github.com/fencelab/fencelab/server/run/notify"
	"github.com/fencelab/fencelab/server/run/runner"
	"github.com/fencelab/fencelab/server/run/supervisor"
	"github.com/fencelab/fencelab/server/session/admit"
	"github.com/fencelab/fencelab/server/session/eventlog"
	"github.com/fencelab/fencelab/server/session/line"
	"github.com/fencelab/fencelab/server/session/runschemas"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Limits are the server's caps. Each has a flag; Fill gives the defaults.
type Limits struct {
	MaxSessions int           `json:"max_sessions"`
	MaxRuns     int           `json:"max_runs"`    // concurrent runs, server-wide
	MaxWorkers  int           `json:"max_workers"` // live workers per free-play run
	MaxJobs     int           `json:"max_jobs"`    // jobs per free-play run
	MaxStall    time.Duration `json:"-"`           // a worker frozen longer is killed
	MaxRunTime  time.Duration `json:"-"`           // a run older is stopped
	SessionIdle time.Duration `json:"-"`           // an idle session is dropped
	RunIdle     time.Duration `json:"-"`           // a run nobody watches or drives for this long is stopped
	MaxEvents   int           `json:"max_events"`  // kept per session
	// MaxEventsTotal bounds the events kept by every session together: a
	// session over its share drops its oldest first.
	MaxEventsTotal int `json:"max_events_total"`
	// MaxSessionMB bounds, in MiB, the bytes one session's events hold;
	// MaxEventsTotalMB, every session's together. An event itself is cut
	// to eventlog.DefaultMaxEventBytes.
	MaxSessionMB     int `json:"max_session_mb"`
	MaxEventsTotalMB int `json:"max_events_total_mb"`
	// Per client (an address; see Config of the server for proxies): how
	// many sessions, runs at once and batches at once. Loopback clients
	// have no per-client caps.
	MaxSessionsPerClient int `json:"max_sessions_per_client"`
	MaxRunsPerClient     int `json:"max_runs_per_client"`
	MaxBatchesPerClient  int `json:"max_batches_per_client"`
	// MaxChecks is how many checks play at once, server-wide; the others
	// wait in one fair line, one at a time per address (package line).
	MaxChecks int `json:"max_checks"`
	// MaxWorkersPerClient bounds the worker processes of one client's
	// runs together, free play's added workers too.
	MaxWorkersPerClient int `json:"max_workers_per_client"`
	// FreshIdle is how long a session nobody has used yet (no command, no
	// socket: a page load, or a POST, and nothing after) lives.
	FreshIdle time.Duration `json:"-"`
	// SpareRuns is how many pairs of a run's schemas are kept made in
	// advance, while the server is quiet (0: none).
	SpareRuns int `json:"spare_runs"`
	// PrestartedWorkers is how many worker processes are kept spawned
	// ahead, while the server is quiet, each waiting for a run to take it
	// (0: none; see supervisor.Prestart).
	PrestartedWorkers int           `json:"prestarted_workers"`
	MinLease          time.Duration `json:"-"`                // bounds of a run's lease
	MaxLease          time.Duration `json:"-"`                //
	MaxPace           time.Duration `json:"-"`                // slowest auto pace
	MaxMatrix         int           `json:"max_matrix_cells"` // cells of one matrix
	// MaxRunsPerSession is one session's share of MaxRuns: its current run
	// and the cells of its batch playing at once.
	MaxRunsPerSession int `json:"max_runs_per_session"`
	// SocketBuffer is how many events a socket may fall behind before it is
	// closed (it resumes from where it was).
	SocketBuffer int `json:"socket_buffer"`
	// MaxLoads is how many load labs may run at once, server-wide: each
	// keeps the machine's cores busy while it runs.
	MaxLoads int `json:"max_loads"`
	// GoneAfter is how long another instance must look gone (its lock
	// free, its row not seen) on two sweeps before what it left is
	// dropped; SweepEvery, how often the sweep runs.
	GoneAfter  time.Duration `json:"-"`
	SweepEvery time.Duration `json:"-"`
}

// MarshalJSON writes the limits with every duration in milliseconds, in
// the fields named _ms.
func (l Limits) MarshalJSON() ([]byte, error) {
	type plain Limits // the fields without the durations, and no MarshalJSON
	return json.Marshal(struct {
		plain
		MaxStallMS    int64 `json:"max_stall_ms"`
		MaxRunTimeMS  int64 `json:"max_run_time_ms"`
		SessionIdleMS int64 `json:"session_idle_ms"`
		RunIdleMS     int64 `json:"run_idle_ms"`
		FreshIdleMS   int64 `json:"fresh_idle_ms"`
		MinLeaseMS    int64 `json:"min_lease_ms"`
		MaxLeaseMS    int64 `json:"max_lease_ms"`
		MaxPaceMS     int64 `json:"max_pace_ms"`
	}{plain(l), l.MaxStall.Milliseconds(), l.MaxRunTime.Milliseconds(), l.SessionIdle.Milliseconds(), l.RunIdle.Milliseconds(), l.FreshIdle.Milliseconds(),
		l.MinLease.Milliseconds(), l.MaxLease.Milliseconds(), l.MaxPace.Milliseconds()})
}

// ValidateLease refuses a run's lease outside this server's bounds, in the
// one sentence of experiments.Bounds.
func (l Limits) ValidateLease(d time.Duration) error {
	if err := (experiments.Bounds{Min: l.MinLease, Max: l.MaxLease}).Validate("lease", d); err != nil {
		return fault.Errorf(fault.Invalid, "%v on this server", err)
	}
	return nil
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
	def(&l.MaxRuns, 120)
	def(&l.MaxWorkers, 6)
	def(&l.MaxJobs, 100)
	dur(&l.MaxStall, 10*time.Minute)
	dur(&l.MaxRunTime, 30*time.Minute)
	dur(&l.SessionIdle, 15*time.Minute)
	dur(&l.RunIdle, time.Minute)
	def(&l.MaxEvents, 20_000)
	def(&l.MaxEventsTotal, 300_000)
	def(&l.MaxSessionMB, 16)
	def(&l.MaxEventsTotalMB, 128)
	def(&l.MaxSessionsPerClient, 50)
	def(&l.MaxRunsPerClient, 8)
	def(&l.MaxBatchesPerClient, 2)
	def(&l.MaxChecks, 4)
	def(&l.MaxWorkersPerClient, 24)
	dur(&l.FreshIdle, 2*time.Minute)
	dur(&l.MinLease, experiments.RunLease.Min)
	dur(&l.MaxLease, experiments.RunLease.Max)
	dur(&l.MaxPace, 10*time.Second)
	def(&l.MaxMatrix, 80)
	def(&l.MaxRunsPerSession, 4)
	def(&l.SocketBuffer, 1024)
	def(&l.MaxLoads, 1)
	dur(&l.GoneAfter, 10*time.Second)
	dur(&l.SweepEvery, 30*time.Second)
}

// Config configures a Manager.
type Config struct {
	Pool        *pgxpool.Pool
	DatabaseURL string
	Supervisor  *supervisor.Supervisor
	Notify      *notify.Notifier // every run's row changes come through it
	Log         *slog.Logger
	// Receivers serves each run's receiver for its workers.
	Receivers runner.Receivers
	// ExternalReceiver, if set, is a standalone `fencelab receiver` that
	// every run delivers to instead.
	ExternalReceiver string
	Limits           Limits
	// Recordings, if set, keeps every scripted run that finishes, to replay
	// when the server is too busy to start another.
	Recordings *recording.Store
	// TapFunc, if set, sees every event of every session, encoded (the
	// event tap).
	TapFunc func(encoded []byte)
	// AdvertiseURL, if set, is where the other instances on the same
	// Postgres reach this one: its sessions are recorded there, so that a
	// request for one reaching another instance is passed on here.
	AdvertiseURL string
	// CustomSQL lets readers check their own statements (the check
	// command), each run as a role of its own: the database must have
	// been hardened (sandbox.Harden). Off: the check command is refused.
	CustomSQL bool
}

// Manager owns every session. It is safe for concurrent use.
type Manager struct {
	cfg       Config
	env       *runner.Env
	instance  string
	ctx       context.Context // ends at Close
	cancel    context.CancelFunc
	fill      context.Context // ends as Close begins: no spare or prestarted worker is made after
	stopFill  context.CancelFunc
	admit     *admit.Admission    // the run slots and the per-client caps
	loads     chan struct{}       // one token per load lab running
	inst      *instances.Instance // this server among those sharing its Postgres
	events    *eventlog.Budget    // the events every session keeps, together
	line      *line.Line          // the checks waiting for their turn
	checks    line.Times          // how long checks take to play here
	spares    *runschemas.Spares
	lastStart atomic.Int64   // unix nanoseconds of the last run that started
	ahead     sync.WaitGroup // the goroutines that make things ahead of runs

	mu       sync.Mutex
	sessions map[string]*Session
	serial   int64
	closed   bool
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
	m := &Manager{cfg: cfg, instance: hex.EncodeToString(b[:]), line: line.New(cfg.Limits.MaxChecks),
		loads:    make(chan struct{}, cfg.Limits.MaxLoads),
		sessions: map[string]*Session{}, events: &eventlog.Budget{Max: int64(cfg.Limits.MaxEventsTotal), MaxBytes: int64(cfg.Limits.MaxEventsTotalMB) << 20}}
	m.env = &runner.Env{Pool: cfg.Pool, DatabaseURL: cfg.DatabaseURL, Supervisor: cfg.Supervisor, Notify: cfg.Notify, Receivers: cfg.Receivers,
		Clock: &runner.DBClock{Pool: cfg.Pool}, WorkerSlots: make(chan struct{}, WorkerConnections(cfg.Limits)+2*cfg.Limits.MaxWorkers),
		ExternalReceiver: cfg.ExternalReceiver, Log: cfg.Log,
		Limits: runner.Limits{MaxWorkers: cfg.Limits.MaxWorkers, MaxJobs: cfg.Limits.MaxJobs, MaxStall: cfg.Limits.MaxStall}}
	m.admit = admit.New(admit.Caps{MaxRuns: cfg.Limits.MaxRuns, MaxRunsPerClient: cfg.Limits.MaxRunsPerClient,
		MaxBatchesPerClient: cfg.Limits.MaxBatchesPerClient, MaxWorkersPerClient: cfg.Limits.MaxWorkersPerClient})
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.fill, m.stopFill = context.WithCancel(context.Background())
	m.spares = runschemas.NewSpares(cfg.Pool, m.instance, cfg.Limits.SpareRuns, m.quietIn, cfg.Log)
	inst, err := instances.Join(ctx, instances.Config{Pool: cfg.Pool, ID: m.instance, URL: cfg.AdvertiseURL,
		GoneAfter: cfg.Limits.GoneAfter, SweepEvery: cfg.Limits.SweepEvery, Sessions: m.sessionIDs, Leftovers: runschemas.Leftovers{Pool: cfg.Pool}, Log: cfg.Log})
	if err != nil {
		return nil, fmt.Errorf("session manager: %w", err)
	}
	m.inst = inst
	if cfg.Limits.SpareRuns > 0 {
		m.ahead.Go(func() { m.spares.Fill(m.fill) })
	}
	if cfg.Limits.PrestartedWorkers > 0 && cfg.Supervisor != nil {
		m.ahead.Go(m.fillPrestarted)
	}
	return m, nil
}

// Limits returns the caps the manager keeps.
func (m *Manager) Limits() Limits { return m.cfg.Limits }

// Instance returns this server's instance id, the second part of every
// schema name it makes (fl_<instance>_...).
func (m *Manager) Instance() string { return m.instance }

// Instances is this server among the instances sharing its Postgres:
// its lock, its peers and where their sessions live.
func (m *Manager) Instances() *instances.Instance { return m.inst }

// Has reports whether session id lives on this instance.
func (m *Manager) Has(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessions[id] != nil
}

// sessionIDs lists the sessions that live here.
func (m *Manager) sessionIDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.sessions))
	for id := range m.sessions {
		ids = append(ids, id)
	}
	return ids
}

// Seated is the sessions here whose student sits in a class that has not
// ended for them, by the class's id.
func (m *Manager) Seated() map[string][]*Session {
	m.mu.Lock()
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	seated := map[string][]*Session{}
	for _, s := range all {
		if seat := s.classSeat(); seat != nil && !seat.Ended && seat.Class != "" {
			seated[seat.Class] = append(seated[seat.Class], s)
		}
	}
	return seated
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Create makes a new session with an unguessable id and control token,
// for a client with no per-client caps (a test, the command line).
func (m *Manager) Create() (*Session, error) { return m.CreateFor("") }

// CreateFor makes a new session for a client (its key from ClientKey; ""
// for one with no per-client caps). When the server, or the client, has
// as many sessions as it may, the oldest one that nobody watches and that
// was never used makes way (for the client's own cap: the oldest that
// nobody watches); only when there is none is the answer busy. So page
// loads that never run cannot lock readers out.
func (m *Manager) CreateFor(client string) (*Session, error) {
	var evicted []*Session
	var made *Session
	defer func() {
		if made != nil {
			m.inst.Add(made.ID)
		}
		for _, s := range evicted {
			m.cfg.Log.Info("session made way for a new one", "session", s.short())
			s.close(protocol.SessionIdle)
		}
	}()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fault.Errorf(fault.Busy, "the server is shutting down")
	}
	lim := m.cfg.Limits
	if n := m.admit.Sessions(client); client != "" && n >= lim.MaxSessionsPerClient {
		old := m.oldestLocked(func(s *Session) bool { return s.client == client && s.Log.Subscribers() == 0 })
		if old == nil {
			return nil, fault.Errorf(fault.Busy, "this address has %d sessions open here, its limit; close a tab, or try again in a few minutes", n)
		}
		evicted = append(evicted, m.removeLocked(old))
	}
	if len(m.sessions) >= lim.MaxSessions {
		old := m.oldestLocked(func(s *Session) bool { return !s.claimed.Load() && s.Log.Subscribers() == 0 })
		if old == nil {
			return nil, fault.Errorf(fault.Busy, "the server has %d sessions, its limit; try again in a few minutes", lim.MaxSessions)
		}
		evicted = append(evicted, m.removeLocked(old))
	}
	m.serial++
	s := newSession(m, randomToken(16), randomToken(24), strconv.FormatInt(m.serial, 36))
	s.client = client
	m.sessions[s.ID] = s
	m.admit.AddSession(client)
	m.cfg.Log.Debug("session created", "session", s.short(), "sessions", len(m.sessions))
	made = s
	return s, nil
}

// oldestLocked is the least recently active session that ok accepts, or
// nil; m.mu must be held.
func (m *Manager) oldestLocked(ok func(*Session) bool) *Session {
	var old *Session
	var at time.Time
	for _, s := range m.sessions {
		if !ok(s) {
			continue
		}
		if t := s.lastActiveAt(); old == nil || t.Before(at) {
			old, at = s, t
		}
	}
	return old
}

// removeLocked takes a session out of the manager (the caller closes it);
// m.mu must be held.
func (m *Manager) removeLocked(s *Session) *Session {
	if m.sessions[s.ID] != s {
		return s
	}
	delete(m.sessions, s.ID)
	m.admit.DropSession(s.client)
	return s
}

// ClientKey is the key per-client caps count by: the address, its /64 for
// IPv6 (one host may hold a whole /64); "" for loopback, which has no
// per-client caps (a reverse proxy on this host with no trusted proxy
// configured would otherwise make every reader one client).
func ClientKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil || a.IsLoopback() {
		return ""
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// Get finds a session by id.
func (m *Manager) Get(id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[id]
	if s == nil {
		return nil, fault.Errorf(fault.NotFound, "no session %s here (sessions end after %v without use, and when the server restarts)",
			strconv.QuoteToASCII(shorten(id)), m.cfg.Limits.SessionIdle)
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
	if s != nil {
		m.removeLocked(s)
	}
	m.mu.Unlock()
	if s == nil {
		return fault.Errorf(fault.NotFound, "no session %s", strconv.QuoteToASCII(shorten(id)))
	}
	s.close(protocol.SessionDeleted)
	return nil
}

// Sweep ends every session idle for longer than the limit, stops runs that
// have gone on too long or that nobody has watched or driven for a while.
// The server calls it periodically (SweepEvery).
func (m *Manager) Sweep() {
	m.mu.Lock()
	var idle []*Session
	var all []*Session
	for _, s := range m.sessions {
		all = append(all, s)
		if d := s.idleFor(); d > m.cfg.Limits.SessionIdle || (!s.claimed.Load() && d > m.cfg.Limits.FreshIdle) {
			idle = append(idle, m.removeLocked(s))
		}
	}
	m.mu.Unlock()
	for _, s := range idle {
		m.cfg.Log.Info("session expired", "session", s.short())
		s.close(protocol.SessionIdle)
	}
	for _, s := range all {
		s.expireRuns(m.cfg.Limits.MaxRunTime)
		s.abandonRuns(m.cfg.Limits.RunIdle)
		s.Log.Trim() // a session over its share of the events, if they are over
	}
}

// SweepEvery is how often Sweep should run: often enough that an idle
// session or an abandoned run ends within about a quarter of its limit.
func (m *Manager) SweepEvery() time.Duration {
	return min(30*time.Second, max(time.Second, min(m.cfg.Limits.SessionIdle, m.cfg.Limits.RunIdle)/4))
}

// acquireRun takes a run slot for a client, waiting up to wait for one.
// A client at its own cap is refused at once.
func (m *Manager) acquireRun(ctx context.Context, client string, wait time.Duration) error {
	if err := m.inst.Healthy(); err != nil {
		return fault.Errorf(fault.Unavailable, "%v; try again in a moment", err)
	}
	if err := m.roomForRun(ctx, 2); err != nil {
		return err
	}
	return m.admit.TakeRun(ctx, client, wait)
}

// EventsKept returns how many events every session keeps, together.
func (m *Manager) EventsKept() int64 { return m.events.Kept() }

// LoadsRunning returns how many load labs are running.
func (m *Manager) LoadsRunning() int { return len(m.loads) }

// RunsInFlight returns how many runs hold a slot.
func (m *Manager) RunsInFlight() int { return m.admit.RunsInFlight() }

// record keeps a finished run's events, to replay when the server is busy.
func (m *Manager) record(s *Session, r *runner.Run, o *protocol.Outcome) {
	if m.cfg.Recordings == nil {
		return
	}
	evs, err := s.Log.Since(0, r.ID(), 0)
	if err != nil {
		return // its first events are no longer kept: not a whole run to replay
	}
	c := r.Config()
	// A reader's own statements (a check's runs) are theirs: never what
	// the busy demo shows every other reader as a recording of the setup.
	m.cfg.Recordings.Add(recording.Recording{Ordering: c.Ordering, Broken: c.Broken.Names(), SameIdentity: c.SameIdentity,
		LeaseMS: c.Lease.Milliseconds(), Recorded: time.Now(), Custom: c.Custom, Outcome: o, Events: evs})
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
	m.stopFill()
	m.ahead.Wait() // a spare being made is finished, and dropped below
	var wg sync.WaitGroup
	wg.Go(m.spares.DropAll) // beside the sessions' own ends
	for _, s := range all {
		wg.Go(func() { s.close(protocol.SessionShutdown) })
	}
	wg.Wait()
	m.cancel()
	m.inst.Close()
}
