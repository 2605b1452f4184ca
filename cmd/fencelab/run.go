package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgcluster"
	"github.com/fencelab/fencelab/server/run/notify"
	"github.com/fencelab/fencelab/server/run/receiver"
	"github.com/fencelab/fencelab/server/run/runner"
	"github.com/fencelab/fencelab/server/run/supervisor"
	"github.com/jackc/pgx/v5/pgxpool"
)

// world is everything one `fencelab run` needs around its run: Postgres,
// a loopback HTTP server for the run's receiver, and a worker supervisor.
// Close tears it all down, in reverse order.
type world struct {
	env     runner.Env
	closers []func()
}

func (w *world) Close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
	w.closers = nil
}

// openWorld starts what a run runs in.
func openWorld(ctx context.Context, getenv func(string) string, log *slog.Logger) (*world, error) {
	w := &world{}
	dsn, pool, closeDB, err := openDB(ctx, getenv, log)
	if err != nil {
		return nil, err
	}
	w.closers = append(w.closers, closeDB)
	receivers, stop, err := receiver.Serve(log)
	if err != nil {
		w.Close()
		return nil, err
	}
	w.closers = append(w.closers, stop)
	sup, err := supervisor.New(supervisor.Config{Log: log})
	if err != nil {
		w.Close()
		return nil, err
	}
	w.closers = append(w.closers, func() { _ = sup.Close() })
	nt := notify.New(notify.Connector(dsn, "fencelab run listener"), log)
	w.closers = append(w.closers, nt.Close)
	w.env = runner.Env{Pool: pool, DatabaseURL: dsn, Supervisor: sup, Notify: nt, Receivers: receivers, Log: log, Clock: &runner.DBClock{Pool: pool}}
	return w, nil
}

// openDB connects to DATABASE_URL, or starts a throwaway cluster, with a
// pool of 20 connections.
func openDB(ctx context.Context, getenv func(string) string, log *slog.Logger) (string, *pgxpool.Pool, func(), error) {
	return openDBSized(ctx, getenv, log, 0, 20)
}

