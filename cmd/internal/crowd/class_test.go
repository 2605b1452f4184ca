package crowd

import (
	"context"
	"log"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/servertest"
)

// TestRunClass_FourStudents: a class of four against a server of its own
// all press Check at once, ours and a wrong solution; each gets exactly
// one report, on the socket and in the log, saying what their solution
// is; the board shows every one; and the server is gone when RunClass
// returns.
func TestRunClass_FourStudents(t *testing.T) {
	t.Parallel()
	m := marker(t)
	logs := &servertest.LogBuffer{}
	cfg := ClassConfig{Students: 4, Server: Server{Executable: servertest.Binary(t), Env: []string{"DATABASE_URL=" + pgtest.DSN(t), m},
		ServeFlags: []string{"--spare-runs=2", "--log-level=warn"}, Log: log.New(logs, "", 0)}}
	r, err := RunClass(context.Background(), cfg)
	if err != nil {
		t.Fatalf("RunClass: %v\nlog: %s", err, logs)
	}
	t.Logf("\n%s\nlog: %s", r.Table(), logs)
	if r.Students != 4 || r.Joined != 4 || r.OK != 4 || r.WrongVerdicts != 0 || r.Duplicates != 0 || r.Missing != 0 || r.Busy != 0 || r.Errors != 0 {
		t.Errorf("students=%d joined=%d ok=%d wrong=%d %v duplicates=%d missing=%d busy=%d errors=%d %v: want 4 ok",
			r.Students, r.Joined, r.OK, r.WrongVerdicts, r.WrongMessages, r.Duplicates, r.Missing, r.Busy, r.Errors, r.ErrorMessages)
	}
	var right, wrong int
	for _, s := range r.Each {
		sol := classSolutions[solutionOfName(t, s.Solution)]
		switch {
		case s.Reports != 1 || s.Logged != 1:
			t.Errorf("%s: %d reports on the socket, %d in the log: want exactly one", s.Name, s.Reports, s.Logged)
		case s.Pass == nil:
			t.Errorf("%s: no report", s.Name)
		case *s.Pass != s.Right:
			t.Errorf("%s checked %s (right %v) and the report's pass is %v", s.Name, s.Solution, s.Right, *s.Pass)
		case !s.Right && s.Requirement != string(sol.want):
			t.Errorf("%s checked %s and the report names %q first, want %q", s.Name, s.Solution, s.Requirement, sol.want)
		}
		if s.Right {
			right++
		} else {
			wrong++
		}
	}
	if right == 0 || wrong == 0 {
		t.Errorf("%d right and %d wrong solutions: want both", right, wrong)
	}
	if r.BoardShown != 4 || r.BoardMissing != 0 || r.BoardWrong != 0 {
		t.Errorf("board shown %d, missing %d, wrong %d: want every report shown as it is", r.BoardShown, r.BoardMissing, r.BoardWrong)
	}
	for what, sp := range map[string]*Spread{"Check to report": r.CheckToReportMS, "board lag": r.BoardLagMS} {
		if sp == nil || sp.P50 < 0 || sp.P95 < sp.P50 || sp.Max < sp.P95 {
			t.Errorf("%s %+v: want 0 <= p50 <= p95 <= max", what, sp)
		}
	}
	if r.CheckToReportMS != nil && r.CheckToReportMS.P50 == 0 {
		t.Error("a check reported in no time")
	}
	gone(t, m, r.ServerPID)
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func solutionOfName(t *testing.T, name string) int {
	for i, s := range classSolutions {
		if s.name == name {
			return i
		}
	}
	t.Fatalf("no solution %q", name)
	return 0
}

// TestClassSolutions: every wrong solution can be made, and differs from
// ours; every third student's is wrong, and nine students check every
// kind.
func TestClassSolutions(t *testing.T) {
	t.Parallel()
	ours := sandbox.Ours()
	for _, s := range classSolutions {
		sol, err := s.solution()
		if err != nil {
			t.Fatal(err)
		}
		if (sol == ours) != s.right() {
			t.Errorf("%s: the same as ours %v, right %v", s.name, sol == ours, s.right())
		}
	}
	seen := map[int]int{}
	for i := range 9 {
		seen[solutionOf(i)]++
		if wrong := !classSolutions[solutionOf(i)].right(); wrong != (i%3 == 2) {
			t.Errorf("student %d: wrong %v", i, wrong)
		}
	}
	if len(seen) != len(classSolutions) {
		t.Errorf("nine students check %d kinds: %v", len(seen), seen)
	}
}

// TestClassReport_Counts: the report's counts from students' outcomes,
// without a server: a report read twice is a duplicate, a pass that is
// not the solution's a wrong verdict, none a missing one; and a student
// counts as ok only when nothing is amiss.
func TestClassReport_Counts(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	sent := time.Now()
	at := sent.Add(time.Second)
	cases := []struct {
		name string
		s    student
		want string
	}{
		{"ok", student{sol: 0, reports: 1, logged: 1, pass: &yes}, "ok"},
		{"wrong named", student{sol: 1, reports: 1, logged: 1, pass: &no, first: classSolutions[1].want}, "ok"},
		{"twice on the socket", student{sol: 0, reports: 2, logged: 1, pass: &yes}, "duplicate"},
		{"twice in the log", student{sol: 0, reports: 1, logged: 2, pass: &yes}, "duplicate"},
		{"a wrong one passes", student{sol: 2, reports: 1, logged: 1, pass: &yes}, "wrong"},
		{"ours fails", student{sol: 0, reports: 1, logged: 1, pass: &no, first: "x"}, "wrong"},
		{"another requirement first", student{sol: 3, reports: 1, logged: 1, pass: &no, first: classSolutions[1].want}, "wrong"},
		{"none", student{sol: 0, missing: true, logged: 0}, "missing"},
		{"busy", student{sol: 0, busy: true, logged: -1}, "busy"},
		{"error", student{sol: 0, err: "join the class: HTTP 409: taken", logged: -1}, "error"},
	}
	for i := range cases {
		c := &cases[i]
		t.Run(c.name, func(t *testing.T) {
			s := &c.s
			s.name, s.sent = c.name, sent
			if s.reports > 0 {
				s.reported = at
			}
			r := newClassReport(&classLoader{base: mustURL("http://127.0.0.1:1")}, []*student{s}, boardPolls{}, nil, time.Second, false)
			if got := r.Each[0].Result; got != c.want {
				t.Errorf("result %q, want %q: %+v", got, c.want, r.Each[0])
			}
			if (r.OK == 1) != (c.want == "ok") || (r.Duplicates == 1) != (c.want == "duplicate") || (r.WrongVerdicts == 1) != (c.want == "wrong") ||
				(r.Missing == 1) != (c.want == "missing") || (r.Busy == 1) != (c.want == "busy") || (r.Errors == 1) != (c.want == "error") {
				t.Errorf("ok %d duplicates %d wrong %d missing %d busy %d errors %d, want %s", r.OK, r.Duplicates, r.WrongVerdicts, r.Missing, r.Busy, r.Errors, c.want)
			}
			if c.want == "wrong" && (len(r.WrongMessages) != 1 || !strings.Contains(r.WrongMessages[0].Message, classSolutions[s.sol].name)) {
				t.Errorf("wrong messages %v: want one naming %q", r.WrongMessages, classSolutions[s.sol].name)
			}
			if table := r.Table(); !strings.Contains(table, "duplicates") || !strings.Contains(table, "wrong verdicts") {
				t.Errorf("the table:\n%s", table)
			}
		})
	}
}

// A class already open is joined by its board's address alone, on --url's
// server; every other address is refused in words that never repeat the
// teacher's key.
func TestBoardOf(t *testing.T) {
	const key = "SECRETKEY0123456789abcdefghij"
	base, _ := url.Parse("http://127.0.0.1:8080")
	id, token, err := boardOf("http://127.0.0.1:8080/classes/cAAAAAAAAAAAAAAAA#token="+key, base)
	if err != nil || id != "cAAAAAAAAAAAAAAAA" || token != key {
		t.Fatalf("a board's address: %q %q %v", id, token, err)
	}
	for _, bad := range []string{
		"",
		"http://127.0.0.1:8080/classes/cAAAAAAAAAAAAAAAA",                          // no key
		"http://127.0.0.1:8080/classes/cAAAAAAAAAAAAAAAA#token=",                   // an empty key
		"http://127.0.0.1:8080/classes/nope#token=" + key,                          // no class's id
		"http://127.0.0.1:8080/s/cAAAAAAAAAAAAAAAA#token=" + key,                   // not a board
		"http://127.0.0.1:9090/classes/cAAAAAAAAAAAAAAAA#token=" + key,             // another server
		"https://127.0.0.1:8080/classes/cAAAAAAAAAAAAAAAA#token=" + key,            // another scheme
		"http://evil.example/classes/cAAAAAAAAAAAAAAAA#token=" + key,               // elsewhere
		"http://127.0.0.1:8080/classes/cAAAAAAAAAAAAAAAA#token=" + key + "%zz\x00", // not an address
	} {
		_, _, err := boardOf(bad, base)
		if fault.CodeOf(err) != fault.Invalid {
			t.Errorf("%q: %v, want invalid", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "SECRETKEY") {
			t.Errorf("the refusal of %q repeats the key: %v", bad, err)
		}
	}
	cfg := ClassConfig{Students: 2, Board: "http://127.0.0.1:8080/classes/cAAAAAAAAAAAAAAAA#token=" + key, Server: Server{Executable: "/bin/true"}}
	if err := cfg.Validate(); fault.CodeOf(err) != fault.Invalid || strings.Contains(err.Error(), "SECRETKEY") {
		t.Errorf("a board with no --url: %v", err)
	}
}
