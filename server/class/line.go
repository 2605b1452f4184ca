package class

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/jackc/pgx/v5"
)

// The line: a class's checks wait in one line in Postgres, a queue on
// fencelab's own engine, each check a job that an engine.WorkerPool on
// any instance claims under a lease, with an epoch. A check in line
// survives a server restart, and its result is kept exactly once: the
// student's check is written in the transaction that completes the job,
// by compare-and-set on its owner and epoch, so a claim whose lease was
// lost (its instance stalled or died) writes nothing. The playground runs
// on what it teaches.

// lineSchema is the line's queue schema. It does not start with fl_, so
// the sweep of gone instances' run schemas never drops it.
const lineSchema = "fencelab_checkline"

// Turn is a check whose turn has come: what the line hands its PlayFunc.
type Turn struct {
	Job     int64  `json:"-"`
	Epoch   int64  `json:"-"`
	Class   string `json:"class"`
	Student string `json:"student"`
	// What it plays, read from the student's row when its turn comes (a
	// job put in line by an older server carries them itself).
	Solution sandbox.Solution `json:"solution,omitzero"`
	LeaseMS  int64            `json:"lease_ms,omitempty"`
	// waited is how long the job waited in line, from its insert to its
	// claim, on the database's clock.
	waited time.Duration
}

// Waited is how long the check waited in the line for its turn (a
// check.Turn).
func (t Turn) Waited() time.Duration { return t.waited }

// Release does nothing: a check's turn in the class's line is its job,
// claimed, and it ends when the line's PlayFunc returns, with the job
// (a check.Turn).
func (t Turn) Release() {}

// ErrElsewhere is a PlayFunc's answer when the student's session is not
// on this instance, or not anywhere now: the check waits and is tried
// again, here or on another instance, until the student is back.
var ErrElsewhere = errors.New("the student's session is not on this instance")

// ErrEnded is Submit's error when the student's class has ended (here,
// on another instance, or on its own when idle): the check counts on no
// board, and is for the student's session to play as its own.
var ErrEnded = errors.New("the class has ended")

// Played is what a PlayFunc made of a check: the report, or the sentence
// its statements were refused with, before any case ran.
type Played struct {
	Report  *protocol.CheckReport `json:"report,omitempty"`
	Refused string                `json:"refused,omitempty"`
}

// PlayFunc plays a check whose turn has come in the student's session and
// waits for its report. ctx ends when the line lost the check's lease.
type PlayFunc func(ctx context.Context, t Turn) (Played, error)

// LineConfig sets a line up.
type LineConfig struct {
	// Owner names this instance in the line's claims (engine.UniqueOwner).
	Owner string
	Play  PlayFunc
	// Concurrency is how many checks this instance plays at once. Default 2.
	Concurrency int
	// Lease is a claim's lease; the pool renews it while the check plays.
	// Default 10s.
	Lease time.Duration
	// Retry is how long a check whose student is not anywhere waits,
	// after its first fastTries, before it is tried again. Default 4s.
	Retry time.Duration
	Log   *slog.Logger
}

// maxTries bounds how often a check is tried: a student gone for good
// leaves the line after this many tries (about five minutes at the
// default Retry).
const maxTries = 100

// The first fastTries of a check come fastRetry apart: enough for the
// instances on one database to pass it round to the one holding the
// student's session.
const (
	fastTries = 25
	fastRetry = 100 * time.Millisecond
)

// Line is the classes' line of checks.
type Line struct {
	store *Store
	q     *engine.Queue
	cfg   LineConfig
}

