package class_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/class"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/sandbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func open(t *testing.T, cfg class.Config) *class.Store {
	t.Helper()
	cfg.Pool = pgtest.Pool(t)
	s, err := class.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wantCode(t *testing.T, what string, err error, code fault.Code) {
	t.Helper()
	if fault.CodeOf(err) != code {
		t.Errorf("%s: %v (%s), want %s", what, err, fault.CodeOf(err), code)
	}
}

// A class from its opening to a student's return: the teacher's token
// alone opens it; a student joins by the code however it is typed, and
// the same token is the same student again; a name is the class's once,
// whatever its case; and codes that are not codes are refused.
func TestClass_OpenJoinReturn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, class.Config{})
	c, teacher, err := s.Create(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Code) != 6 || len(teacher) < 40 || c.IdleAfterS != 3*3600 {
		t.Fatalf("class %+v, teacher token %q", c, teacher)
	}
	if got, err := s.AsTeacher(ctx, c.ID, teacher); err != nil || got.Code != c.Code {
		t.Fatalf("the teacher: %+v %v", got, err)
	}
	_, err = s.AsTeacher(ctx, c.ID, teacher+"x")
	wantCode(t, "a wrong teacher token", err, fault.Forbidden)
	_, err = s.AsTeacher(ctx, c.ID, "")
	wantCode(t, "no teacher token", err, fault.Forbidden)
	for _, bad := range []string{"cnope", "c" + strings.Repeat("A", 16), c.ID + "x", "c\x00" + c.ID[2:], "c\xff" + c.ID[2:], strings.Repeat("c", 1024), ""} {
		_, err = s.AsTeacher(ctx, bad, teacher)
		wantCode(t, "class id "+strconvQuote(bad[:min(len(bad), 20)]), err, fault.NotFound)
	}
	if !class.IDForm(c.ID) {
		t.Errorf("a class's own id %q is not of the id's form", c.ID)
	}

	typed := strings.ToLower(class.FormatCode(c.Code)) // "abc-234"
	ada, adaToken, err := s.Join(ctx, typed, "  Ada Lovelace ", "")
	if err != nil || ada.Name != "Ada Lovelace" || ada.Class != c.ID || adaToken == "" {
		t.Fatalf("join as %q: %+v %v", typed, ada, err)
	}
	again, againToken, err := s.Join(ctx, c.Code, "Someone Else", adaToken)
	if err != nil || again.ID != ada.ID || again.Name != "Ada Lovelace" || againToken != adaToken {
		t.Fatalf("a student's return is %+v %v, want Ada again", again, err)
	}
	if st, err := s.AsStudent(ctx, adaToken); err != nil || st.ID != ada.ID {
		t.Fatalf("as a student: %+v %v", st, err)
	}
	_, err = s.AsStudent(ctx, adaToken+"x")
	wantCode(t, "a wrong student token", err, fault.Forbidden)
	_, _, err = s.Join(ctx, c.Code, "ADA LOVELACE", "")
	wantCode(t, "a name taken, in another case", err, fault.Conflict)
	// The same name to the eye: Cyrillic А and а, full-width letters, a
	// digit for a letter. Each is refused; a name that differs is not.
	for _, look := range []string{"\u0410da Lovelace", "Ada Lovel\u0430ce", "\uff21\uff44\uff41 Lovelace", "Ada L0velace"} {
		_, _, err = s.Join(ctx, c.Code, look, "")
		wantCode(t, "a name that reads as one taken ("+strconvQuote(look)+")", err, fault.Conflict)
	}
	if _, _, err := s.Join(ctx, c.Code, "Ada Byron", ""); err != nil {
		t.Errorf("a name that only starts the same: %v", err)
	}
	if _, _, err := s.Join(ctx, c.Code, "Grace", "not a token of anyone's"); err != nil {
		t.Errorf("a join with a stale token and a free name: %v", err)
	}
	// Another class's student joins this one as a new student.
	c2, _, err := s.Create(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := s.Join(ctx, c2.Code, "Ada Lovelace", adaToken)
	if err != nil || other.ID == ada.ID || other.Class != c2.ID {
		t.Errorf("Ada's token in another class: %+v %v, want a new student there", other, err)
	}
	for _, bad := range []string{"", "ABC", "ABCDEFG", "ABC-23O", "ABC-231", "ABC\x00234", "ÄBC234", "ABC 23💥"} {
		_, _, err := s.Join(ctx, bad, "Ada", "")
		wantCode(t, "code "+strconvQuote(bad), err, fault.Invalid)
	}
	_, _, err = s.Join(ctx, "ZZZ-ZZZ", "Ada", "")
	if fault.CodeOf(err) != fault.NotFound && c.Code != "ZZZZZZ" && c2.Code != "ZZZZZZ" {
		t.Errorf("a code no class has: %v", err)
	}
	// State in Postgres: another store on the same database (a restart, or
	// another instance) knows the class and the student.
	s2 := open(t, class.Config{})
	if st, err := s2.AsStudent(ctx, adaToken); err != nil || st.ID != ada.ID {
		t.Errorf("another store: %+v %v", st, err)
	}
}

