package api_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelab/fencelab/server/api"
	"github.com/fencelab/fencelab/server/class"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgtest"
	"github.com/fencelab/fencelab/server/sandbox"
)

// A class's checks wait in one line in Postgres, a queue on fencelab's own
// engine: one student's check plays on a server that plays one at a time,
// another's waits in line, told its place; the server shuts down in the
// middle of both. A new server on the same database takes the line over:
// when the students come back (a join with their tokens: new sessions),
// each check plays in their new session, its report on their page, and
// each is kept exactly once, the one cut short by the shutdown too.
func TestClassLine_ACheckInLineOutlivesARestartAndCountsOnce(t *testing.T) {
	oneAtATime := func(c *api.Config) { c.Limits.MaxChecks = 1 }
	first := startServer(t, oneAtATime)
	a := first.do("POST", "/api/classes", "", "", "")
	if a.Status != http.StatusCreated {
		t.Fatalf("open a class: %d %s", a.Status, a.Body)
	}
	var cl openedClass
	a.json(t, &cl)
	join := func(ts *testServer, name, token string) (joinedClass, *sess) {
		t.Helper()
		a := ts.do("POST", "/api/classes/join", "", "application/json", joinBody(t, cl.Code, name, token))
		if a.Status != http.StatusCreated && a.Status != http.StatusOK {
			t.Fatalf("join as %q: %d %s", name, a.Status, a.Body)
		}
		var j joinedClass
		a.json(t, &j)
		return j, &sess{ts: ts, ID: j.Session.ID, Token: j.Session.Token}
	}
	ada, adaS := join(first, "Ada", "")
	bea, beaS := join(first, "Bea", "")
	noEpoch := sandbox.Ours()
	noEpoch.Claim = strings.Replace(noEpoch.Claim, "       epoch = epoch + 1,\n", "", 1)

	long := `{"action":"check","lease_ms":5000,"solution":` + mustJSON(t, sandbox.Ours()) + `}`
	if a := adaS.try(long); a.Status != http.StatusOK {
		t.Fatalf("Ada's check: %d %s", a.Status, a.Body)
	}
	beaAnswer := make(chan answer, 1)
	go func() { beaAnswer <- beaS.try(checkCmd(t, noEpoch)) }()
	beaS.waitEvent(20*time.Second, "Bea's check in line", func(e protocol.Event) bool {
		return e.Note != nil && e.Note.Code == protocol.NoteInLine && e.Note.Place == 1
	})
	adaS.waitEvent(20*time.Second, "a case of Ada's check playing", func(e protocol.Event) bool {
		return e.Kind == protocol.KindBatch && e.Batch.Phase == protocol.BatchStarted
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := first.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	<-beaAnswer // the request ended with the server; the check stays in line

	second := startServer(t, oneAtATime)
	_, adaS = join(second, "Ada", ada.Token)
	_, beaS = join(second, "Bea", bea.Token)
	if rep := adaS.checkReport(3 * time.Minute); !rep.Pass {
		t.Errorf("Ada's check after the restart: %+v, want a pass", rep)
	}
	if rep := beaS.checkReport(3 * time.Minute); rep.Pass {
		t.Errorf("Bea's check after the restart passed; her claim does not raise the epoch")
	}

	// Kept once each: the line's completion and the check commit together.
	var b class.Board
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		a := second.do("GET", "/api/classes/"+cl.Class.ID+"/board", cl.Token, "", "")
		if a.Status != http.StatusOK {
			t.Fatalf("the board: %d %s", a.Status, a.Body)
		}
		a.json(t, &b)
		if b.Summary.Checked == 2 {
			break
		}
	}
	time.Sleep(3 * time.Second) // a second keeping, if there were one, would have landed
	second.do("GET", "/api/classes/"+cl.Class.ID+"/board", cl.Token, "", "").json(t, &b)
	for _, r := range b.Students {
		if r.Checks != 1 {
			t.Errorf("%s has %d checks kept, want exactly 1", r.Name, r.Checks)
		}
	}
	if b.Summary.Checked != 2 || b.Summary.Passing != 1 {
		t.Errorf("the board's counts: %+v", b.Summary)
	}
	var left int
	if err := pgtest.Pool(t).QueryRow(context.Background(), `SELECT count(*) FROM fencelab_checkline.jobs
 WHERE payload->>'student' IN ($1, $2) AND status <> 'done'`, ada.Student.ID, bea.Student.ID).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d of the two checks are not done in the line", left)
	}
}

// Two instances on one database serve one class's line: students joined
// on either, all checking at once, each check played in its student's
// session on the instance that holds it, whichever instance claimed it
// first, and each kept exactly once.
func TestClassLine_TwoInstancesServeOneClass(t *testing.T) {
	oneAtATime := func(c *api.Config) { c.Limits.MaxChecks = 1 }
	a, b := startServer(t, oneAtATime), startServer(t, oneAtATime)
	ans := a.do("POST", "/api/classes", "", "", "")
	if ans.Status != http.StatusCreated {
		t.Fatalf("open a class: %d %s", ans.Status, ans.Body)
	}
	var cl openedClass
	ans.json(t, &cl)
	noEpoch := sandbox.Ours()
	noEpoch.Claim = strings.Replace(noEpoch.Claim, "       epoch = epoch + 1,\n", "", 1)
	type student struct {
		name string
		on   *testServer
		sol  sandbox.Solution
		s    *sess
	}
	students := []*student{{"Ada", a, sandbox.Ours(), nil}, {"Bea", a, noEpoch, nil}, {"Cy", b, sandbox.Ours(), nil}, {"Dee", b, noEpoch, nil}}
	for _, st := range students {
		ans := st.on.do("POST", "/api/classes/join", "", "application/json", joinBody(t, cl.Code, st.name, ""))
		if ans.Status != http.StatusCreated {
			t.Fatalf("join %s: %d %s", st.name, ans.Status, ans.Body)
		}
		var j joinedClass
		ans.json(t, &j)
		st.s = &sess{ts: st.on, ID: j.Session.ID, Token: j.Session.Token}
	}
	var wg sync.WaitGroup
	for _, st := range students {
		wg.Go(func() {
			if ans := st.s.try(checkCmd(t, st.sol)); ans.Status != http.StatusOK {
				t.Errorf("%s's check on %s: %d %s", st.name, st.on.base, ans.Status, ans.Body)
				return
			}
			if rep := st.s.checkReport(3 * time.Minute); rep.Pass != (st.sol == sandbox.Ours()) {
				t.Errorf("%s's report: pass %v", st.name, rep.Pass)
			}
		})
	}
	wg.Wait()
	var bd class.Board
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		b.do("GET", "/api/classes/"+cl.Class.ID+"/board", cl.Token, "", "").json(t, &bd)
		if bd.Summary.Checked == 4 {
			break
		}
	}
	for _, r := range bd.Students {
		if r.Checks != 1 {
			t.Errorf("%s has %d checks kept, want 1", r.Name, r.Checks)
		}
	}
	if bd.Summary.Checked != 4 || bd.Summary.Passing != 2 {
		t.Errorf("the board's counts: %+v", bd.Summary)
	}
}
