package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fencelab/fencelab/cmd/internal/harness"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	solcheck "github.com/fencelab/fencelab/server/run/check"
	"github.com/fencelab/fencelab/server/sandbox"
)

const checkSummary = `The article's Step 3, "Check it", on your own solution: the four statements
of Step 2 — the claim, complete, fail, and the receiver's rule for one
delivery — each in a file, with named parameters:

  claim     :owner :lease :now           returns id, owner, epoch, lease_until
  complete  :id :owner :epoch :result    a row changed = it landed
  fail      :id :owner :epoch :error     a row changed = it landed
  receiver  :job_id :epoch :owner :body  a row changed = the delivery was taken

Each case is a run of two real worker processes running your statements
(the zombie frozen with SIGSTOP while its lease runs out on the database
clock) against a receiver running yours: new owner first and zombie first
(the article's table), then a crash before the commit, a worker whose clock
runs ahead, and one name for both workers. Your statements run as a
Postgres role made for each run, with rights on that run's tables alone.

Prints the article's table for your code, cell by cell against the
article's, and the requirements the runs show broken; --json prints one
object {pass, cases: [{case, ok, …}], broken: [{requirement, case, words}]}.
Exits 0 when every cell is the article's, 1 when any differs, 2 for bad
input (a missing file, a statement that does not prepare). --junit FILE
also writes the result as JUnit XML, one test case per case, for a
course's CI to grade hand-ins in its own pipeline. --report DIR writes
what the runs did, to open in a browser with no server: each case's run
as a page that replays it, and DIR/index.html, the failing cases first.

Start from the article's leases-alone build (--write-start DIR) or read
ours (--write-ours DIR).

Postgres: DATABASE_URL if set, otherwise a private throwaway cluster. The
check hardens the database it uses (it revokes TEMPORARY, pg_notify,
advisory locks and large objects from PUBLIC there): point DATABASE_URL
only at a database that is fencelab's own.`

func checkCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", checkSummary, stderr)
	files := map[sandbox.Kind]*string{}
	for _, k := range sandbox.Kinds() {
		spec, _ := sandbox.SpecOf(k)
		files[k] = fs.String(k.String(), "", fmt.Sprintf("the file holding your %s: %s", k, spec.Contract))
	}
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	writeOurs := fs.String("write-ours", "", "write fencelab's own four statements to this directory as claim.sql, complete.sql, fail.sql and receiver.sql, and exit")
	writeStart := fs.String("write-start", "", "write the leases-alone statements the page starts from to this directory, and exit")
	lease := fs.Duration("lease", solcheck.DefaultLease, "the lease of every case's run")
	events := fs.Bool("events", false, "print every event to stderr as it happens")
	junitPath := fs.String("junit", "", "also write the result to this file as JUnit XML: one test case per case of the check (the runs, then the probes), for a course's CI; written whole once the check is done, and the exit status is the same")
	reportPath := fs.String("report", "", "also write what the runs did to this directory, to open in a browser with no server: each case's run as a page that replays it (N-case.html) and index.html, the failing cases first; made if missing")
	workerCmd := fs.String("worker", "", "check your own worker program instead, in any language: this command line (run with /bin/sh -c) is started as worker A and worker B under the contract in WORKERS.md; --receiver is then optional (default: ours)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *junitPath != "" && (*writeOurs != "" || *writeStart != "") {
		return usagef("fencelab check: --junit writes a check's result: it does not go with --write-ours or --write-start")
	}
	if *reportPath != "" && (*writeOurs != "" || *writeStart != "") {
		return usagef("fencelab check: --report writes a check's runs: it does not go with --write-ours or --write-start")
	}
	if *reportPath != "" && *workerCmd != "" {
		return usagef("fencelab check: --report replays each case's run from its events, and a worker program's cases are played by the harness, which records none yet: --report goes with your four statements, not --worker")
	}
	out := checkOut{asJSON: *asJSON, stdout: stdout}
	if *junitPath != "" {
		j, err := createJUnit(*junitPath)
		if err != nil {
			return err
		}
		defer j.discard()
		out.junit = j
	}
	if *workerCmd != "" {
		for _, k := range []sandbox.Kind{sandbox.Claim, sandbox.Complete, sandbox.Fail} {
			if *files[k] != "" {
				return usagef("fencelab check: --worker runs your program's own statements: --%s does not apply", k)
			}
		}
		if *writeOurs != "" || *writeStart != "" {
			return usagef("fencelab check: --worker and --write-ours or --write-start do not go together")
		}
		return checkWorker(ctx, *workerCmd, *files[sandbox.Receiver], *lease, out, getenv, stderr)
	}
	switch {
	case *writeOurs != "" && *writeStart != "":
		return usagef("fencelab check: --write-ours and --write-start write one solution each: give one")
	case *writeOurs != "":
		return writeSolution(*writeOurs, sandbox.Ours(), stdout)
	case *writeStart != "":
		return writeSolution(*writeStart, sandbox.Start(), stdout)
	}
	if _, err := solcheck.Lease("--lease", *lease); err != nil {
		return usagef("fencelab check: %v", err)
	}
	var sol sandbox.Solution
	var missing []string
	for _, k := range sandbox.Kinds() {
		path := *files[k]
		if path == "" {
			missing = append(missing, "--"+k.String())
			continue
		}
		text, err := readStatement(path)
		if err != nil {
			return usagef("fencelab check: --%s: %v", k, err)
		}
		sol = sol.With(k, text)
	}
	if len(missing) > 0 {
		return usagef("fencelab check: %s %s required (fencelab check --write-start DIR writes a set to start from)", strings.Join(missing, ", "), isAre(len(missing)))
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dsn, pool, closeDB, err := openDB(ctx, getenv, log)
	if err != nil {
		return err
	}
	defer closeDB()
	w, err := solcheck.OpenWorld(ctx, pool, dsn, "", log)
	if err != nil {
		return err
	}
	defer w.Close()
	cfg := solcheck.Config{Env: &w.Env, Solution: sol, Lease: *lease, Parallel: 2}
	var report *reportDir
	if *reportPath != "" {
		if report, err = openReportDir(*reportPath); err != nil {
			return err
		}
		cfg.OnRun = report.ended
	}
	if *events || report != nil {
		cfg.EmitFunc = func(e protocol.Event) {
			if *events {
				fmt.Fprintln(stderr, formatEvent(e))
			}
			if report != nil {
				report.emit(e)
			}
		}
	}
	rep, err := solcheck.Run(ctx, cfg)
	var refused *sandbox.Error
	switch {
	case errors.As(err, &refused):
		return statementError(refused, *files[refused.Kind], sol.Text(refused.Kind))
	case err != nil:
		return err
	}
	if report != nil {
		index, err := report.write(ctx, rep)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "fencelab check: each case's run, to replay in a browser: %s\n", index)
	}
	return out.print(rep, experiments.ProbeCases())
}

