package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/servertest"
)

// checkArgs is `fencelab check` on the four files of dir.
func checkArgs(dir string, more ...string) []string {
	args := []string{"check"}
	for _, k := range []string{"claim", "complete", "fail", "receiver"} {
		args = append(args, "--"+k, filepath.Join(dir, k+".sql"))
	}
	return append(args, more...)
}

// The terminal's Check it: the leases-alone start fails (exit 1) with
// the article's table and the broken requirements; ours passes (exit 0);
// --json is one object with pass, cases and broken; a claim that keeps
// the epoch is named; bad input is exit 2 and says which file and where.
func TestCheckCmd_TablesAndExitCodes(t *testing.T) {
	tmp := t.TempDir()
	start, ours := filepath.Join(tmp, "start"), filepath.Join(tmp, "ours")
	for flag, dir := range map[string]string{"--write-start": start, "--write-ours": ours} {
		if _, stderr, code := fencelab(t, nil, "check", flag, dir); code != 0 {
			t.Fatalf("check %s: exit %d %s", flag, code, stderr)
		}
	}
	if _, stderr, code := fencelab(t, nil, "check", "--write-ours", ours); code != 2 || !strings.Contains(stderr, "exists already") {
		t.Fatalf("writing over a solution: exit %d %s", code, stderr)
	}

	stdout, stderr, code := fencelab(t, nil, checkArgs(start)...)
	if code != 1 || !strings.Contains(stdout, "zombie's commit") || !strings.Contains(stdout, "your claim does not raise the epoch") {
		t.Fatalf("the start: exit %d\n%s\n%s", code, stdout, stderr)
	}
	stdout, stderr, code = fencelab(t, nil, checkArgs(ours, "--json")...)
	var rep struct {
		Pass  bool `json:"pass"`
		Cases []struct {
			Case string `json:"case"`
			OK   bool   `json:"ok"`
		} `json:"cases"`
		Broken []struct {
			Requirement string `json:"requirement"`
		} `json:"broken"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != 0 || !rep.Pass || len(rep.Cases) != len(experiments.CheckCases()) || rep.Broken == nil {
		t.Fatalf("ours --json: exit %d %v\n%s\n%s", code, err, stdout, stderr)
	}

	claim := filepath.Join(ours, "claim.sql")
	b, _ := os.ReadFile(claim)
	if err := os.WriteFile(claim, []byte(strings.Replace(string(b), "epoch = epoch + 1,", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _, code = fencelab(t, nil, checkArgs(ours, "--json")...)
	if code != 1 || !strings.Contains(stdout, `"requirement": "epoch-raised"`) {
		t.Fatalf("a claim that keeps the epoch: exit %d\n%s", code, stdout)
	}

	if err := os.WriteFile(claim, []byte("UPDATE jobs\n   SET owner = :owner\n WHERE"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = fencelab(t, nil, checkArgs(ours)...)
	if code != 2 || !strings.Contains(stderr, claim+":3:") {
		t.Fatalf("a claim that does not prepare: exit %d %s", code, stderr)
	}
	_, stderr, code = fencelab(t, nil, checkArgs(filepath.Join(tmp, "nowhere"))...)
	if code != 2 || !strings.Contains(stderr, "cannot read") {
		t.Fatalf("a missing file: exit %d %s", code, stderr)
	}
	_, stderr, code = fencelab(t, nil, "check", "--claim", claim)
	if code != 2 || !strings.Contains(stderr, "--complete, --fail, --receiver are required") {
		t.Fatalf("three files missing: exit %d %s", code, stderr)
	}
}

// --worker: a reader's own worker program, here the Python reference
// workers, played as A and B from outside; the correct one passes (exit
// 0), the one without the epoch in its compare-and-set fails the
// same-name and zombie-fails cases (exit 1); --worker with a worker statement is exit 2.
func TestCheckCmd_AWorkerProgram(t *testing.T) {
	py := servertest.Python(t)
	dir, err := filepath.Abs(filepath.Join("..", "internal", "harness", "examples", "python"))
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := fencelab(t, nil, "check", "--worker", py+" "+filepath.Join(dir, "correct.py"))
	if code != 0 || !strings.Contains(stdout, "Your solution passes") {
		t.Fatalf("correct.py: exit %d\n%s\n%s", code, stdout, stderr)
	}
	stdout, stderr, code = fencelab(t, nil, "check", "--json", "--worker", py+" "+filepath.Join(dir, "no_epoch_cas.py"))
	var rep struct {
		Cases []struct {
			Case string `json:"case"`
			OK   bool   `json:"ok"`
		} `json:"cases"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != 1 {
		t.Fatalf("no_epoch_cas.py: exit %d %v\n%s\n%s", code, err, stdout, stderr)
	}
	// One name for both lets the zombie's commit, and its fail, match.
	for _, c := range rep.Cases {
		if c.OK != (c.Case != string(experiments.CaseSameName) && c.Case != string(experiments.CaseZombieFails)) {
			t.Errorf("no_epoch_cas.py: case %s ok=%v", c.Case, c.OK)
		}
	}
	if _, stderr, code := fencelab(t, nil, "check", "--worker", "true", "--claim", "x.sql"); code != 2 || !strings.Contains(stderr, "--claim does not apply") {
		t.Fatalf("--worker with --claim: exit %d %s", code, stderr)
	}
}

// TestNoLeak_CheckWorkerKilled kills `fencelab check --worker` in the
// middle of its first case, by SIGKILL and by SIGTERM, while worker A has
// a child in its group and one that left it (setsid): nothing of the
// check is left, the setsid child included.
func TestNoLeak_CheckWorkerKilled(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			m := marker(t)
			worker := `sleep 300 & setsid sleep 300 </dev/null >/dev/null 2>&1 & echo children started; exec sleep 300`
			p := start(t, []string{"DATABASE_URL=" + pgtest.DSN(t), m}, "check", "--worker", worker)
			p.waitLine(t, "children started", 60*time.Second)
			eventually(t, 10*time.Second, "the worker's three processes are running", func() (bool, string) {
				got := marked(t, m)
				return len(got) >= 4, strings.Join(got, "\n") // fencelab, the reaper, the shell's sleep, two children
			})
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			eventually(t, 20*time.Second, "every process of the check is gone", func() (bool, string) {
				left := marked(t, m)
				return len(left) == 0, strings.Join(left, "\n")
			})
		})
	}
}
