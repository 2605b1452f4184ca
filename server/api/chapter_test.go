package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// TestClass_SendsAChapter: the teacher opens one chapter of the lesson on
// every student's page. Each student's session log holds the note, once,
// naming the chapter (and the server's tap holds it to the schema); a
// student whose session is gone is told in the answer, not counted; only
// the lesson's chapters are taken, the refusal naming them; only the
// teacher sends one; an ended class takes none.
func TestClass_SendsAChapter(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	a := ts.do("POST", "/api/classes", "", "", "")
	if a.Status != http.StatusCreated {
		t.Fatalf("open a class: %d %s", a.Status, a.Body)
	}
	var cl openedClass
	a.json(t, &cl)
	ada, bea, cy := joinClass(t, ts, cl.Code, "Ada"), joinClass(t, ts, cl.Code, "Bea"), joinClass(t, ts, cl.Code, "Cy")
	if a := ts.do("DELETE", "/api/sessions/"+cy.Session.ID, cy.Session.Token, "", ""); a.Status/100 != 2 {
		t.Fatalf("ending Cy's session: %d %s", a.Status, a.Body)
	}
	path := "/api/classes/" + cl.Class.ID + "/chapter"

	a = ts.do("POST", path, cl.Token, "application/json", `{"chapter":"build-up"}`)
	if a.Status != http.StatusOK {
		t.Fatalf("a chapter sent to the class: %d %s", a.Status, a.Body)
	}
	var sent struct {
		Sent     int
		Students []struct{ ID, Name, Run, Error string }
	}
	a.json(t, &sent)
	if sent.Sent != 2 || len(sent.Students) != 3 {
		t.Fatalf("the class's chapter answered %s", a.Body)
	}
	for _, st := range sent.Students {
		if (st.Error == "") != (st.Name != "Cy") || st.Run != "" {
			t.Errorf("%s: %+v (Ada's and Bea's sessions took it, Cy's is gone)", st.Name, st)
		}
	}
	if strings.Contains(string(a.Body), `"run"`) {
		t.Errorf("a chapter's answer names a run: %s", a.Body)
	}
	for _, st := range []joinedClass{ada, bea} {
		s := &sess{ts: ts, ID: st.Session.ID, Token: st.Session.Token}
		var notes []protocol.Event
		for _, e := range s.events(0, "") {
			if e.Note != nil && e.Note.Code == protocol.NoteChapter {
				notes = append(notes, e)
			}
		}
		if len(notes) != 1 || notes[0].Note.Chapter != experiments.ChapterBuildUp || notes[0].Kind != protocol.KindNote || notes[0].Run != "" || notes[0].Text == "" || notes[0].Badge != "note.chapter" {
			t.Errorf("%s's session log holds the chapter notes %+v, want one for build-up", st.Student.Name, notes)
		}
		if snap := s.snapshot(); snap.Run != nil {
			t.Errorf("%s's session has run %s after a chapter: a chapter starts nothing", st.Student.Name, snap.Run.ID)
		}
	}

	for _, bad := range []struct {
		token, body string
		want        int
		says        string
	}{
		{cl.Token, `{"chapter":"nowhere"}`, http.StatusBadRequest, "predict, build-up, new-owner-first, zombie-first, break-a-guard, limits"},
		{cl.Token, `{"chapter":"Build-Up"}`, http.StatusBadRequest, "build-up"},
		{cl.Token, `{"chapter":""}`, http.StatusBadRequest, "build-up"},
		{cl.Token, `{}`, http.StatusBadRequest, "build-up"},
		{cl.Token, `{"chapter":"build-up","run":true}`, http.StatusBadRequest, ""},
		{cl.Token, `{"chapter":7}`, http.StatusBadRequest, ""},
		{ada.Token, `{"chapter":"build-up"}`, http.StatusForbidden, ""},
		{ada.Session.Token, `{"chapter":"build-up"}`, http.StatusForbidden, ""},
		{"", `{"chapter":"build-up"}`, http.StatusForbidden, ""},
	} {
		a := ts.do("POST", path, bad.token, "application/json", bad.body)
		if a.Status != bad.want || a.errText() == "" || !strings.Contains(a.errText(), bad.says) {
			t.Errorf("the chapter %s with token %.6s…: %d %s, want %d saying %q", bad.body, bad.token, a.Status, a.Body, bad.want, bad.says)
		}
	}
	if a := ts.do("POST", "/api/classes/cnope/chapter", cl.Token, "application/json", `{"chapter":"build-up"}`); a.Status != http.StatusNotFound {
		t.Errorf("a chapter sent to no class: %d %s", a.Status, a.Body)
	}
	// None of the refused ones reached a student.
	for _, e := range (&sess{ts: ts, ID: ada.Session.ID}).events(0, "") {
		if e.Note != nil && e.Note.Code == protocol.NoteChapter && e.Note.Chapter != experiments.ChapterBuildUp {
			t.Errorf("a refused chapter reached Ada: %+v", e.Note)
		}
	}

	if a := ts.do("DELETE", "/api/classes/"+cl.Class.ID, cl.Token, "", ""); a.Status != http.StatusOK {
		t.Fatalf("end the class: %d %s", a.Status, a.Body)
	}
	if a := ts.do("POST", path, cl.Token, "application/json", `{"chapter":"limits"}`); a.Status != http.StatusConflict || a.errText() == "" {
		t.Errorf("a chapter sent to an ended class: %d %s", a.Status, a.Body)
	}
}