// checkOut is where a check's report goes: the terminal (text or JSON)
// and, with --junit, a JUnit file.
type checkOut struct {
	asJSON bool
	stdout io.Writer
	junit  *junitFile
}

// print prints a check's report, writes its JUnit file, and says whether
// it passed; probes are the probe cases the check played.
func (o checkOut) print(rep protocol.CheckReport, probes []experiments.CheckCase) error {
	if o.junit != nil {
		if err := o.junit.write(rep, probes); err != nil {
			return err
		}
	}
	stdout := o.stdout
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := solcheck.WriteText(stdout, rep); err != nil {
		return err
	}
	if !rep.Pass {
		return errCheckFailed
	}
	return nil
}

// checkWorker checks a reader's worker program: the harness plays each
// case with it as A and B, steered from outside; the receiver runs ours,
// or the reader's receiver statement from receiverFile.
func checkWorker(ctx context.Context, command, receiverFile string, lease time.Duration, out checkOut, getenv func(string) string, stderr io.Writer) error {
	receiverText := ""
	if receiverFile != "" {
		text, err := readStatement(receiverFile)
		if err != nil {
			return usagef("fencelab check: --receiver: %v", err)
		}
		receiverText = text
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dsn, pool, closeDB, err := openDB(ctx, getenv, log)
	if err != nil {
		return err
	}
	defer closeDB()
	// The workers log in as a role of their own per case (harness), which
	// needs a hardened database, as the reader's receiver does.
	if err := sandbox.Harden(ctx, pool); err != nil {
		return err
	}
	cfg := harness.Config{Command: command, Pool: pool, DatabaseURL: dsn, Lease: lease, Log: log, Stderr: stderr}
	if receiverText != "" {
		cfg.NewReceiverFunc = solcheck.ReceiverOf(pool, receiverText)
	}
	player, err := harness.NewPlayer(cfg)
	if err != nil {
		return err
	}
	// The trial: the reader's receiver rule alone, if they gave one, then
	// the program's own probes (what its statements do that no run asks).
	c, err := solcheck.Start(ctx, solcheck.Request{Lease: lease, Cases: player.Cases(), Validate: func(ctx context.Context) (experiments.Probes, error) {
		var probes experiments.Probes
		if receiverText != "" {
			var err error
			if probes, err = solcheck.ValidateReceiver(ctx, pool, receiverText); err != nil {
				return probes, err
			}
		}
		own, err := player.Probe(ctx)
		probes.Statements, probes.Played = own.Statements, append(probes.Played, own.Played...)
		return probes, err
	}})
	var refused *sandbox.Error
	switch {
	case errors.As(err, &refused):
		return statementError(refused, receiverFile, receiverText)
	case err != nil:
		return err
	}
	rep, err := c.Play(ctx, player, 1, nil)
	if err != nil {
		return err
	}
	// Without a receiver of the reader's, ours answers, and the receiver's
	// probe is not played.
	played := experiments.ProbeCases()
	if receiverText == "" {
		played = slices.DeleteFunc(played, func(c experiments.CheckCase) bool { return c == experiments.CaseReceiver })
	}
	return out.print(rep, played)
}

// junitFile is where --junit writes: a file made beside the one named
// before the check runs, so that a path that cannot be written is refused
// before anything runs, and renamed over it once the report is whole, so
// that a check cut short leaves the named file as it was.
type junitFile struct {
	tmp  *os.File
	path string
}

func createJUnit(path string) (*junitFile, error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, usagef("fencelab check: --junit: %s is not a regular file", path)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, usagef("fencelab check: --junit: cannot write in %s: %v", dir, errors.Unwrap(err))
	}
	return &junitFile{tmp: f, path: path}, nil
}

