package main

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
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

	startXML, oursXML := filepath.Join(tmp, "start.xml"), filepath.Join(tmp, "ours.xml")
	reportDir := filepath.Join(tmp, "report", "start")
	stdout, stderr, code := fencelab(t, nil, checkArgs(start, "--junit", startXML, "--report", reportDir)...)
	if code != 1 || !strings.Contains(stdout, "zombie's commit") || !strings.Contains(stdout, "your claim does not raise the epoch") {
		t.Fatalf("the start: exit %d\n%s\n%s", code, stdout, stderr)
	}
	checkReportDir(t, reportDir, stderr)
	// The same result as JUnit: every case a test case, the ones the table
	// shows failing failed, with the words of what they show broken.
	ju := readJUnit(t, startXML)
	all := len(experiments.CheckCases()) + len(experiments.ProbeCases())
	if zf := ju.failed(string(experiments.CaseZombieFirst)); ju.Tests != all || ju.Failures+ju.Errors == 0 || !strings.Contains(zf, "your claim does not raise the epoch") {
		t.Errorf("the start's JUnit: %d tests, %d failures, %d errors, zombie-first %q; want %d tests, zombie-first failed for the epoch", ju.Tests, ju.Failures, ju.Errors, zf, all)
	}
	// Each run fails in the JUnit exactly when the table marks it so.
	wrong := protocol.MarkWords(protocol.MarkNotAsCorrect).Sign + " "
	for _, c := range experiments.CheckCases() {
		if inTable, inJUnit := strings.Contains(stdout, wrong+c.Title()+"\n"), ju.failed(string(c)) != ""; inTable != inJUnit {
			t.Errorf("the start's case %s: failed in the table %v, in the JUnit %v", c, inTable, inJUnit)
		}
	}
	stdout, stderr, code = fencelab(t, nil, checkArgs(ours, "--json", "--junit", oursXML)...)
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
	if ju := readJUnit(t, oursXML); ju.Tests != all || ju.Failures != 0 || ju.Errors != 0 {
		t.Errorf("ours' JUnit: %d tests, %d failures, %d errors; want %d, 0, 0", ju.Tests, ju.Failures, ju.Errors, all)
	}
	// --junit that cannot be written is refused before anything runs, and
	// a check refused as bad input writes no file.
	for _, bad := range []struct{ path, says string }{
		{filepath.Join(tmp, "nowhere", "x.xml"), "cannot write in"},
		{tmp, "not a regular file"},
	} {
		if _, stderr, code := fencelab(t, nil, checkArgs(ours, "--junit", bad.path)...); code != 2 || !strings.Contains(stderr, bad.says) {
			t.Errorf("--junit %s: exit %d %s", bad.path, code, stderr)
		}
	}
	if _, stderr, code := fencelab(t, nil, "check", "--write-ours", filepath.Join(tmp, "x"), "--junit", oursXML); code != 2 || !strings.Contains(stderr, "does not go with") {
		t.Errorf("--junit with --write-ours: exit %d %s", code, stderr)
	}
	// --report where no folder can be made, or with --worker: refused
	// before anything runs.
	for _, bad := range []struct {
		args []string
		says string
	}{
		{checkArgs(ours, "--report", filepath.Join(oursXML, "x")), "--report: cannot make"},
		{[]string{"check", "--worker", "true", "--report", filepath.Join(tmp, "w")}, "not --worker"},
		{[]string{"check", "--write-ours", filepath.Join(tmp, "y"), "--report", filepath.Join(tmp, "w")}, "does not go with"},
	} {
		if _, stderr, code := fencelab(t, nil, bad.args...); code != 2 || !strings.Contains(stderr, bad.says) {
			t.Errorf("%v: exit %d %s", bad.args, code, stderr)
		}
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
	refusedXML := filepath.Join(tmp, "refused.xml")
	_, stderr, code = fencelab(t, nil, checkArgs(ours, "--junit", refusedXML)...)
	if code != 2 || !strings.Contains(stderr, claim+":3:") {
		t.Fatalf("a claim that does not prepare: exit %d %s", code, stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "*refused.xml*")); len(left) != 0 {
		t.Errorf("a check refused as bad input left %v", left)
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
// same-identity and zombie-fails cases (exit 1); --worker with a worker statement is exit 2.
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
	xmlPath := filepath.Join(t.TempDir(), "no_epoch_cas.xml")
	stdout, stderr, code = fencelab(t, nil, "check", "--json", "--junit", xmlPath, "--worker", py+" "+filepath.Join(dir, "no_epoch_cas.py"))
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
		if c.OK != (c.Case != string(experiments.CaseSameIdentity) && c.Case != string(experiments.CaseZombieFails)) {
			t.Errorf("no_epoch_cas.py: case %s ok=%v", c.Case, c.OK)
		}
	}
	// Its JUnit: the runs and the four probes of a program's statements
	// (ours is the receiver, so its probe is not played); the two cases
	// failed, the rest passed.
	ju := readJUnit(t, xmlPath)
	if want := len(experiments.CheckCases()) + len(experiments.ProbeCases()) - 1; ju.Tests != want || ju.Failures != 2 || ju.Errors != 0 ||
		ju.failed(string(experiments.CaseSameIdentity)) == "" || ju.failed(string(experiments.CaseZombieFails)) == "" {
		t.Errorf("no_epoch_cas.py's JUnit: %d tests, %d failures, %d errors: %+v; want %d tests, same-identity and zombie-fails failed", ju.Tests, ju.Failures, ju.Errors, ju.Cases, want)
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

// junitReport is what a test reads back of `check --junit`.
type junitReport struct {
	Tests    int `xml:"tests,attr"`
	Failures int `xml:"failures,attr"`
	Errors   int `xml:"errors,attr"`
	Cases    []struct {
		Name    string `xml:"name,attr"`
		Failure *struct {
			Message string `xml:"message,attr"`
		} `xml:"failure"`
		Error *struct {
			Message string `xml:"message,attr"`
		} `xml:"error"`
	} `xml:"testsuite>testcase"`
}

func readJUnit(t *testing.T, path string) junitReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r junitReport
	if err := xml.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s is not JUnit XML: %v\n%s", path, err, b)
	}
	return r
}

