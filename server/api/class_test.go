package api_test

import (
	"encoding/csv"
	"encoding/json"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/class"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/session"
)

type openedClass struct {
	Class struct {
		ID        string `json:"id"`
		Code      string `json:"code"`
		CodeShown string `json:"code_shown"`
	} `json:"class"`
	Code  string `json:"code"`
	Token string `json:"token"`
}

type joinedClass struct {
	Student struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"student"`
	Token   string `json:"token"`
	Session struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	} `json:"session"`
}

// checkStarted is the started event of the session's last check's batch.
func checkStarted(t *testing.T, s *sess) protocol.BatchEvent {
	t.Helper()
	var last *protocol.BatchEvent
	for _, e := range s.events(0, "") {
		if e.Batch != nil && e.Batch.Name == experiments.BatchCheck && e.Batch.Phase == protocol.BatchStarted {
			last = e.Batch
		}
	}
	if last == nil {
		t.Fatal("the session has no check's batch")
	}
	return *last
}

// joinClass joins the class of code as name on the server on, and fails
// the test unless it is let in.
func joinClass(t *testing.T, on *testServer, code, name string) joinedClass {
	t.Helper()
	a := on.do("POST", "/api/classes/join", "", "application/json", joinBody(t, code, name, ""))
	if a.Status != http.StatusCreated {
		t.Fatalf("join as %s: %d %s", name, a.Status, a.Body)
	}
	var j joinedClass
	a.json(t, &j)
	return j
}

func joinBody(t *testing.T, code, name, token string) string {
	t.Helper()
	b, err := json.Marshal(map[string]string{"code": code, "name": name, "token": token})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A class through the API, as a teacher and three students play it: the
// students join by the code as they type it, each with a session of their
// own; two check real solutions, one right and one whose claim keeps the
// epoch; the board shows each row and the class's counts to the teacher
// alone, names hidden on asking; the hand-ins hold what each sent; a
// student who comes back is the same student in the same session; a
// second server on the same database sees the same class; and the end
// takes no more students while the board stays.
func TestClass_ThroughTheAPI(t *testing.T) {
	ts := startServer(t, nil)
	a := ts.do("POST", "/api/classes", "", "", "")
	if a.Status != http.StatusCreated {
		t.Fatalf("open a class: %d %s", a.Status, a.Body)
	}
	var cl openedClass
	a.json(t, &cl)
	if len(cl.Code) != 7 || cl.Code[3] != '-' || cl.Token == "" || cl.Class.ID == "" || cl.Class.CodeShown != cl.Code {
		t.Fatalf("the class %+v", cl)
	}
	join := func(name, token string, want int) joinedClass {
		t.Helper()
		a := ts.do("POST", "/api/classes/join", "", "application/json", joinBody(t, strings.ToLower(cl.Code), name, token))
		if a.Status != want {
			t.Fatalf("join as %q: %d %s, want %d", name, a.Status, a.Body, want)
		}
		var j joinedClass
		a.json(t, &j)
		return j
	}
	ada, bea, cy := join("Ada", "", http.StatusCreated), join("Bea", "", http.StatusCreated), join("Cy", "", http.StatusCreated)
	if ada.Session.ID == bea.Session.ID || ada.Session.Token == "" || ada.Token == "" {
		t.Fatalf("Ada %+v, Bea %+v", ada, bea)
	}
	// Two checks at once: each student's session is theirs to drive.
	noEpoch := sandbox.Ours()
	noEpoch.Claim = strings.Replace(noEpoch.Claim, "       epoch = epoch + 1,\n", "", 1)
	students := map[string]*sess{"Ada": {ts: ts, ID: ada.Session.ID, Token: ada.Session.Token}, "Bea": {ts: ts, ID: bea.Session.ID, Token: bea.Session.Token}}
	sent := map[string]sandbox.Solution{"Ada": sandbox.Ours(), "Bea": noEpoch}
	var wg sync.WaitGroup
	for name, s := range students {
		wg.Go(func() {
			s.cmd(checkCmd(t, sent[name]))
			s.checkReport(3 * time.Minute)
		})
	}
	wg.Wait()
	// Each student's session knows its seat, and each check counts on the
	// class's board (its started batch says which).
	for name, s := range students {
		if seat := s.snapshot().Class; seat == nil || seat.Code != cl.Code || seat.Student != name || seat.Ended {
			t.Errorf("%s's session has the seat %+v, want %s in %s", name, seat, name, cl.Code)
		}
		if b := checkStarted(t, s); b.Board != cl.Code {
			t.Errorf("%s's check counts on the board %q, want %q", name, b.Board, cl.Code)
		}
	}

	board := func(srv *testServer, query, token string) (class.Board, answer) {
		a := srv.do("GET", "/api/classes/"+cl.Class.ID+"/board"+query, token, "", "")
		var b class.Board
		if a.Status == http.StatusOK {
			a.json(t, &b)
		}
		return b, a
	}
	// The check's report is kept just after its event: wait for it.
	var b class.Board
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var a answer
		if b, a = board(ts, "", cl.Token); a.Status != http.StatusOK {
			t.Fatalf("the board: %d %s", a.Status, a.Body)
		}
		if b.Summary.Checked == 2 || time.Now().After(deadline) {
			break
		}
	}
	if len(b.Students) != 3 || b.Summary.Students != 3 || b.Summary.Checked != 2 || b.Summary.Passing != 1 {
		t.Fatalf("the board's counts: %+v", b.Summary)
	}
	rows := map[string]class.Row{}
	for _, r := range b.Students {
		rows[r.Name] = r
	}
	if r := rows["Ada"]; r.Pass == nil || !*r.Pass || len(r.Cases) != len(experiments.CheckCases())+len(experiments.ProbeCases()) || r.Requirement != "" || r.FirstPassed == nil || r.Since != nil {
		t.Errorf("Ada's row: %+v", r)
	}
	if r := rows["Bea"]; r.Pass == nil || *r.Pass || r.Requirement != experiments.ReqEpochRaised || r.Cases[0].Run == "" || r.Since == nil || !r.Since.Equal(*r.Checked) || r.FirstPassed != nil {
		t.Errorf("Bea's row: %+v", r)
	}
	if r := rows["Cy"]; r.Checked != nil || r.Checks != 0 {
		t.Errorf("Cy's row: %+v", r)
	}
	if reqs := b.Summary.Requirements; len(reqs) == 0 || reqs[0].Requirement != experiments.ReqEpochRaised || reqs[0].Students != 1 || !strings.HasPrefix(reqs[0].Words, "1 student: ") {
		t.Errorf("the class's requirements: %+v", reqs)
	}
	if anon, _ := board(ts, "?anonymous=1", cl.Token); len(anon.Students) != 3 || anon.Students[0].Name != "Student 1" || !anon.Anonymous {
		t.Errorf("the anonymous board: %+v", anon.Students)
	}
	for _, bad := range []struct {
		query, token string
		want         int
	}{{"", "", http.StatusForbidden}, {"", ada.Token, http.StatusForbidden}, {"", ada.Session.Token, http.StatusForbidden}, {"?anonymous=yes", cl.Token, http.StatusBadRequest}} {
		if _, a := board(ts, bad.query, bad.token); a.Status != bad.want || a.errText() == "" {
			t.Errorf("the board %q with token %.6s…: %d %s, want %d", bad.query, bad.token, a.Status, a.Body, bad.want)
		}
	}
	if a := ts.do("GET", "/api/classes/cnope/board", cl.Token, "", ""); a.Status != http.StatusNotFound {
		t.Errorf("another class's board: %d %s", a.Status, a.Body)
	}

	// The hand-ins.
	a = ts.do("GET", "/api/classes/"+cl.Class.ID+"/handins.json", cl.Token, "", "")
	var hs struct{ HandIns []class.HandIn }
	if a.Status != http.StatusOK || json.Unmarshal(a.Body, &struct {
		HandIns *[]class.HandIn `json:"handins"`
	}{&hs.HandIns}) != nil || len(hs.HandIns) != 3 {
		t.Fatalf("hand-ins: %d %s", a.Status, a.Body)
	}
	for _, h := range hs.HandIns {
		if want, ok := sent[h.Student]; ok != (h.Solution != nil) || (ok && *h.Solution != want) {
			t.Errorf("%s's hand-in holds %+v", h.Student, h.Solution)
		}
	}
	a = ts.do("GET", "/api/classes/"+cl.Class.ID+"/handins.csv", cl.Token, "", "")
	recs, err := csv.NewReader(strings.NewReader(string(a.Body))).ReadAll()
	if a.Status != http.StatusOK || err != nil || len(recs) != 4 || !strings.HasPrefix(a.Header.Get("Content-Type"), "text/csv") {
		t.Errorf("the CSV: %d %v %q", a.Status, err, a.Body)
	}
	// Names hidden, as the board hides them: in both exports, under a name
	// of the file that says so; a flag that is not 1 or 0 is refused.
	for _, kind := range []string{"json", "csv"} {
		a = ts.do("GET", "/api/classes/"+cl.Class.ID+"/handins."+kind+"?anonymous=1", cl.Token, "", "")
		if a.Status != http.StatusOK || !strings.Contains(string(a.Body), "Student 3") || !strings.Contains(a.Header.Get("Content-Disposition"), "-no-names.") {
			t.Errorf("the %s hand-ins with names hidden: %d %s %q", kind, a.Status, a.Header.Get("Content-Disposition"), a.Body)
		}
		for name := range sent {
			if strings.Contains(string(a.Body), name) {
				t.Errorf("the %s hand-ins with names hidden name %s", kind, name)
			}
		}
		if a = ts.do("GET", "/api/classes/"+cl.Class.ID+"/handins."+kind+"?anonymous=yes", cl.Token, "", ""); a.Status != http.StatusBadRequest {
			t.Errorf("?anonymous=yes: %d %s", a.Status, a.Body)
		}
	}

	// Ada comes back: the same student, in the same session.
	if again := join("whatever", ada.Token, http.StatusOK); again.Student.ID != ada.Student.ID || again.Session.ID != ada.Session.ID || again.Session.Token != ada.Session.Token {
		t.Errorf("Ada again: %+v, want %+v", again, ada)
	}
	// A second server on the same database: the class and its board.
	other := startServer(t, nil)
	if ob, a := board(other, "", cl.Token); a.Status != http.StatusOK || ob.Summary.Passing != 1 || len(ob.Students) != 3 {
		t.Errorf("the board on another server: %d %+v", a.Status, ob.Summary)
	}

	// The teacher leads: one run, the same setup, in every student's
	// session; only a run command, only by the teacher.
	runPath := "/api/classes/" + cl.Class.ID + "/run"
	a = ts.do("POST", runPath, cl.Token, "application/json", `{"action":"run","ordering":"zombie-first","mode":"step","lease_ms":300}`)
	var sr struct {
		Started  int `json:"started"`
		Students []struct {
			ID, Name, Run, Error string
		} `json:"students"`
	}
	a.json(t, &sr)
	if a.Status != http.StatusOK || sr.Started != 3 || len(sr.Students) != 3 {
		t.Fatalf("a run sent to the class: %d %s", a.Status, a.Body)
	}
	for _, st := range sr.Students {
		var sess string
		for _, j := range []joinedClass{ada, bea, cy} {
			if j.Student.ID == st.ID {
				sess = j.Session.ID
			}
		}
		snap := (&sess2{ts, sess}).snapshot(t)
		if snap.Run == nil || snap.Run.ID != st.Run || snap.Run.Ordering != experiments.ZombieFirst || snap.Run.Mode != "step" {
			t.Errorf("%s's session after the class's run: %+v, want run %s, zombie-first, step", st.Name, snap.Run, st.Run)
		}
	}
	for _, bad := range []struct {
		token, body string
		want        int
	}{
		{cl.Token, `{"action":"step"}`, http.StatusBadRequest},
		{cl.Token, `{"action":"run","ordering":"nowhere"}`, http.StatusBadRequest},
		{ada.Token, `{"action":"run","ordering":"zombie-first"}`, http.StatusForbidden},
		{"", `{"action":"run","ordering":"zombie-first"}`, http.StatusForbidden},
	} {
		if a := ts.do("POST", runPath, bad.token, "application/json", bad.body); a.Status != bad.want {
			t.Errorf("a run sent to the class %s: %d %s, want %d", bad.body, a.Status, a.Body, bad.want)
		}
	}

	// Bad input changes nothing.
	for _, body := range []string{
		`{"code":"` + cl.Code + `","name":"Dee","extra":1}`,
		`{"code":"` + cl.Code + `","name":"D\u0000ee"}`,
		`{"code":"` + cl.Code + `","name":"D\ud800ee"}`,
		`{"code":"` + cl.Code + `","name":"` + strings.Repeat("D", 41) + `"}`,
		`{"code":"O0O-000","name":"Dee"}`,
		`{"code":"` + cl.Code + `","name":""}`,
		`{"code":"` + cl.Code + `","name":"Dee"} {}`,
		`[]`,
	} {
		if a := ts.do("POST", "/api/classes/join", "", "application/json", body); a.Status != http.StatusBadRequest || a.errText() == "" {
			t.Errorf("join %.60q: %d %s, want 400", body, a.Status, a.Body)
		}
	}
	if a := ts.do("POST", "/api/classes/join", "", "application/json", `{"code":"`+cl.Code+`","name":"`+strings.Repeat("D", 5000)+`"}`); a.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("a join of 5 KB: %d %s, want 413", a.Status, a.Body)
	}
	// Six joins as one name at once: one student.
	codes := map[int]int{}
	var mu sync.Mutex
	for range 6 {
		wg.Go(func() {
			a := ts.do("POST", "/api/classes/join", "", "application/json", joinBody(t, cl.Code, "Eve", ""))
			mu.Lock()
			codes[a.Status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[http.StatusCreated] != 1 || codes[http.StatusConflict] != 5 {
		t.Errorf("six joins as Eve at once: %v", codes)
	}
	if after, _ := board(ts, "", cl.Token); len(after.Students) != 4 {
		t.Errorf("after the bad joins the class has %d students, want 4 (Ada, Bea, Cy, Eve)", len(after.Students))
	}

	// The end.
	if a := ts.do("DELETE", "/api/classes/"+cl.Class.ID, ada.Token, "", ""); a.Status != http.StatusForbidden {
		t.Errorf("a student ends the class: %d", a.Status)
	}
	if a := ts.do("DELETE", "/api/classes/"+cl.Class.ID, cl.Token, "", ""); a.Status != http.StatusOK {
		t.Fatalf("the end: %d %s", a.Status, a.Body)
	}
	if a := ts.do("POST", "/api/classes/join", "", "application/json", joinBody(t, cl.Code, "Fay", "")); a.Status != http.StatusNotFound {
		t.Errorf("a join after the end: %d %s", a.Status, a.Body)
	}
	// Every student's page is told, once, and a check after the end counts
	// on no board: it waits in the server's own line and says so.
	for name, s := range students {
		if seat := s.snapshot().Class; seat == nil || !seat.Ended {
			t.Errorf("after the end %s's seat is %+v", name, seat)
		}
		n := 0
		for _, e := range s.events(0, "") {
			if e.Note != nil && e.Note.Code == protocol.NoteClassEnded {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s's session was told %d times that the class ended, want once", name, n)
		}
	}
	after := students["Ada"]
	after.cmd(checkCmd(t, sandbox.Ours()))
	if rep := after.checkReport(3 * time.Minute); !rep.Pass {
		t.Errorf("Ada's check after the end: %+v", rep)
	}
	if b := checkStarted(t, after); b.Board != "" {
		t.Errorf("a check after the end counts on the board %q", b.Board)
	}
	if ended, a := board(ts, "", cl.Token); a.Status != http.StatusOK || ended.Class.Ended == nil {
		t.Errorf("the board after the end: %d %+v", a.Status, ended.Class)
	}
	if a := ts.do("POST", runPath, cl.Token, "application/json", `{"action":"run","ordering":"zombie-first"}`); a.Status != http.StatusConflict {
		t.Errorf("a run sent to an ended class: %d %s", a.Status, a.Body)
	}
	_ = cy
}

// TestClass_StudentsBehindOneAddressAreNotOneReader: a class behind one
// NAT address is many readers. Two students join from one address; while
// the first's check plays, the second's is not held in the address's line
// (its statements that do not prepare are refused at once), where two
// readers' sessions from that address would wait one behind the other
// (TestFairness_ChecksFromOneAddressWaitInLineOneAtATime).
func TestClass_StudentsBehindOneAddressAreNotOneReader(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *api.Config) {
		c.TrustProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	const addr = "203.0.113.8"
	a := ts.from(addr, "POST", "/api/classes", "", "")
	var cl openedClass
	a.json(t, &cl)
	join := func(name string) *sess {
		a := ts.from(addr, "POST", "/api/classes/join", "", joinBody(t, cl.Code, name, ""))
		if a.Status != http.StatusCreated {
			t.Fatalf("join: %d %s", a.Status, a.Body)
		}
		var j joinedClass
		a.json(t, &j)
		return &sess{ts: ts, ID: j.Session.ID, Token: j.Session.Token}
	}
	first, second := join("Ada"), join("Bea")
	path := func(s *sess) string { return "/api/sessions/" + s.ID + "/commands" }
	long := `{"action":"check","lease_ms":5000,"solution":` + mustJSON(t, sandbox.Ours()) + `}`
	if a := ts.from(addr, "POST", path(first), first.Token, long); a.Status != http.StatusOK {
		t.Fatalf("the first student's check: %d %s", a.Status, a.Body)
	}
	broken := sandbox.Ours()
	broken.Claim = "UPDATE jobs SET owner = :owner WHERE"
	answered := make(chan answer, 1)
	go func() {
		answered <- ts.from(addr, "POST", path(second), second.Token, `{"action":"check","solution":`+mustJSON(t, broken)+`}`)
	}()
	select {
	case a := <-answered:
		if a.Status != http.StatusBadRequest {
			t.Errorf("the second student's check: %d %s, want its statements refused (400)", a.Status, a.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second student's check waited behind the first's: a class behind one address is one reader")
	}
	first.cmd(`{"action":"reset"}`)
}

// sess2 reads a session's snapshot by its id alone, as a watcher.
type sess2 struct {
	ts *testServer
	id string
}

func (s *sess2) snapshot(t *testing.T) session.Snapshot {
	t.Helper()
	a := s.ts.do("GET", "/api/sessions/"+s.id, "", "", "")
	var snap session.Snapshot
	a.json(t, &snap)
	return snap
}

// TestClass_EndedElsewhereReachesThePages: a class ended through another
// instance reaches its students' pages on this one. Ada checks right
// after the end, before any sweep: her check finds the class ended, her
// page is told once, and the check plays as her own, on no board and not
// kept. Bea, on a server that sweeps every second, sends nothing: the
// sweep tells her page.
func TestClass_EndedElsewhereReachesThePages(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	fast := startServer(t, func(c *api.Config) { c.Limits.RunIdle = 4 * time.Second }) // sweeps every second
	other := startServer(t, nil)
	a := ts.do("POST", "/api/classes", "", "", "")
	var cl openedClass
	a.json(t, &cl)
	join := func(on *testServer, name string) *sess {
		j := joinClass(t, on, cl.Code, name)
		return &sess{ts: on, ID: j.Session.ID, Token: j.Session.Token}
	}
	ada, bea := join(ts, "Ada"), join(fast, "Bea")
	if a := other.do("DELETE", "/api/classes/"+cl.Class.ID, cl.Token, "", ""); a.Status != http.StatusOK {
		t.Fatalf("the end, on another server: %d %s", a.Status, a.Body)
	}
	told := func(s *sess) int {
		n := 0
		for _, e := range s.events(0, "") {
			if e.Note != nil && e.Note.Code == protocol.NoteClassEnded {
				n++
			}
		}
		return n
	}

	ada.cmd(checkCmd(t, sandbox.Ours()))
	if rep := ada.checkReport(3 * time.Minute); !rep.Pass {
		t.Errorf("Ada's check after the end: %+v", rep)
	}
	if b := checkStarted(t, ada); b.Board != "" {
		t.Errorf("Ada's check after the end counts on the board %q", b.Board)
	}
	if n := told(ada); n != 1 {
		t.Errorf("Ada's page was told %d times that the class ended, want once", n)
	}
	if seat := ada.snapshot().Class; seat == nil || !seat.Ended {
		t.Errorf("Ada's seat after her check: %+v", seat)
	}
	a = other.do("GET", "/api/classes/"+cl.Class.ID+"/board", cl.Token, "", "")
	var b class.Board
	if a.json(t, &b); a.Status != http.StatusOK || len(b.Students) != 2 || b.Students[0].Checks != 0 {
		t.Errorf("the board after Ada's check: %d %+v", a.Status, b.Students)
	}

	bea.waitEvent(10*time.Second, "the note that the class ended", func(e protocol.Event) bool {
		return e.Note != nil && e.Note.Code == protocol.NoteClassEnded
	})
	if seat := bea.snapshot().Class; seat == nil || !seat.Ended {
		t.Errorf("Bea's seat after the sweep: %+v", seat)
	}
	time.Sleep(2500 * time.Millisecond) // two more sweeps: told once
	if n := told(bea); n != 1 {
		t.Errorf("Bea's page was told %d times that the class ended, want once", n)
	}
}
