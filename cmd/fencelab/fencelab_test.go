package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
)

// want is one cell of the guard × ordering table: what a run must end in.
type want struct {
	receiverCall experiments.Call
	commit       experiments.Call
	rowFrom      string
	receiverFrom string
	epoch        int64
	safe         bool
}

// correct is the correct build's cell for an ordering, from the engine's
// specification (the article's table), which the page also shows.
func correct(o experiments.Ordering) want {
	x, _ := experiments.ExpectedOutcome(o)
	return want{x.ZombieReceiverCall, x.ZombieCommit, x.ResultFrom, x.ReceiverFrom, x.Epoch, true}
}

var (
	correctNOF = correct(experiments.NewOwnerFirst)
	correctZF  = correct(experiments.ZombieFirst)
	correctODF = correct(experiments.OwnerDoneFirst)
	correctCBC = correct(experiments.CrashBeforeCommit)
	correctCS  = correct(experiments.ClockSkew)
)

func check(t *testing.T, o protocol.Outcome, w want) {
	t.Helper()
	got := want{o.ZombieReceiverCall, o.ZombieCommit, o.Final.ResultFrom, o.Receiver.PayloadFrom, o.Final.Epoch, o.Safe}
	if got != w {
		t.Errorf("outcome = %+v\nwant      %+v\nverdict: %s\nviolations: %+v", got, w, o.Verdict, o.Violations)
	}
	if o.Final.Status != protocol.StatusDone {
		t.Errorf("the job ends %s, want done", o.Final.Status)
	}
	if o.Safe != (len(o.Violations) == 0) {
		t.Errorf("safe=%v but violations=%+v", o.Safe, o.Violations)
	}
	if !o.Safe && !strings.HasPrefix(o.Verdict, "Unsafe: ") || o.Safe && !strings.HasPrefix(o.Verdict, "Safe: ") {
		t.Errorf("verdict %q does not match safe=%v", o.Verdict, o.Safe)
	}
}

// TestRun_TheArticlesTable runs the article's two orderings (and the crash)
// with two real worker processes, the zombie frozen by SIGSTOP, and checks
// the outcome table of DESIGN.md: epoch 2, the new owner's result in the
// row and at the receiver.
func TestRun_TheArticlesTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ordering string
		want     want
	}{
		{"new-owner-first", correctNOF},
		{"zombie-first", correctZF},
		{"owner-done-first", correctODF},
		{"crash-before-commit", correctCBC},
		{"clock-skew", correctCS},
	} {
		t.Run(tc.ordering, func(t *testing.T) {
			t.Parallel()
			o, err := runJSON(t, orderingArgs(tc.ordering)...)
			if err != nil {
				t.Fatal(err)
			}
			check(t, o, tc.want)
			if o.Ordering != experiments.Ordering(tc.ordering) || len(o.Broken) != 0 || o.Final.Owner == "" {
				t.Errorf("outcome header = %+v", o)
			}
		})
	}
}

// orderingArgs are the flags that run an ordering. The clock-skew run
// means something only while worker A's lease is live on the database
// clock when B looks: its lease is 3 s, which no loaded machine outlasts
// between A's claim and B's (the default 1 s once ran out in between on
// CI, and B rightly took the job). It waits for no expiry, so it costs no
// time.
func orderingArgs(o string) []string {
	if o == "clock-skew" {
		return []string{"--ordering", o, "--lease", "3s"}
	}
	return []string{"--ordering", o}
}

// matrixCell is one run of the guard × ordering table.
type matrixCell struct {
	args []string
	want want
}