// failed is the message of the named case's failure or error, or "".
func (r junitReport) failed(name string) string {
	for _, c := range r.Cases {
		switch {
		case c.Name != name:
		case c.Failure != nil:
			return c.Failure.Message
		case c.Error != nil:
			return c.Error.Message
		}
	}
	return ""
}

// checkReportDir holds a --report folder of the leases-alone start to
// what it promises: an index that lists every case, the failing first,
// each linking its run's page; each page a whole replay of that run, on
// its own (no address to fetch), with no secret of the check's in it.
func checkReportDir(t *testing.T, dir, stderr string) {
	t.Helper()
	index := filepath.Join(dir, "index.html")
	if !strings.Contains(stderr, index) {
		t.Errorf("the check does not say where its report is: %s", stderr)
	}
	b, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	oks := regexp.MustCompile(`<li data-ok="(true|false)"><span[^>]*>[^<]*</span> <strong>([^<]+)</strong>(?: · <a href="([^"]+)">)?`).FindAllStringSubmatch(html, -1)
	if len(oks) != len(experiments.CheckCases()) {
		t.Fatalf("the index lists %d cases, want %d:\n%s", len(oks), len(experiments.CheckCases()), html)
	}
	failing := 0
	for i, m := range oks {
		if m[1] == "false" {
			if failing != i {
				t.Errorf("the index lists %q, a failing case, after a passing one", m[2])
			}
			failing++
		}
		if m[3] == "" {
			t.Errorf("the case %q links no run", m[2])
			continue
		}
		page, err := os.ReadFile(filepath.Join(dir, m[3]))
		if err != nil {
			t.Errorf("the case %q: %v", m[2], err)
			continue
		}
		p := string(page)
		if !strings.Contains(p, "<script") || !strings.Contains(p, `"events":[`) || strings.Contains(p, `src="http`) || strings.Contains(p, `href="http`) {
			t.Errorf("the case %q's page is not a whole replay on its own (%d bytes)", m[2], len(p))
		}
		if strings.Contains(p, pgtest.DSN(t)) || strings.Contains(p, "/receiver/") {
			t.Errorf("the case %q's page holds a secret of the check's", m[2])
		}
	}
	if failing == 0 || !strings.Contains(html, "your claim does not raise the epoch") {
		t.Errorf("the start's index shows no failing case, or not what it breaks:\n%s", html)
	}
}
