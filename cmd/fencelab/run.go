package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/pgcluster"
	"github.com/fencelab/fencelab/server/receiver"
	"github.com/fencelab/fencelab/server/runner"
	"github.com/fencelab/fencelab/server/supervisor"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
)

// lab is everything one `fencelab run` needs around it: Postgres, the two
// schemas, the receiver on loopback and a worker supervisor. Close tears it
// all down, in reverse order.
type lab struct {
	dsn         string
	pool        *pgxpool.Pool
	schemas     engine.Schemas
	receiverURL string
	sup         *supervisor.Supervisor
	closers     []func()
}

func (l *lab) Close() {
	for i := len(l.closers) - 1; i >= 0; i-- {
		l.closers[i]()
	}
	l.closers = nil
}

// openDB connects to DATABASE_URL, or starts a throwaway cluster.
func openDB(ctx context.Context, getenv func(string) string, log *slog.Logger) (string, *pgxpool.Pool, func(), error) {
	dsn, stop, err := pgcluster.Open(ctx, getenv, pgcluster.Options{Logf: func(format string, a ...any) {
		log.Info(fmt.Sprintf(format, a...))
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
	// Sessions, the receiver's upserts and the event stamps share this pool;
	// each run's workers connect on their own (two each, plus one to LISTEN),
	// so 20 here and 12 runs stay within Postgres's default 100 connections.
	if pcfg.MaxConns < 20 {
		pcfg.MaxConns = 20
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

// openLab starts the world of a run. emit receives the receiver's decisions.
func openLab(ctx context.Context, getenv func(string) string, log *slog.Logger, schemas engine.Schemas, broken engine.Guards, emit func(engine.Event)) (*lab, error) {
	l := &lab{schemas: schemas}
	dsn, pool, closeDB, err := openDB(ctx, getenv, log)
	if err != nil {
		return nil, err
	}
	l.dsn, l.pool = dsn, pool
	l.closers = append(l.closers, closeDB)
	if err := engine.Reset(ctx, pool, schemas); err != nil {
		l.Close()
		return nil, err
	}
	rcv, err := engine.NewReceiver(pool, engine.ReceiverConfig{Schema: schemas.Receiver, Guards: broken})
	if err != nil {
		l.Close()
		return nil, err
	}
	e := receiver.Standalone(&receiver.Handler{
		ReceiverFunc: receiver.Fixed(rcv),
		OnDecisionFunc: func(_ echo.Context, d engine.Delivery, rc engine.Receipt, traces []engine.Trace) {
			emit(receiver.Event(d, rc, traces))
		},
	}, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		l.Close()
		return nil, err
	}
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	l.closers = append(l.closers, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	l.receiverURL = "http://" + ln.Addr().String() + "/deliveries"
	sup, err := supervisor.New(supervisor.Config{Log: log})
	if err != nil {
		l.Close()
		return nil, err
	}
	l.sup = sup
	l.closers = append(l.closers, func() { _ = sup.Close() })
	return l, nil
}

const runSummary = `Runs one scenario end to end: two real worker processes (the zombie truly
frozen with SIGSTOP while its lease runs out on the database clock), the
receiver, and Postgres. Prints the article's table row for the run, or with
--json one JSON object. Exits 0 when the run completed, whatever the verdict.

Orderings: new-owner-first, zombie-first, crash-before-commit, clock-skew.
Guards: status-check, owner-check, epoch-check, epoch-increment,
receiver-check, db-clock, skip-locked.
Styles: fencelab, state-only, id-only, token.`

func runCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", runSummary, stderr)
	ordering := fs.String("ordering", "", "the scenario (required): new-owner-first, zombie-first, crash-before-commit or clock-skew")
	var broken engine.Guards
	fs.Var(&broken, "break", "turn a guard off (repeatable, or comma-separated)")
	style := fs.String("style", "", "start from a queue style's guards: fencelab, state-only, id-only or token")
	same := fs.Bool("same-identity", false, "give the new owner the zombie's own name")
	lease := fs.Duration("lease", engine.DefaultRunLease, "lease length")
	skew := fs.Duration("skew", 0, "clock-skew only: how far worker B's clock runs ahead (default twice the lease)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table row")
	events := fs.Bool("events", false, "print every event to stderr as it happens")
	jobsSchema := fs.String("schema", engine.DefaultJobsSchema, "the jobs schema (dropped and recreated)")
	recvSchema := fs.String("receiver-schema", engine.DefaultReceiverSchema, "the receiver's schema (dropped and recreated)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *ordering == "" {
		return usagef("fencelab run: --ordering is required (new-owner-first, zombie-first, crash-before-commit or clock-skew)")
	}
	if *ordering == string(engine.FreePlay) {
		return usagef("fencelab run: free play needs a person at the controls: start the playground with fencelab serve")
	}
	if *lease <= 0 {
		return usagef("fencelab run: --lease %v must be positive", *lease)
	}
	if *style != "" {
		st, err := engine.StyleByName(*style)
		if err != nil {
			return usagef("fencelab run: --style: %v", stripInvalid(err))
		}
		broken |= st.Broken
	}
	cfg := engine.RunConfig{Ordering: engine.Ordering(*ordering), Broken: broken, SameIdentity: *same, Lease: *lease, Skew: *skew}
	if err := cfg.Validate(); err != nil {
		return usagef("fencelab run: %v", stripInvalid(err))
	}
	schemas := engine.Schemas{Jobs: *jobsSchema, Receiver: *recvSchema}
	if err := schemas.Validate(); err != nil {
		return usagef("fencelab run: %v", stripInvalid(err))
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var mu sync.Mutex
	emit := func(e engine.Event) {
		if !*events {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(stderr, formatEvent(e))
	}
	l, err := openLab(ctx, getenv, log, schemas, broken, emit)
	if err != nil {
		return err
	}
	defer l.Close()

	r, err := runner.Start(ctx, runner.Config{Run: cfg, Pool: l.pool, DatabaseURL: l.dsn, Schemas: schemas,
		ReceiverURL: l.receiverURL, Supervisor: l.sup, EmitFunc: emit})
	if err != nil {
		return err
	}
	defer r.Close()
	o, err := r.Finish(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted")
		}
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(o)
	}
	fmt.Fprint(stdout, runner.Table(o))
	fmt.Fprintf(stdout, "\n%s\n", o.Verdict)
	for _, v := range o.Violations[min(1, len(o.Violations)):] {
		fmt.Fprintf(stdout, "  also: %s\n", v)
	}
	return nil
}

// stripInvalid drops the "invalid input: " prefix from a usage message.
func stripInvalid(err error) string {
	return strings.TrimPrefix(err.Error(), engine.ErrInvalidInput.Error()+": ")
}

// formatEvent renders an event as one line for a terminal.
func formatEvent(e engine.Event) string {
	s := fmt.Sprintf("%s  %-8s %-10s %s", e.At.Local().Format("15:04:05.000"), e.Actor, e.Kind, e.Text)
	if e.Rows != nil && e.Kind == engine.KindSQL {
		s += fmt.Sprintf("  [%s: %d row(s)]", e.Name, *e.Rows)
	}
	return s
}
