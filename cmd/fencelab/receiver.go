package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/run/receiver"
)

const receiverSummary = `The external receiver as a standalone HTTP service. It keeps the newest
epoch per job in its own schema, refuses older epochs (HTTP 409) and accepts
the same epoch again.

  POST /deliveries          {"job_id":1,"epoch":2,"owner":"worker-b","payload":{...}}
  GET  /deliveries/JOB_ID   what it holds for a job
  GET  /decisions/JOB_ID    every decision it made for a job
  GET  /healthz`

func receiverCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("receiver", receiverSummary, stderr)
	addr := fs.String("addr", "127.0.0.1:8081", "address to listen on")
	schema := fs.String("schema", judge.DefaultReceiverSchema, "the receiver's schema")
	var broken playground.Guards
	fs.Var(&broken, "break", "turn a guard off; only receiver-check applies here")
	reset := fs.Bool("reset", false, "drop and recreate the schema first")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := engine.ValidateSchemaName(*schema); err != nil {
		return usagef("fencelab receiver: --schema: %v", err)
	}
	if broken.Keep(playground.ReceiverCheck) != 0 {
		return usagef("fencelab receiver: --break: only receiver-check applies to the receiver")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return usagef("fencelab receiver: --addr: %v", err)
	}
	defer ln.Close()
	_, pool, closeDB, err := openDB(ctx, getenv, log)
	if err != nil {
		return err
	}
	defer closeDB()
	setup := engine.SetupReceiver
	if *reset {
		setup = engine.ResetReceiver
	}
	if err := setup(ctx, pool, *schema); err != nil {
		return err
	}
	rcv, err := playground.NewReceiver(pool, engine.ReceiverConfig{Schema: *schema}, playground.ReceiverHooks{Broken: broken})
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: receiver.Standalone(&receiver.Handler{ReceiverFunc: receiver.Fixed(rcv)}, log), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "receiver listening on http://%s (schema %s, %s)\n", ln.Addr(), *schema, broken)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