func strconvQuote(s string) string { return "\"" + strings.ToValidUTF8(s, "?") + "\"" }

// A name is letters, digits, marks, punctuation, symbols and spaces, 1 to
// 40 of them: what is not named is refused.
func TestParseName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"Ada", "José María", "李雷", "O'Neil-Smith", "Zoë (2nd row)", "Ω≈ç√", strings.Repeat("x", class.MaxName)} {
		if _, err := class.ParseName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "   ", strings.Repeat("x", class.MaxName+1), "a\x00b", "a\u202eb", "a\ufffdb", "a\xffb", "a\tb", "a\nb", "a\u200bb"} {
		if _, err := class.ParseName(bad); fault.CodeOf(err) != fault.Invalid {
			t.Errorf("%q: %v, want invalid", bad, err)
		}
	}
}

// Joins at once: a full class takes exactly its limit, and six students
// choosing one name at once leave one of them with it.
func TestClass_JoinsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, class.Config{MaxStudents: 5})
	c, _, err := s.Create(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	count := func(n int, name func(int) string) map[fault.Code]int {
		var mu sync.Mutex
		codes := map[fault.Code]int{}
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, _, err := s.Join(ctx, c.Code, name(i), "")
				mu.Lock()
				codes[fault.CodeOf(err)]++
				mu.Unlock()
			})
		}
		wg.Wait()
		return codes
	}
	if got := count(6, func(int) string { return "Same" }); got[""] != 1 || got[fault.Conflict] != 5 {
		t.Errorf("six joins as one name: %v, want 1 in and 5 conflicts", got)
	}
	if got := count(12, func(i int) string { return "Student " + string(rune('A'+i)) }); got[""] != 4 || got[fault.Limit] != 8 {
		t.Errorf("twelve joins of a class of 5 with 1 in: %v, want 4 in and 8 refused", got)
	}
}

func report(pass bool, broken ...experiments.Requirement) protocol.CheckReport {
	rep := protocol.CheckReport{Pass: pass, Mark: protocol.CaseMark(pass), Broken: []experiments.CheckBroken{}}
	for i, c := range experiments.CheckCases() {
		ok := pass || i != 1
		rep.Cases = append(rep.Cases, protocol.CheckCaseResult{Case: c, Title: c.Title(), OK: ok, Mark: protocol.CaseMark(ok), Run: "r" + string(c)})
	}
	for _, q := range broken {
		rep.Broken = append(rep.Broken, experiments.CheckBroken{Requirement: q, Case: experiments.CaseZombieFirst, Words: "zombie first: " + protocol.RequirementWords(q)})
	}
	return rep
}

