package session

import (
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// OpenChapter tells the pages on the session to open the guided lesson at
// chapter c, as ?lesson=<id> opens it: a note in the session's log
// (protocol.NoteChapter), which changes no state of the session and starts
// nothing. It is how a teacher's class sends every student's page to one
// chapter; each page then plays it at its student's pace. A chapter the
// lesson does not have is refused (fault.Invalid), and a session that has
// ended takes nothing (fault.NotFound). Safe for concurrent use: the note
// goes straight into the log, not through the session's inbox, so it
// never waits behind a run being started.
func (s *Session) OpenChapter(c experiments.Chapter) error {
	if _, err := experiments.ParseChapter(string(c)); err != nil {
		return err
	}
	return s.tell(protocol.Event{Kind: protocol.KindNote, Actor: protocol.ActorServer, Note: &protocol.NoteEvent{Code: protocol.NoteChapter, Chapter: c}})
}

// ToldRun tells the session's page that run, started in it by a class's
// teacher for everyone (protocol.NoteClassRun), is on its stage: the
// page brings it into view. As OpenChapter, it changes nothing else.
func (s *Session) ToldRun(run string) error {
	return s.tell(protocol.Event{Kind: protocol.KindNote, Actor: protocol.ActorServer, Run: run, Note: &protocol.NoteEvent{Code: protocol.NoteClassRun}})
}

// tell puts a note in the session's log, unless the session has ended
// (fault.NotFound).
func (s *Session) tell(e protocol.Event) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return fault.Errorf(fault.NotFound, "the session has ended")
	}
	s.emit(e)
	return nil
}
