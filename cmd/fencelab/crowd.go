package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/fencelab/fencelab/cmd/internal/crowd"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
)

const crowdSummary = `A crowd of simulated blog readers against the playground server, over its
real HTTP API and WebSocket. Each reader does what a reader of the page
does: creates a session, opens its WebSocket, presses Run (the article's
run, played automatically) and waits for the verdict. Then it prints how
the server held up: readers ok (a verdict came, and it is a correct
build's: safe), busy (the server at one of its caps answered busy, as it
tells the page to replay a recording instead) or in error (each message,
with a count); the time from Run to the verdict (p50, p95, max, of the
readers that were ok); and the server's peak memory and Postgres
connections, polled from its /api/stats every 250ms.

By default it starts its own fencelab serve on 127.0.0.1 with a free port
(pass flags to it with --serve-flag, e.g. --serve-flag=--max-runs=60),
and stops it at the end; with --url it plays against a server already
running, on this machine unless --allow-remote. Exits 0 when the crowd
ran, whatever the counts.

--readers may be a list, e.g. --readers 1,12,30,60,100: the loads run one
after another against the one server, in that order. Between two loads it
settles: it waits until /api/stats counts no run in flight, then --settle
more, so the server makes its spare schemas again while quiet. Then it
prints one table, a row per load, with each load's p50 as a ratio to the
first load's: the first is the baseline.

--class N plays a classroom instead (N students, 1 to 60): a teacher
opens a class, N students join it by its code, each with a session and a
socket of their own, and once all have joined they press Check at once,
every third on a wrong solution (three kinds in turn). It prints the time
from Check to each student's report (p50, p95, max), whether each got
exactly one report and whether its pass is the solution's (ok, wrong
verdicts, duplicates, missing, busy, errors), and the board's lag: from a
report to the teacher's board showing it, polled every 250ms. With
--class, --timeout is each student's wait for the report (default 5m)
and --lease the check's; --readers, --ramp, --ordering, --pace and
--settle are the readers' and are refused. With FENCELAB_BOARD set to a
teacher's board address (http://HOST/classes/ID#token=..., on --url's
server: the environment, not a flag, as it holds the teacher's key), the
students join that class, beside whoever is in it, and it is left open.

(This was 'fencelab load', a name that still works; it is not the page's
load lab, which freezes workers at scale.)`

// stringsFlag is a repeatable flag that keeps each value whole: a flag
// passed on to the server may itself hold a comma.
type stringsFlag []string

func (l *stringsFlag) String() string     { return strings.Join(*l, " ") }
func (l *stringsFlag) Set(s string) error { *l = append(*l, s); return nil }