// The board: a row per student from their last check (its marks, the
// first requirement it names, when), the class as a whole (how many pass,
// the requirements most named, with their counts), names hidden on
// asking; only a student's session's checks count; and the hand-in holds
// each student's last statements, a spreadsheet's formulas defused.
func TestClass_BoardAndHandIns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, class.Config{})
	c, _, err := s.Create(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	join := func(name, session string) class.Student {
		st, _, err := s.Join(ctx, c.Code, name, "")
		if err != nil {
			t.Fatal(err)
		}
		if session != "" {
			if err := s.SetSession(ctx, st.ID, session); err != nil {
				t.Fatal(err)
			}
		}
		return st
	}
	sess := "s-" + c.ID + "-"
	st1 := join("=HYPERLINK(\"x\")", sess+"1")
	st2 := join("Bea", sess+"2")
	st3 := join("Cy", sess+"3")
	join("Dee", "")
	right := sandbox.Ours()
	wrong := sandbox.Start().With(sandbox.Claim, "-- no epoch\n"+sandbox.Start().Claim)
	record := func(student string, sol sandbox.Solution, rep protocol.CheckReport, want bool) {
		t.Helper()
		if kept, err := s.Record(ctx, student, sol, rep); err != nil || kept != want {
			t.Fatalf("record for %s: %v %v, want kept %v", student, kept, err, want)
		}
	}
	record(st1.ID, wrong, report(false, experiments.ReqEpochRaised), true)
	record(st1.ID, right, report(true), true) // the last check counts
	record(st2.ID, wrong, report(false, experiments.ReqEpochRaised, experiments.ReqCompleteFence), true)
	record(st3.ID, wrong, report(false, experiments.ReqCompleteFence), true)
	record("c-nobody", right, report(true), false)

	b, err := s.Board(ctx, c, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Students) != 4 || b.Summary.Students != 4 || b.Summary.Checked != 3 || b.Summary.Passing != 1 {
		t.Fatalf("board %+v", b)
	}
	first, bea, dee := b.Students[0], b.Students[1], b.Students[3]
	if first.Checks != 2 || first.Session != sess+"1" || first.Pass == nil || !*first.Pass || first.Requirement != "" || len(first.Cases) != len(experiments.CheckCases()) {
		t.Errorf("the first student's row: %+v", first)
	}
	if bea.Name != "Bea" || bea.Pass == nil || *bea.Pass || bea.Requirement != experiments.ReqEpochRaised || bea.Cases[1].Mark != protocol.MarkNotAsCorrect || bea.Cases[0].Mark != protocol.MarkAsCorrect || bea.Cases[1].Run == "" {
		t.Errorf("Bea's row: %+v", bea)
	}
	if dee.Checked != nil || dee.Pass != nil || len(dee.Cases) != 0 || dee.Checks != 0 {
		t.Errorf("Dee has no check: %+v", dee)
	}
	reqs := b.Summary.Requirements
	if len(reqs) != 2 || reqs[0].Requirement != experiments.ReqCompleteFence || reqs[0].Students != 2 || reqs[1].Requirement != experiments.ReqEpochRaised || reqs[1].Students != 1 ||
		reqs[0].Words != "2 students: your complete does not compare the owner and the epoch" {
		t.Errorf("the class's requirements: %+v", reqs)
	}
	anon, err := s.Board(ctx, c, true)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range anon.Students {
		if want := "Student " + string(rune('1'+i)); r.Name != want {
			t.Errorf("anonymous row %d is %q, want %q", i, r.Name, want)
		}
	}

	hs, err := s.HandIns(ctx, c.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 4 || hs[0].Solution == nil || *hs[0].Solution != right || hs[1].Solution == nil || *hs[1].Solution != wrong || hs[3].Solution != nil || hs[1].CasesPassed != len(experiments.CheckCases())-1 {
		t.Fatalf("hand-ins %+v", hs)
	}
	var buf bytes.Buffer
	if err := class.WriteCSV(&buf, hs); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil || len(recs) != 5 {
		t.Fatalf("the CSV: %v %v", recs, err)
	}
	if recs[1][0] != "'=HYPERLINK(\"x\")" || !strings.HasPrefix(recs[2][10], "'-- no epoch") || recs[1][10] != right.Claim || recs[4][3] != "" {
		t.Errorf("CSV rows: %q / %q / %q", recs[1], recs[2][10], recs[4])
	}
}

// The end of a class: an ended class takes no student and no check, and
// its code is free again; its board stays for its teacher until Keep; a
// class idle longer than Idle ends on its own. Not parallel: its sweep
// with a short Idle would end the other tests' classes too (the tables are
// the database's, and the test binary's database is one).
func TestClass_EndIdleAndForget(t *testing.T) {
	ctx := context.Background()
	s := open(t, class.Config{})
	c, teacher, err := s.Create(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	st, token, err := s.Join(ctx, c.Code, "Ada", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetSession(ctx, st.ID, "s-end-"+c.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.End(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Join(ctx, c.Code, "Bea", "")
	wantCode(t, "a join after the end", err, fault.NotFound)
	_, _, err = s.Join(ctx, c.Code, "", token)
	wantCode(t, "a return after the end", err, fault.NotFound)
	_, err = s.AsStudent(ctx, token)
	wantCode(t, "a student of an ended class", err, fault.Forbidden)
	if kept, err := s.Record(ctx, st.ID, sandbox.Ours(), report(true)); err != nil || kept {
		t.Errorf("a check after the end was kept: %v %v", kept, err)
	}
	got, err := s.AsTeacher(ctx, c.ID, teacher)
	if err != nil || got.Ended == nil {
		t.Fatalf("the teacher after the end: %+v %v", got, err)
	}
	if b, err := s.Board(ctx, got, false); err != nil || len(b.Students) != 1 {
		t.Errorf("the board after the end: %+v %v", b, err)
	}

	// Idle: a store whose Idle is short ends a class nobody used.
	quick := open(t, class.Config{Idle: 200 * time.Millisecond, Keep: 200 * time.Millisecond})
	idle, teacher2, err := quick.Create(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if n, err := quick.Sweep(ctx); err != nil || n < 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	if got, err := quick.AsTeacher(ctx, idle.ID, teacher2); err != nil || got.Ended == nil {
		t.Fatalf("an idle class after the sweep: %+v %v", got, err)
	}
	time.Sleep(400 * time.Millisecond)
	if _, err := quick.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = quick.AsTeacher(ctx, idle.ID, teacher2)
	wantCode(t, "a class ended longer than Keep ago", err, fault.NotFound)
}

// Every requirement a check may name has words for the board.
func TestRequirementWords(t *testing.T) {
	for _, q := range experiments.RequirementOrder {
		if w := protocol.RequirementWords(q); w == string(q) || w == "" {
			t.Errorf("requirement %s has no words", q)
		}
	}
}

// Six opens at once from one address with room for three: three open,
// three are refused as busy; ending one makes room for one more.
func TestClass_OpensPerClientAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, class.Config{MaxOpenPerClient: 3})
	client := "203.0.113.7-" + t.Name()
	var mu sync.Mutex
	var opened []class.Class
	codes := map[fault.Code]int{}
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			c, _, err := s.Create(ctx, client)
			mu.Lock()
			defer mu.Unlock()
			codes[fault.CodeOf(err)]++
			if err == nil {
				opened = append(opened, c)
			}
		})
	}
	wg.Wait()
	if codes[""] != 3 || codes[fault.Busy] != 3 {
		t.Fatalf("six opens at once: %v, want 3 open and 3 busy", codes)
	}
	if err := s.End(ctx, opened[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(ctx, client); err != nil {
		t.Errorf("an open after an end: %v", err)
	}
	if _, _, err := s.Create(ctx, "another address"); err != nil {
		t.Errorf("another address: %v", err)
	}
}

// The code's pattern for the join page says what ParseCode takes: the
// same answer for every printable character, six times, with and without
// separators.
func TestCodePatternIsParseCode(t *testing.T) {
	re := regexp.MustCompile(`^(?:` + class.CodePattern() + `)$`)
	for r := rune(0x20); r < 0x7f; r++ {
		for _, s := range []string{strings.Repeat(string(r), 6), "-" + strings.Repeat(string(r), 3) + " - " + strings.Repeat(string(r), 3), strings.Repeat(string(r), 5), strings.Repeat(string(r), 7)} {
			_, err := class.ParseCode(s)
			if re.MatchString(s) != (err == nil) {
				t.Errorf("%q: the pattern says %v, ParseCode %v", s, re.MatchString(s), err)
			}
		}
	}
}

// An instance that starts beside a busy class: stores opened while
// students' checks are kept and students join, as a second instance
// starting on the same database would, neither fail nor make a check
// fail. (Open ran its CREATE ... IF NOT EXISTS and ALTER TABLE every
// time: their table locks, taken even when there was nothing to make,
// deadlocked with a check being kept, 40P01.)
func TestClass_OpensBesideABusyClass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, class.Config{})
	c, students := classOf(t, s, "Ada", "Bea", "Cy", "Dee")
	stop := make(chan struct{})
	var busy sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for i, st := range students {
		busy.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Record(ctx, st.ID, sandbox.Ours(), report(n%2 == 0)); err != nil {
					fail(err)
				}
				if _, _, err := s.Join(ctx, c.Code, "Late "+string(rune('a'+i))+strings.Repeat("x", n%30), ""); err != nil && fault.CodeOf(err) != fault.Conflict && fault.CodeOf(err) != fault.Limit {
					fail(err)
				}
			}
		})
	}
	var opens sync.WaitGroup
	for range 8 {
		opens.Go(func() {
			for range 5 {
				if _, err := class.Open(ctx, class.Config{Pool: pgtest.Pool(t)}); err != nil {
					fail(err)
				}
			}
		})
	}
	opens.Wait()
	close(stop)
	busy.Wait()
	for _, err := range errs {
		t.Error(err)
	}
}

