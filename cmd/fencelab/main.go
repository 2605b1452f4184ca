// Command fencelab is the one binary of the fencing-token playground:
//
//	fencelab [serve]   the playground server (the default)
//	fencelab run       one scenario end to end, printed as the article's table row
//	fencelab check     the article's test on a reader's own four statements
//	fencelab worker    one worker process (the server and `run` spawn these)
//	fencelab receiver  the external receiver as a standalone HTTP service
//	fencelab bench     the fenced claim→complete cycle, against pgbench's ceiling
//	fencelab migrate   a job queue's schema up or down to a version
//	fencelab probe     is a server alive? (the Docker HEALTHCHECK)
//	fencelab crowd     a crowd of simulated blog readers against a server, and how it held up
//	                   (`fencelab load`, its old name, still works)
//
// main only wires signals to a context and calls run, so tests can call run
// with their own arguments, environment and output.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/run/worker"
)

// stopSignals end every command as Ctrl-C does: SIGTERM (docker stop,
// systemd) and SIGHUP (a closed terminal, an ssh session that drops) too,
// so that a server stops its runs, reaps its workers and drops its schemas
// whichever of them arrives, instead of dying with them all left behind.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// usagef is a bad flag or value: one line on stderr and exit status 2.
func usagef(format string, a ...any) error { return fault.Errorf(fault.Invalid, format, a...) }

// exitCodes is the exit status of each fault code: the one place the
// binary chooses them. Bad usage is 2; the rest, 1.
var exitCodes = map[fault.Code]int{fault.Invalid: 2}

// exitCode prints err as one line and returns the process's exit status:
// 0 for success and --help, 2 for bad usage, 1 for anything else.
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	code, ok := exitCodes[fault.CodeOf(err)]
	if !ok {
		code = 1
	}
	if code == 2 {
		fmt.Fprintln(stderr, err)
	} else {
		fmt.Fprintln(stderr, "fencelab:", err)
	}
	return code
}

const usage = `fencelab: see, break and understand fencing tokens.

Usage:
  fencelab [serve] [flags]   the playground server (default)
  fencelab run [flags]       run one scenario end to end with real worker processes
  fencelab check [flags]     check your own solution (four statements, or a worker
                             program in any language) against a real zombie
  fencelab worker [flags]    one worker process (spawned by serve and run)
  fencelab receiver [flags]  the external receiver as a standalone HTTP service
  fencelab bench [flags]     benchmark the fenced claim→complete cycle against pgbench
  fencelab migrate [flags]   migrate a job queue's schema up or down (DATABASE_URL)
  fencelab probe [flags]     ask a running server whether it is alive (for HEALTHCHECK)
  fencelab crowd [flags]     a crowd of simulated blog readers against a server:
                             how it holds up (was 'fencelab load', which still works)

Postgres: DATABASE_URL if set, otherwise a private throwaway cluster started
from this machine's PostgreSQL server binaries.

Run 'fencelab COMMAND --help' for a command's flags.
`

// run dispatches to a subcommand.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd, rest := "serve", args
	if len(args) > 0 && (len(args[0]) == 0 || args[0][0] != '-') {
		cmd, rest = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprint(stderr, usage)
			return flag.ErrHelp
		}
		return serveCmd(ctx, rest, getenv, stdout, stderr)
	case "run":
		return runCmd(ctx, rest, getenv, stdout, stderr)
	case "check":
		return checkCmd(ctx, rest, getenv, stdout, stderr)
	case "worker":
		return worker.Main(ctx, rest, getenv, stdin, stdout, stderr)
	case "receiver":
		return receiverCmd(ctx, rest, getenv, stdout, stderr)
	case "bench":
		return benchCmd(ctx, rest, getenv, stdout, stderr)
	case "migrate":
		return migrateCmd(ctx, rest, getenv, stdout, stderr)
	case "probe":
		return probeCmd(ctx, rest, getenv, stdout, stderr)
	case "crowd":
		return crowdCmd(ctx, rest, stdout, stderr)
	case "load": // the old name of crowd
		return loadCmd(ctx, rest, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return usagef("fencelab: unknown command %q (want serve, run, check, worker, receiver, bench, migrate, probe or crowd; see fencelab --help)", cmd)
}

// newFlagSet returns a flag set that reports errors as usage errors and
// prints its help on request.
func newFlagSet(name, summary string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("fencelab "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // a parse error is one line, printed by exitCode
	helpText[fs] = func() {
		fmt.Fprintf(stderr, "Usage: fencelab %s [flags]\n\n%s\n\nFlags:\n", name, summary)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// helpText holds each flag set's --help printer.
var helpText = map[*flag.FlagSet]func(){}

// parse parses flags and turns every problem into one usage line.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			helpText[fs]()
			return err
		}
		return usagef("%s: %v", fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}