// openDBSized is openDB for a server: a throwaway cluster allows
// maxConns connections (0: its default), and the pool holds poolSize.
func openDBSized(ctx context.Context, getenv func(string) string, log *slog.Logger, maxConns, poolSize int) (string, *pgxpool.Pool, func(), error) {
	// A private cluster's notes name its folder, where its socket is: the
	// log says what happened, not where.
	dsn, stop, err := pgcluster.Open(ctx, getenv, pgcluster.Options{MaxConnections: maxConns, Logf: func(format string, a ...any) {
		log.Info(api.Redact(fmt.Sprintf(format, a...)))
	}})
	if err != nil {
		return "", nil, nil, err
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		_ = stop()
		return "", nil, nil, usagef("DATABASE_URL: %v", err)
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = "fencelab"
	// Sessions, the receiver's upserts and the runs' reads share this pool;
	// each worker connects on its own, with one connection.
	if pcfg.MaxConns < int32(poolSize) {
		pcfg.MaxConns = int32(poolSize)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		_ = stop()
		return "", nil, nil, fmt.Errorf("connect to Postgres: %w", err)
	}
	return dsn, pool, func() { pool.Close(); _ = stop() }, nil
}

const runSummary = `Runs one scenario end to end: two real worker processes (the zombie truly
frozen with SIGSTOP while its lease runs out on the database clock), the
receiver, and Postgres. Prints the article's table row for the run, or with
--json one JSON object. Exits 0 when the run completed, whatever the verdict.

Orderings: new-owner-first, zombie-first (the article's: B is still working
when A wakes), owner-done-first, crash-before-commit, clock-skew.
Guards: status-check, owner-check, epoch-check, epoch-increment,
receiver-check, db-clock, skip-locked.
Styles: leases-alone, fencelab, state-only, id-only, token.
Deliveries: direct, keyed, outbox.`

func runCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", runSummary, stderr)
	ordering := fs.String("ordering", "", "the scenario (required): new-owner-first, zombie-first, owner-done-first, crash-before-commit or clock-skew")
	var broken playground.Guards
	fs.Var(&broken, "break", "turn a guard off (repeatable, or comma-separated)")
	style := fs.String("style", "", "start from a queue style's guards: leases-alone, fencelab, state-only, id-only or token")
	same := fs.Bool("same-identity", false, "give the new owner the zombie's own name")
	delivery := fs.String("delivery", "direct", "how results reach the receiver: direct (it keeps the newest epoch), keyed (a third party that deduplicates on a stable key) or outbox (written with the commit, sent after it)")
	lease := fs.Duration("lease", experiments.DefaultRunLease, "lease length")
	skew := fs.Duration("skew", 0, "clock-skew only: how far worker B's clock runs ahead (default twice the lease)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table row")
	events := fs.Bool("events", false, "print every event to stderr as it happens")
	jobsSchema := fs.String("schema", judge.DefaultJobsSchema, "the jobs schema (dropped and recreated)")
	recvSchema := fs.String("receiver-schema", judge.DefaultReceiverSchema, "the receiver's schema (dropped and recreated)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *ordering == "" {
		return usagef("fencelab run: --ordering is required (new-owner-first, zombie-first, owner-done-first, crash-before-commit or clock-skew)")
	}
	if *ordering == string(experiments.FreePlay) {
		return usagef("fencelab run: free play needs a person at the controls: start the playground with fencelab serve")
	}
	if *lease <= 0 {
		return usagef("fencelab run: --lease %v must be positive", *lease)
	}
	if *style != "" {
		st, err := experiments.StyleByName(*style)
		if err != nil {
			return usagef("fencelab run: --style: %v", err)
		}
		broken |= st.Broken
	}
	cfg := experiments.RunConfig{Ordering: experiments.Ordering(*ordering), Broken: broken, SameIdentity: *same, Lease: *lease, Skew: *skew, Delivery: experiments.Delivery(*delivery)}
	if err := cfg.Validate(); err != nil {
		return usagef("fencelab run: %v", err)
	}
	schemas := judge.Schemas{Jobs: *jobsSchema, Receiver: *recvSchema}
	if err := schemas.Validate(); err != nil {
		return usagef("fencelab run: %v", err)
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tap, closeTap, err := tapFromEnv(getenv)
	if err != nil {
		return err
	}
	defer closeTap()
	var mu sync.Mutex
	emit := func(e protocol.Event) {
		mu.Lock()
		defer mu.Unlock()
		if tap != nil {
			b, _ := json.Marshal(e) // an Event always encodes
			tap(b)
		}
		if *events {
			fmt.Fprintln(stderr, formatEvent(e))
		}
	}
	w, err := openWorld(ctx, getenv, log)
	if err != nil {
		return err
	}
	defer w.Close()

	// With a database of the user's own, the run's schemas stay to be
	// looked at; a throwaway cluster takes them with it anyway.
	keep := getenv("DATABASE_URL") != ""
	r, err := runner.Open(ctx, &w.env, runner.Spec{ID: "r1", Config: cfg, Mode: protocol.ModeStep, Schemas: schemas, KeepSchemas: keep, EmitFunc: emit})
	if err != nil {
		return err
	}
	defer r.Close()
	res, err := r.Finish(ctx)
	if err != nil {
		if ctx.Err() != nil {
			r.Stop(protocol.StopInterrupted)
			return errors.New("interrupted")
		}
		return err
	}
	o := res.Outcome
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(o)
	}
	fmt.Fprint(stdout, table(*o))
	fmt.Fprintf(stdout, "\n%s\n", o.Headline)
	for _, v := range o.Violations[min(1, len(o.Violations)):] {
		fmt.Fprintf(stdout, "  also: %s\n", v.Text)
	}
	return nil
}

// table renders an outcome as the article's table row, in the lab's words.
func table(o protocol.Outcome) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s  %-26s  %-15s  %s\n", "ordering", protocol.ColumnWords(protocol.ColumnCall), protocol.ColumnWords(protocol.ColumnCommit), protocol.ColumnWords(protocol.ColumnFinal))
	words := map[protocol.Column]string{}
	for _, c := range o.Table {
		words[c.Column] = c.Words
	}
	fmt.Fprintf(&b, "%-20s  %-26s  %-15s  %s\n", o.Ordering, words[protocol.ColumnCall], words[protocol.ColumnCommit], words[protocol.ColumnFinal])
	return b.String()
}

// tapFromEnv opens the event tap FENCELAB_EVENT_TAP names, if any.
func tapFromEnv(getenv func(string) string) (func([]byte), func(), error) {
	path := getenv("FENCELAB_EVENT_TAP")
	if path == "" {
		return nil, func() {}, nil
	}
	tap, closeTap, err := api.EventTap(path)
	if err != nil {
		return nil, nil, err
	}
	return tap, func() { _ = closeTap() }, nil
}

// formatEvent renders an event as one line for a terminal.
func formatEvent(e protocol.Event) string {
	s := fmt.Sprintf("%s  %-8s %-10s %s", e.At.Local().Format("15:04:05.000"), e.Actor, e.Kind, e.Text)
	if e.SQL != nil {
		s += fmt.Sprintf("  [%s: %d row(s)]", e.SQL.Stmt.Name, e.SQL.Stmt.Rows)
	}
	return s
}