// The board tells the truth at a glance: a check that failed a probe
// alone has that probe's mark in its row beside six cases that passed;
// each student's history is kept, and the board says since when their
// checks have named the same requirement and when they first passed;
// hidden names are hidden in the hand-ins too.
func TestClass_HistoryProbesAndHiddenNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, class.Config{})
	c, _, err := s.Create(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var sts []class.Student
	for _, name := range []string{"Ada", "Bea", "Cy"} {
		st, _, err := s.Join(ctx, c.Code, name, "")
		if err != nil {
			t.Fatal(err)
		}
		sts = append(sts, st)
	}
	record := func(st class.Student, rep protocol.CheckReport) {
		t.Helper()
		if kept, err := s.Record(ctx, st.ID, sandbox.Ours(), rep); err != nil || !kept {
			t.Fatalf("record for %s: %v %v", st.Name, kept, err)
		}
	}
	// Ada: her six cases pass; the receiver's probe alone fails.
	probeOnly := report(true)
	probeOnly.WithProbes(experiments.Probes{Receiver: []bool{true, true, false, false}, Played: experiments.ProbeCases()})
	if probeOnly.Pass {
		t.Fatal("a report whose receiver's probe failed passes")
	}
	record(sts[0], probeOnly)
	// Bea: the epoch, then twice the complete's fence: on the complete
	// since her second check; she has never passed.
	record(sts[1], report(false, experiments.ReqEpochRaised))
	record(sts[1], report(false, experiments.ReqCompleteFence))
	record(sts[1], report(false, experiments.ReqCompleteFence))
	// Cy: fails, passes, fails again: on the complete since his last
	// check, and he first passed at his second.
	record(sts[2], report(false, experiments.ReqCompleteFence))
	record(sts[2], report(true))
	record(sts[2], report(false, experiments.ReqCompleteFence))

	b, err := s.Board(ctx, c, false)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := s.HandIns(ctx, c.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Students) != 3 || len(hs) != 3 {
		t.Fatalf("board %d rows, hand-ins %d", len(b.Students), len(hs))
	}
	if b.Now.IsZero() || b.Now.Before(*b.Students[2].Checked) {
		t.Errorf("the board's now %v is before the last check %v", b.Now, *b.Students[2].Checked)
	}
	ada := b.Students[0]
	marks := map[experiments.CheckCase]protocol.Mark{}
	for _, m := range ada.Cases {
		marks[m.Case] = m.Mark
	}
	if len(ada.Cases) != len(experiments.CheckCases())+len(experiments.ProbeCases()) || marks[experiments.CaseReceiver] != protocol.MarkNotAsCorrect ||
		marks[experiments.CaseNewOwnerFirst] != protocol.MarkAsCorrect || marks[experiments.CaseClaimers] != protocol.MarkAsCorrect {
		t.Errorf("Ada's marks %v: want every case and probe, the receiver alone not as correct", ada.Cases)
	}
	if ada.Pass == nil || *ada.Pass || ada.Requirement != experiments.ReqReceiverSame {
		t.Errorf("Ada's row %+v: want a failing check naming %s", ada, experiments.ReqReceiverSame)
	}
	history := func(h class.HandIn) []string {
		var out []string
		for _, a := range h.History {
			out = append(out, fmt.Sprintf("%v %s", a.Pass, a.Requirement))
		}
		return out
	}
	bea, cy := b.Students[1], b.Students[2]
	if got, want := history(hs[1]), []string{"false epoch-raised", "false complete-fence", "false complete-fence"}; !slices.Equal(got, want) {
		t.Errorf("Bea's history %q, want %q", got, want)
	}
	if bea.Checks != 3 || bea.Since == nil || !bea.Since.Equal(hs[1].History[1].At) || bea.FirstPassed != nil {
		t.Errorf("Bea: %d checks, since %v (want her second check's %v), first passed %v", bea.Checks, bea.Since, hs[1].History[1].At, bea.FirstPassed)
	}
	if cy.Since == nil || !cy.Since.Equal(hs[2].History[2].At) || cy.FirstPassed == nil || !cy.FirstPassed.Equal(hs[2].History[1].At) {
		t.Errorf("Cy: since %v (want %v), first passed %v (want %v)", cy.Since, hs[2].History[2].At, cy.FirstPassed, hs[2].History[1].At)
	}
	if hs[1].Since == nil || !hs[1].Since.Equal(*bea.Since) || hs[2].FirstPassed == nil || !hs[2].FirstPassed.Equal(*cy.FirstPassed) {
		t.Errorf("the hand-ins' since and first passed are not the board's: %v %v", hs[1].Since, hs[2].FirstPassed)
	}

	// Names hidden: in the hand-ins as on the board, "Student N" in the
	// order they joined, and no name anywhere in the CSV.
	anon, err := s.HandIns(ctx, c.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := class.WriteCSV(&buf, anon); err != nil {
		t.Fatal(err)
	}
	for i, h := range anon {
		if want := fmt.Sprintf("Student %d", i+1); h.Student != want {
			t.Errorf("hidden name %d is %q, want %q", i, h.Student, want)
		}
	}
	for _, st := range sts {
		if strings.Contains(buf.String(), st.Name) {
			t.Errorf("the CSV with names hidden names %s:\n%s", st.Name, buf.String())
		}
	}
}