// crowdCmd is `fencelab crowd`: its flags become a crowd.Config, and the
// report is printed, whatever the error that follows it.
func crowdCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("crowd", crowdSummary, stderr)
	readersList := fs.String("readers", fmt.Sprint(crowd.DefaultReaders), fmt.Sprintf("simulated readers, 1 to %d; or a list of loads run one after another against one server, e.g. 1,12,30,60,100 (at most %d loads, %d readers in all)", crowd.MaxReaders, crowd.MaxLoads, crowd.MaxSeriesReaders))
	settle := fs.Duration("settle", crowd.DefaultSettle, fmt.Sprintf("between two loads of a --readers list: once no run is in flight, wait this much more for the server's spare schemas (0 to %v)", crowd.MaxSettle))
	ramp := fs.Duration("ramp", 0, "spread the readers' arrivals evenly over this long; 0: all at once")
	ordering := fs.String("ordering", string(crowd.DefaultOrdering), "the run each reader starts: new-owner-first, zombie-first, owner-done-first, crash-before-commit or clock-skew")
	lease := fs.Duration("lease", crowd.DefaultLease, "the run's lease")
	pace := fs.Duration("pace", crowd.DefaultPace, "the run's pace between auto-played steps")
	timeout := fs.Duration("timeout", crowd.DefaultTimeout, fmt.Sprintf("how long one reader waits, from its arrival to the verdict (at most %v)", crowd.MaxTimeout))
	target := fs.String("url", "", "a running server to play against, e.g. http://127.0.0.1:8080; default: start one's own fencelab serve")
	allowRemote := fs.Bool("allow-remote", false, "let --url point at another machine")
	var serveFlags stringsFlag
	fs.Var(&serveFlags, "serve-flag", "a flag for the fencelab serve this command starts, e.g. --serve-flag=--max-runs=120 (repeatable)")
	students := fs.Int("class", 0, fmt.Sprintf("play a class instead: this many students, 1 to %d, join a class and press Check at once", crowd.MaxStudents))
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	if err := parse(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	bad := func(err error) error { return usagef("fencelab crowd: %s", fault.MessageOf(err)) }
	// In a Config a zero timeout or lease means the default; typed here,
	// it is a mistake.
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"timeout", *timeout}, {"lease", *lease}} {
		if f.d == 0 {
			return usagef("fencelab crowd: --%s 0s must be above 0", f.name)
		}
	}
	exe := ""
	if *target == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("crowd: find own executable: %w", err)
		}
	}
	server := crowd.Server{URL: *target, AllowRemote: *allowRemote, Executable: exe, ServeFlags: serveFlags,
		Log: log.New(stderr, "fencelab crowd: ", 0)}
	if set["class"] {
		for _, name := range []string{"readers", "ramp", "ordering", "pace", "settle"} {
			if set[name] {
				return usagef("fencelab crowd: --%s is for readers pressing Run; --class plays students pressing Check", name)
			}
		}
		cfg := crowd.ClassConfig{Students: *students, Server: server, Board: os.Getenv("FENCELAB_BOARD")}
		if set["lease"] {
			cfg.Lease = *lease
		}
		if set["timeout"] {
			cfg.Timeout = *timeout
		}
		return classCmd(ctx, cfg, stdout, *asJSON)
	}
	counts, err := crowd.ParseReaders(*readersList)
	if err != nil {
		return bad(err)
	}
	cfg := crowd.Config{Readers: counts[0], Settle: *settle, Ramp: *ramp, Timeout: *timeout,
		Ordering: experiments.Ordering(*ordering), Lease: *lease, Pace: *pace, Server: server}
	if err := cfg.Validate(); err != nil {
		return bad(err)
	}
	var out interface{ Table() string } // nil when the crowd could not start
	if len(counts) > 1 {
		ser, rerr := crowd.RunSeries(ctx, cfg, counts)
		if ser != nil {
			out = ser
		}
		err = rerr
	} else {
		rep, rerr := crowd.Run(ctx, cfg)
		if rep != nil {
			out = rep
		}
		err = rerr
	}
	if out != nil {
		if perr := printReport(stdout, out, *asJSON); perr != nil && err == nil {
			err = perr
		}
	}
	if fault.CodeOf(err) == fault.Invalid {
		return bad(err) // a --serve-flag the server refused
	}
	return err
}

// classCmd is `fencelab crowd --class N`: the class's report is printed,
// whatever the error that follows it.
func classCmd(ctx context.Context, cfg crowd.ClassConfig, stdout io.Writer, asJSON bool) error {
	bad := func(err error) error { return usagef("fencelab crowd: %s", fault.MessageOf(err)) }
	if err := cfg.Validate(); err != nil {
		return bad(err)
	}
	rep, err := crowd.RunClass(ctx, cfg)
	if rep != nil {
		if perr := printReport(stdout, rep, asJSON); perr != nil && err == nil {
			err = perr
		}
	}
	if fault.CodeOf(err) == fault.Invalid {
		return bad(err) // a --serve-flag the server refused
	}
	return err
}

// printReport prints a crowd's report or series: its table, or as JSON.
func printReport(stdout io.Writer, r interface{ Table() string }, asJSON bool) error {
	if !asJSON {
		_, err := fmt.Fprint(stdout, r.Table())
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// loadCmd is `fencelab load`, the old name of `fencelab crowd`, kept so
// the scripts and pages that name it still work.
func loadCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fmt.Fprintln(stderr, "fencelab load is now fencelab crowd (the same flags); the old name will go")
	return crowdCmd(ctx, args, stdout, stderr)
}