// guardMatrix is the table the README tells: for each guard turned off,
// what each ordering ends in. Cells not listed end as the correct build.
func guardMatrix() map[string]matrixCell {
	m := map[string]matrixCell{}
	correct := map[string]want{"new-owner-first": correctNOF, "zombie-first": correctZF, "owner-done-first": correctODF, "crash-before-commit": correctCBC, "clock-skew": correctCS}
	for _, g := range append([]string{"none"}, guardNames...) {
		for o, w := range correct {
			args := orderingArgs(o)
			if g != "none" {
				args = append(args, "--break", g)
			}
			m[o+"/"+g] = matrixCell{args, w}
		}
	}
	set := func(key string, w want) { c := m[key]; c.want = w; m[key] = c }
	// A shared epoch: the receiver takes the zombie's stale delivery as a retry.
	set("new-owner-first/epoch-increment", want{experiments.CallAccepted, experiments.CallRejected, "B", "A", 0, false})
	set("zombie-first/epoch-increment", want{experiments.CallAcceptedThenSuperseded, experiments.CallRejected, "B", "B", 0, false})
	set("owner-done-first/epoch-increment", want{experiments.CallAccepted, experiments.CallRejected, "B", "A", 0, false})
	set("crash-before-commit/epoch-increment", want{experiments.CallAcceptedThenSuperseded, experiments.CallNotAttempted, "B", "B", 0, false})
	set("clock-skew/epoch-increment", want{experiments.CallAccepted, experiments.CallAccepted, "A", "A", 0, true})
	// No receiver check: the late delivery overwrites the newer one.
	set("new-owner-first/receiver-check", want{experiments.CallAccepted, experiments.CallRejected, "B", "A", 2, false})
	set("owner-done-first/receiver-check", want{experiments.CallAccepted, experiments.CallRejected, "B", "A", 2, false})
	// The worker's own clock: B takes a lease that is still live.
	set("clock-skew/db-clock", want{experiments.CallAcceptedThenSuperseded, experiments.CallRejected, "B", "B", 2, false})
	return m
}

var guardNames = func() []string {
	var out []string
	for _, g := range playground.AllGuards() {
		out = append(out, g.String())
	}
	return out
}()

// extraMatrix covers same identity, the queue-style presets and the
// deliveries, in the article's two orderings and the one where the new
// owner is done first.
func extraMatrix() map[string]matrixCell {
	m := map[string]matrixCell{}
	add := func(o, key string, w want, args ...string) {
		m[o+"/"+key] = matrixCell{append([]string{"--ordering", o}, args...), w}
	}
	for o, c := range map[string]want{"new-owner-first": correctNOF, "zombie-first": correctZF, "owner-done-first": correctODF} {
		add(o, "same-identity", c, "--same-identity")
	}
	add("new-owner-first", "epoch-check+same-identity", want{experiments.CallRejected, experiments.CallAccepted, "A", "B", 2, false}, "--break", "epoch-check", "--same-identity")
	add("zombie-first", "epoch-check+same-identity", want{experiments.CallAcceptedThenSuperseded, experiments.CallAccepted, "A", "B", 2, false}, "--break", "epoch-check", "--same-identity")
	add("owner-done-first", "epoch-check+same-identity", correctODF, "--break", "epoch-check", "--same-identity")
	add("new-owner-first", "style=leases-alone", want{experiments.CallAccepted, experiments.CallAccepted, "B", "A", 2, false}, "--style", "leases-alone")
	add("zombie-first", "style=leases-alone", want{experiments.CallAcceptedThenSuperseded, experiments.CallAccepted, "B", "B", 2, false}, "--style", "leases-alone")
	add("owner-done-first", "style=leases-alone", want{experiments.CallAccepted, experiments.CallAccepted, "A", "A", 2, false}, "--style", "leases-alone")
	add("new-owner-first", "style=state-only", want{experiments.CallAccepted, experiments.CallAccepted, "A", "A", 2, false}, "--style", "state-only")
	add("zombie-first", "style=state-only", want{experiments.CallAcceptedThenSuperseded, experiments.CallAccepted, "A", "B", 2, false}, "--style", "state-only")
	add("owner-done-first", "style=state-only", want{experiments.CallAccepted, experiments.CallRejected, "B", "A", 2, false}, "--style", "state-only")
	add("new-owner-first", "style=id-only", want{experiments.CallAccepted, experiments.CallAccepted, "B", "A", 2, false}, "--style", "id-only")
	add("zombie-first", "style=id-only", want{experiments.CallAcceptedThenSuperseded, experiments.CallAccepted, "B", "B", 2, false}, "--style", "id-only")
	add("owner-done-first", "style=id-only", want{experiments.CallAccepted, experiments.CallAccepted, "A", "A", 2, false}, "--style", "id-only")
	add("new-owner-first", "style=token", want{experiments.CallAccepted, experiments.CallRejected, "B", "A", 2, false}, "--style", "token")
	add("zombie-first", "style=token", correctZF, "--style", "token")
	add("owner-done-first", "style=token", want{experiments.CallAccepted, experiments.CallRejected, "B", "A", 2, false}, "--style", "token")
	add("new-owner-first", "delivery=keyed", want{experiments.CallSkipped, experiments.CallRejected, "B", "B", 2, true}, "--delivery", "keyed")
	add("zombie-first", "delivery=keyed", want{experiments.CallAccepted, experiments.CallRejected, "B", "A", 2, false}, "--delivery", "keyed")
	add("owner-done-first", "delivery=keyed", want{experiments.CallSkipped, experiments.CallRejected, "B", "B", 2, true}, "--delivery", "keyed")
	for _, o := range []string{"new-owner-first", "zombie-first", "owner-done-first"} {
		add(o, "delivery=outbox", want{experiments.CallNeverSent, experiments.CallRejected, "B", "B", 2, true}, "--delivery", "outbox")
	}
	return m
}