// OpenLine makes the line's queue if it is not there (safe from several
// instances at once) and returns the line. Run serves it.
func (s *Store) OpenLine(ctx context.Context, cfg LineConfig) (*Line, error) {
	if cfg.Play == nil || cfg.Owner == "" {
		return nil, errors.New("class: LineConfig needs Play and Owner")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 2
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 10 * time.Second
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 4 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := engine.SetupQueue(ctx, s.pool, lineSchema); err != nil {
		return nil, fmt.Errorf("class: set up the line: %w", err)
	}
	// A check claimed by an instance that does not hold its student's
	// session is soon claimed again, by another instance or this one (the
	// engine's claim cannot choose by payload); after fastTries it waits
	// Retry between tries: its student is not back yet.
	retry := cfg.Retry
	q, err := engine.NewQueue(s.pool, engine.QueueConfig{Schema: lineSchema, RetryDelayFunc: func(attempt int) time.Duration {
		if attempt <= fastTries {
			return fastRetry
		}
		return retry
	}})
	if err != nil {
		return nil, err
	}
	return &Line{store: s, q: q, cfg: cfg}, nil
}

// Submit puts a student's check in the line and returns its job. A
// student has one check in line at a time: one that still waits takes the
// new statements and keeps its place; one being played is a conflict.
//
// The job carries the class and the student; what it plays is the
// student's row's (line_check), which a later Submit replaces while the
// job waits. Submit holds that row while it reads the job's state through
// the engine and writes; a check whose turn comes meanwhile reads the row
// after it (lineCheckSQL), so it plays what the student sent last.
func (l *Line) Submit(ctx context.Context, classID, studentID string, sol sandbox.Solution, lease time.Duration) (int64, error) {
	payload, err := json.Marshal(Turn{Class: classID, Student: studentID})
	if err != nil {
		return 0, err
	}
	check, err := json.Marshal(lineCheck{Solution: sol, LeaseMS: lease.Milliseconds()})
	if err != nil {
		return 0, err
	}
	tx, err := l.store.pool.Begin(ctx)
	if err != nil {
		return 0, dbError("put the check in line", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op once committed
	var last *int64
	var ended bool
	switch err := tx.QueryRow(ctx, lineMineSQL, studentID).Scan(&last, &ended); {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, fault.Errorf(fault.NotFound, "no such student")
	case err != nil:
		return 0, dbError("put the check in line", err)
	case ended:
		return 0, ErrEnded
	}
	id := int64(0)
	if last != nil {
		switch place, done, err := l.Place(ctx, *last); {
		case err != nil:
			return 0, err
		case place > 0:
			id = *last // it waits: the new statements take its place
		case !done:
			return 0, fault.Errorf(fault.Conflict, "your check is being played: its result comes in a moment")
		}
	}
	if id == 0 {
		ids, err := l.q.InsertTx(ctx, tx, []engine.NewJob{{Payload: payload, MaxAttempts: maxTries}})
		if err != nil {
			return 0, dbError("put the check in line", err)
		}
		id = ids[0]
	}
	if _, err := tx.Exec(ctx, lineSetSQL, studentID, id, check); err != nil {
		return 0, dbError("put the check in line", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, dbError("put the check in line", err)
	}
	return id, nil
}

// lineCheck is what a student's check in line plays.
type lineCheck struct {
	Solution sandbox.Solution `json:"solution"`
	LeaseMS  int64            `json:"lease_ms"`
}

// Place is a check's place in the line: 1 for the next to be played, 0
// once it is played or done (done says so). It asks the engine.
func (l *Line) Place(ctx context.Context, job int64) (place int, done bool, err error) {
	switch place, err := l.q.Place(ctx, job); {
	case errors.Is(err, engine.ErrJobNotFound):
		return 0, true, nil
	case err != nil:
		return 0, false, dbError("read the check's place", err)
	case place > 0:
		return place, false, nil
	}
	j, err := l.q.Get(ctx, job)
	switch {
	case errors.Is(err, engine.ErrJobNotFound):
		return 0, true, nil
	case err != nil:
		return 0, false, dbError("read the check's place", err)
	}
	return 0, j.Status != engine.StatusRunning && j.Status != engine.StatusPending, nil
}

// Run serves the line until ctx ends: this instance's share of the
// class's checks, Concurrency at a time.
func (l *Line) Run(ctx context.Context) error {
	p, err := engine.NewWorkerPool(engine.WorkerPoolConfig{
		Queue:       l.q,
		Owner:       l.cfg.Owner,
		HandlerTx:   l.play,
		Concurrency: l.cfg.Concurrency,
		BatchSize:   l.cfg.Concurrency,
		Lease:       l.cfg.Lease,
		StopTimeout: 2 * time.Second, // a check cut short plays again, here after a restart or on another instance
		OnError:     func(err error) { l.cfg.Log.Warn("the class line", "err", err) },
	})
	if err != nil {
		return err
	}
	return p.Run(ctx)
}

// play plays one check whose turn has come, and keeps its report with the
// job's completion.
func (l *Line) play(ctx context.Context, c engine.Claim) ([]byte, engine.TxFunc, error) {
	var t Turn
	if err := json.Unmarshal(c.Payload, &t); err != nil {
		return nil, nil, fmt.Errorf("a check in line that is not one: %w", err)
	}
	t.Job, t.Epoch = c.JobID, c.Epoch
	if j, err := l.q.Get(ctx, c.JobID); err == nil { // a figure told, not relied on: unread, it is 0
		t.waited = max(0, j.DBTime.Sub(j.CreatedAt))
	}
	var check []byte
	switch err := l.store.pool.QueryRow(ctx, lineCheckSQL, t.Student, c.JobID).Scan(&check); {
	case errors.Is(err, pgx.ErrNoRows) && t.Solution == (sandbox.Solution{}):
		// The student is gone (their class was forgotten): nothing to play.
		return []byte(`{"gone":true}`), nil, nil
	case errors.Is(err, pgx.ErrNoRows):
		// A check put in line by an older server, with its statements in
		// the job: played as it is.
	case err != nil:
		return nil, nil, dbError("read the check in line", err)
	default:
		var lc lineCheck
		if err := json.Unmarshal(check, &lc); err != nil {
			return nil, nil, fmt.Errorf("a check in line that is not one: %w", err)
		}
		t.Solution, t.LeaseMS = lc.Solution, lc.LeaseMS
	}
	played, err := l.cfg.Play(ctx, t)
	if err != nil {
		return nil, nil, err
	}
	result, err := json.Marshal(played)
	if err != nil {
		return nil, nil, err
	}
	if played.Report == nil {
		return result, nil, nil // refused: no check to keep
	}
	rep := *played.Report
	return result, func(ctx context.Context, tx pgx.Tx) error {
		return l.store.recordTx(ctx, tx, t.Student, t.Solution, rep)
	}, nil
}