func (j *junitFile) write(rep protocol.CheckReport, probes []experiments.CheckCase) error {
	err := solcheck.WriteJUnit(j.tmp, rep, probes)
	if err == nil {
		err = j.tmp.Chmod(0o644)
	}
	if cerr := j.tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(j.tmp.Name(), j.path)
	}
	if err != nil {
		return fmt.Errorf("write --junit %s: %w", j.path, err)
	}
	j.tmp = nil
	return nil
}

// discard removes the file a check that never wrote its report made.
func (j *junitFile) discard() {
	if j.tmp != nil {
		j.tmp.Close()
		os.Remove(j.tmp.Name())
	}
}

// errCheckFailed is a check that ran and found a cell that is not the
// article's: exit status 1.
var errCheckFailed = fault.Errorf(fault.Conflict, "check: the solution does not pass")

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// readStatement reads one statement's file: a regular file of at most
// sandbox.MaxTextBytes.
func readStatement(path string) (string, error) {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return "", fmt.Errorf("cannot read %s: %w", path, errors.Unwrap(err))
	case !st.Mode().IsRegular():
		return "", fmt.Errorf("%s is not a regular file", path)
	case st.Size() > sandbox.MaxTextBytes:
		return "", fmt.Errorf("%s is %d bytes long; a statement may be at most %d", path, st.Size(), sandbox.MaxTextBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cannot read %s: %w", path, errors.Unwrap(err))
	}
	return string(b), nil
}

// statementError says which file's statement was refused, and where: the
// line and column of Postgres's position in it, as sandbox reckons them.
func statementError(e *sandbox.Error, path, text string) error {
	where := path
	if e.Position > 0 {
		line, col := e.Line, e.Column
		if line == 0 {
			line, col = sandbox.LineColumn(text, e.Position)
		}
		where = fmt.Sprintf("%s:%d:%d", path, line, col)
	}
	return usagef("fencelab check: %s: %s", where, e.Message)
}

// writeSolution writes a solution's four files to dir, making it if need
// be, and never over a file that is there already.
func writeSolution(dir string, sol sandbox.Solution, stdout io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return usagef("fencelab check: cannot make %s: %v", dir, errors.Unwrap(err))
	}
	for _, k := range sandbox.Kinds() {
		path := filepath.Join(dir, solcheck.FileName(k))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			if errors.Is(err, os.ErrExist) {
				return usagef("fencelab check: %s exists already; nothing was written over it", path)
			}
			return usagef("fencelab check: cannot write %s: %v", path, errors.Unwrap(err))
		}
		_, err = io.WriteString(f, sol.Text(k)+"\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		fmt.Fprintln(stdout, path)
	}
	return nil
}