// runMatrix runs every cell for real, several at a time (the runs mostly
// wait for leases), and checks each in its own subtest.
func runMatrix(t *testing.T, cells map[string]matrixCell) {
	type result struct {
		o   protocol.Outcome
		err error
	}
	results := map[string]result{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 6)
	for key, c := range cells {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			o, err := runJSON(t, c.args...)
			mu.Lock()
			results[key] = result{o, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for key, c := range cells {
		t.Run(key, func(t *testing.T) {
			r := results[key]
			if r.err != nil {
				t.Fatal(r.err)
			}
			check(t, r.o, c.want)
		})
	}
}

// TestRun_GuardMatrix breaks each guard in turn, in each ordering, and
// checks what happens — the table in the README.
func TestRun_GuardMatrix(t *testing.T) {
	t.Parallel()
	runMatrix(t, guardMatrix())
}

// TestRun_SameIdentityAndQueueStyles shows that with distinct names the
// owner check hides a missing epoch check, and with the same name it does
// not; and how the well-known queues' guards fare.
func TestRun_SameIdentityAndQueueStyles(t *testing.T) {
	t.Parallel()
	runMatrix(t, extraMatrix())
}

// TestREADME_GuardTable keeps the README's table honest: it must be the
// table the matrix test checks.
func TestREADME_GuardTable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	table := renderGuardTable(guardMatrix())
	if !bytes.Contains(readme, []byte(table)) {
		t.Errorf("README.md does not contain the guard table the tests check; put this in it:\n\n%s", table)
	}
	extra := renderExtraTable(extraMatrix())
	if !bytes.Contains(readme, []byte(extra)) {
		t.Errorf("README.md does not contain the identity and style table the tests check; put this in it:\n\n%s", extra)
	}
}

// extraRows orders the identity and style table and says what each row is.
var extraRows = []struct{ key, label string }{
	{"same-identity", "same identity, all guards on"},
	{"epoch-check+same-identity", "`epoch-check` off, same identity"},
	{"style=leases-alone", "leases alone (a plain `UPDATE … SET status = 'done'`)"},
	{"style=state-only", "state only (River, pg-boss)"},
	{"style=id-only", "job id only (Oban, graphile-worker)"},
	{"style=token", "attempt or token (Temporal, Hatchet, BullMQ)"},
	{"delivery=keyed", "a third-party receiver that deduplicates on a key"},
	{"delivery=outbox", "an outbox, sent after the commit"},
}

// renderExtraTable renders same identity and the queue styles, for the two
// orderings of the article.
func renderExtraTable(m map[string]matrixCell) string {
	var b strings.Builder
	b.WriteString("| run | new-owner-first | zombie-first | owner-done-first |\n|---|---|---|---|\n")
	for _, r := range extraRows {
		b.WriteString("| " + r.label + " |")
		for _, o := range []string{"new-owner-first", "zombie-first", "owner-done-first"} {
			c, ok := m[o+"/"+r.key]
			if !ok {
				b.WriteString(" — |")
				continue
			}
			b.WriteString(" " + outcomeWords(c.want) + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// outcomeWords says a cell's outcome in the article's terms.
func outcomeWords(w want) string {
	who := map[string]string{"A": "zombie's", "B": "new owner's"}
	v := "safe"
	if !w.safe {
		v = "**UNSAFE**"
	}
	end := fmt.Sprintf("the %s result in the row and at the receiver", who[w.rowFrom])
	if w.rowFrom != w.receiverFrom {
		end = fmt.Sprintf("the %s result in the row, the %s at the receiver", who[w.rowFrom], who[w.receiverFrom])
	}
	return fmt.Sprintf("%s: zombie's call %s, commit %s; %s", v, w.receiverCall.Words(), w.commit.Words(), end)
}

// renderGuardTable renders the matrix as the README's markdown table.
func renderGuardTable(m map[string]matrixCell) string {
	orderings := []string{"new-owner-first", "zombie-first", "owner-done-first", "crash-before-commit", "clock-skew"}
	var b strings.Builder
	b.WriteString("| guard off | " + strings.Join(orderings, " | ") + " |\n")
	b.WriteString("|---|" + strings.Repeat("---|", len(orderings)) + "\n")
	for _, g := range append([]string{"none"}, guardNames...) {
		label := "`" + g + "`"
		if g == "none" {
			label = "(none: the correct build)"
		}
		b.WriteString("| " + label + " |")
		for _, o := range orderings {
			b.WriteString(" " + cellWords(o+"/"+g, m[o+"/"+g].want) + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// unsafeWhy says in a few words what broke in each unsafe cell.
var unsafeWhy = map[string]string{
	"new-owner-first/epoch-increment":     "both claims hold epoch 0, so the receiver takes the zombie's late call as a retry and ends with its result",
	"zombie-first/epoch-increment":        "both claims hold epoch 0: the fencing token cannot tell the owners apart (the end state is right by luck)",
	"crash-before-commit/epoch-increment": "both claims hold epoch 0: the fencing token cannot tell the owners apart (the end state is right by luck)",
	"new-owner-first/receiver-check":      "the receiver accepts the zombie's epoch 1 over epoch 2 and ends with the zombie's result",
	"owner-done-first/epoch-increment":    "both claims hold epoch 0, so the receiver takes the zombie's late call as a retry and ends with its result",
	"owner-done-first/receiver-check":     "the receiver accepts the zombie's epoch 1 over epoch 2 and ends with the zombie's result",
	"clock-skew/db-clock":                 "B's fast clock says A's live lease has run out: B claims while A still holds the job",
}

func cellWords(key string, w want) string {
	if !w.safe {
		return "**UNSAFE**: " + unsafeWhy[key]
	}
	return "safe"
}

func TestRun_HumanOutputIsTheTableRow(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := fencelab(t, nil, "run", "--ordering", "new-owner-first", "--lease", "300ms",
		"--schema", pgtest.Schema(t), "--receiver-schema", pgtest.Schema(t))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"zombie's receiver call", "new-owner-first", "rejected", "epoch 2, the new owner's result in the row and at the receiver", "Safe: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

// TestCLI_BadInput: every bad flag or value is one clear line on stderr and
// exit status 2, and changes nothing.
func TestCLI_BadInput(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"frobnicate"},
		{"run"},
		{"run", "--ordering", "sideways"},
		{"run", "--ordering", "zombie-first", "--break", "seatbelt"},
		{"run", "--ordering", "zombie-first", "--lease", "0s"},
		{"run", "--ordering", "zombie-first", "--lease", "-1s"},
		{"run", "--ordering", "zombie-first", "--lease", "100h"},
		{"run", "--ordering", "zombie-first", "--lease", "soon"},
		{"run", "--ordering", "zombie-first", "--skew", "1s"},
		{"run", "--ordering", "clock-skew", "--skew", "-1s"},
		{"run", "--ordering", "zombie-first", "--schema", "Robert'); DROP TABLE students;--"},
		{"run", "--ordering", "zombie-first", "--schema", "same", "--receiver-schema", "same"},
		{"run", "--ordering", "zombie-first", "--style", "bespoke"},
		{"run", "--ordering", "zombie-first", "extra"},
		{"run", "--nope"},
		{"worker"},
		{"worker", "--receiver", "ftp://x", "--database-url", "postgres://x"},
		{"worker", "--receiver", "http://127.0.0.1:1/d", "--lease", "0s", "--database-url", "postgres://x"},
		{"receiver", "--break", "epoch-check"},
		{"receiver", "--schema", "1bad"},
		{"receiver", "--addr", "not-an-address"},
		{"bench", "--workers", "0"},
		{"bench", "--batch", "50"},
		{"bench", "--fast", "--workers", "0"},
		{"bench", "--fast", "--workers", "100001"},
		{"bench", "--fast", "--batch", "0"},
		{"bench", "--fast", "--batch", "99999999999999999999"},
		{"bench", "--fast", "--jobs", "-1"},
		{"bench", "--fast", "--rounds", "21"},
		{"bench", "--fast", "--schema", "1bad"},
		{"serve", "--pprof", ":6060"},
		{"serve", "--pprof", "0.0.0.0:6060"},
		{"serve", "--pprof", "10.1.2.3:6060"},
		{"serve", "--pprof", "example.com:6060"},
		{"serve", "--pprof", "127.0.0.1"},
		{"serve", "--pprof", "127.0.0.1:99999"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			t.Parallel()
			env := []string{}
			if args[0] == "worker" {
				env = append(env, "DATABASE_URL=")
			}
			stdout, stderr, code := fencelab(t, env, args...)
			if code != 2 {
				t.Errorf("exit %d, want 2\nstdout: %s\nstderr: %s", code, stdout, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != 1 || lines[0] == "" || strings.Contains(stderr, "goroutine") {
				t.Errorf("stderr is not one clear line:\n%s", stderr)
			}
		})
	}
}

// TestBench_FastWorksEveryJob: bench --fast prints the pool's figure beside
// the one-job cycle, pgbench with the one-job statements, and pgbench with
// the simplest one-job and batched fenced cycles, from the same run.
func TestBench_FastWorksEveryJob(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := fencelab(t, []string{"DATABASE_URL=" + pgtest.DSN(t)},
		"bench", "--fast", "--workers", "200", "--batch", "50", "--jobs", "2000", "--rounds", "1", "--schema", "bench_fast_test", "--json")
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var got map[string]float64
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout)
	}
	for _, k := range []string{"fast_jobs_per_s", "one_job_jobs_per_s", "pgbench_jobs_per_s", "batched_jobs_per_s", "fast_over_batched", "simplest_jobs_per_s", "one_job_over_simplest"} {
		if got[k] <= 0 {
			t.Errorf("%s = %v, want > 0 (%s)", k, got[k], stdout)
		}
	}
	if got["jobs"] != 2000 || got["workers"] != 200 || got["batch"] != 50 {
		t.Errorf("settings echoed wrong: %s", stdout)
	}
	if b := got["batched_batch"]; b != 50 && b != 500 {
		t.Errorf("batched_batch = %v, want 50 or 500: %s", b, stdout)
	}
}

func TestCLI_Help(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"worker", "-h"}, {"receiver", "--help"}, {"bench", "--help"}, {"serve", "--help"}} {
		_, stderr, code := fencelab(t, nil, args...)
		if code != 0 || !strings.Contains(stderr, "Usage") {
			t.Errorf("%v: exit %d, stderr:\n%s", args, code, stderr)
		}
	}
}

// TestWorkers_ManyProcessesOverManyJobs runs several worker processes
// against a standalone receiver process until the queue is empty: every job
// ends done, claimed once, and no job's history breaks an invariant.
func TestWorkers_ManyProcessesOverManyJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s := judge.Schemas{Jobs: pgtest.Schema(t), Receiver: pgtest.Schema(t)}
	if err := judge.Setup(ctx, pool, s); err != nil {
		t.Fatal(err)
	}
	q, _ := engine.NewQueue(pool, engine.QueueConfig{Schema: s.Jobs})
	const jobs, workers = 200, 6
	for i := range jobs {
		if _, err := q.Insert(ctx, []byte(fmt.Sprintf(`{"i":%d}`, i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	recvCmd := exec.Command(binary(t), "receiver", "--addr", "127.0.0.1:0", "--schema", s.Receiver)
	recvCmd.Env = append(os.Environ(), "DATABASE_URL="+pgtest.DSN(t))
	out, err := recvCmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	recvCmd.Stderr = io.Discard
	if err := recvCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = recvCmd.Process.Signal(syscall.SIGTERM); _ = recvCmd.Wait() })
	line := make([]byte, 256)
	n, _ := out.Read(line)
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(string(line[:n]))
	if url == "" {
		t.Fatalf("receiver did not say where it listens: %q", line[:n])
	}

	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			label := fmt.Sprint("W", i)
			cmd := exec.Command(binary(t), "worker", "--database-url", pgtest.DSN(t), "--schema", s.Jobs,
				"--receiver", url+"/deliveries", "--name", "worker-"+label, "--label", label, "--lease", "10s", "--until-empty")
			var stderr bytes.Buffer
			cmd.Stderr, cmd.Stdout = &stderr, io.Discard
			if err := cmd.Run(); err != nil {
				errs <- fmt.Errorf("worker %s: %v: %s", label, err, stderr.String())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	all, err := q.List(ctx, jobs+1)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := engine.NewReceiver(pool, engine.ReceiverConfig{Schema: s.Receiver})
	workersSeen := map[string]int{}
	for _, j := range all {
		if j.Status != engine.StatusDone || j.Epoch != 1 || j.Attempts != 1 {
			t.Errorf("job %d ends %s at epoch %d after %d attempts; want done, 1, 1", j.ID, j.Status, j.Epoch, j.Attempts)
		}
		h, _ := judge.History(ctx, pool, s.Jobs, j.ID)
		ds, _ := r.Decisions(ctx, j.ID)
		held, err := r.Get(ctx, j.ID)
		if err != nil {
			t.Errorf("job %d never reached the receiver: %v", j.ID, err)
			continue
		}
		if vs := judge.Violations(h, ds, &held); len(vs) > 0 {
			t.Errorf("job %d: %v", j.ID, vs)
		}
		workersSeen[protocol.ResultFrom(j.Result)]++
	}
	if len(all) != jobs {
		t.Fatalf("%d jobs, want %d", len(all), jobs)
	}
	t.Logf("jobs done per worker process: %v", workersSeen)
}

// TestNoLeak_RunKilled kills `fencelab run` — with its own throwaway
// cluster — in the middle of a run while the zombie is frozen, by SIGKILL,
// SIGTERM, SIGHUP and SIGINT, and checks that no worker, postgres or watchdog
// process it started is left.
func TestNoLeak_RunKilled(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			m := marker(t)
			p := start(t, []string{"DATABASE_URL=", m}, "run", "--ordering", "zombie-first", "--lease", "20s", "--events")
			p.waitLine(t, "frozen by SIGSTOP", 60*time.Second)
			if got := marked(t, m); len(got) < 4 {
				t.Fatalf("expected the run, two workers and postgres to be running, found:\n%s", strings.Join(got, "\n"))
			}
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			eventually(t, 20*time.Second, "every process of the run is gone", func() (bool, string) {
				left := marked(t, m)
				return len(left) == 0, strings.Join(left, "\n")
			})
		})
	}
}

// TestReceiverService_HTTP checks the standalone receiver's answers: 200
// for accepted, 409 for a stale epoch, 4xx JSON for bad input.
func TestReceiverService_HTTP(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	cmd := exec.Command(binary(t), "receiver", "--addr", "127.0.0.1:0", "--schema", schema)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+pgtest.DSN(t))
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	buf := make([]byte, 256)
	n, _ := out.Read(buf)
	base := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(string(buf[:n]))
	// The receiver is a service of its own: it makes its schema and nothing else.
	var others int
	if err := pgtest.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1) AND nspname <> $1", schema).Scan(&others); err != nil {
		t.Fatal(err)
	}
	if others != 0 {
		t.Errorf("the standalone receiver made %d schemas besides its own", others)
	}
	post := func(body string, ctype string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, base+"/deliveries", strings.NewReader(body))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	const js = "application/json"
	if code, m := post(`{"job_id":7,"epoch":2,"owner":"worker-b","payload":{"worker":"B"}}`, js); code != 200 || m["decision"] != "accepted-first" {
		t.Fatalf("first delivery: %d %v", code, m)
	}
	if code, m := post(`{"job_id":7,"epoch":2,"owner":"worker-b","payload":{"worker":"B"}}`, js); code != 200 || m["decision"] != "accepted-same" {
		t.Fatalf("retry: %d %v", code, m)
	}
	if code, m := post(`{"job_id":7,"epoch":1,"owner":"worker-a","payload":{"worker":"A"}}`, js); code != 409 || m["decision"] != "refused-stale" || m["held_epoch"] != float64(2) {
		t.Fatalf("stale: %d %v", code, m)
	}
	for _, bad := range []struct{ body, ctype string }{
		{``, js},
		{`{`, js},
		{`[]`, js},
		{`{"job_id":"seven","epoch":1,"owner":"a","payload":{}}`, js},
		{`{"job_id":7,"epoch":1,"owner":"a","payload":{},"extra":1}`, js},
		{`{"job_id":0,"epoch":1,"owner":"a","payload":{}}`, js},
		{`{"job_id":7,"epoch":-3,"owner":"a","payload":{}}`, js},
		{`{"job_id":7,"epoch":3,"owner":"","payload":{}}`, js},
		{`{"job_id":7,"epoch":3,"owner":"a"}`, js},
		{`{"job_id":7,"epoch":3,"owner":"a","payload":{}}{}`, js},
		{`{"job_id":7,"epoch":3,"owner":"a","payload":"` + strings.Repeat("x", engine.MaxPayloadBytes+8<<10) + `"}`, js},
		{`job_id=7`, "application/x-www-form-urlencoded"},
	} {
		code, m := post(bad.body, bad.ctype)
		if code < 400 || code >= 500 || m["error"] == nil || m["error"] == "" {
			t.Errorf("bad body %.60q: %d %v, want a 4xx with an error sentence", bad.body, code, m)
		}
	}
	for _, path := range []string{"/deliveries/abc", "/deliveries/-1", "/decisions/0", "/nowhere"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			t.Errorf("GET %s: %d, want 4xx", path, resp.StatusCode)
		}
	}
	resp, err := http.Get(base + "/deliveries/7")
	if err != nil {
		t.Fatal(err)
	}
	var held engine.Held
	_ = json.NewDecoder(resp.Body).Decode(&held)
	resp.Body.Close()
	if held.Epoch != 2 || held.Accepted != 2 || protocol.ResultFrom(held.Payload) != "B" {
		t.Fatalf("after the bad input the receiver holds %+v; want epoch 2, B, accepted twice", held)
	}
}
