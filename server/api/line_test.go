package api_test

import (
	"context"
	"net/http"
	"strings"
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
