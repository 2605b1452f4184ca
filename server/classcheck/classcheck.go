// Package classcheck joins a class student's session to the class's line
// of checks, both ways: the session puts its checks in the line
// (StudentLine, a session.ClassLine), and the line, when a check's turn
// comes on this instance, plays it in the student's session (Play, a
// class.PlayFunc). A student's check so walks session → class's line →
// engine → class's line → session, and the HTTP side only wires it.
package classcheck

import (
	"context"
	"errors"
	"time"

	"github.com/fencelab/fencelab/server/class"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/session"
)

// StudentLine is where student's checks wait: the classes' line in
// Postgres, as a session.ClassLine.
func StudentLine(line *class.Line, classID, studentID string) session.ClassLine {
	return studentLine{line: line, class: classID, student: studentID}
}

type studentLine struct {
	line           *class.Line
	class, student string
}

func (q studentLine) Submit(ctx context.Context, sol sandbox.Solution, lease time.Duration) (int64, error) {
	job, err := q.line.Submit(ctx, q.class, q.student, sol, lease)
	if errors.Is(err, class.ErrEnded) {
		return 0, session.ErrClassEnded
	}
	return job, err
}

func (q studentLine) Place(ctx context.Context, job int64) (int, bool, error) {
	return q.line.Place(ctx, job)
}

// Play is the line's class.PlayFunc: it plays a check whose turn has
// come in its student's session, if that session is on this instance
// (sessions), and class.ErrElsewhere otherwise, for the line to try
// again, here or on another instance.
func Play(classes *class.Store, sessions *session.Manager) class.PlayFunc {
	return func(ctx context.Context, t class.Turn) (class.Played, error) {
		id, err := classes.StudentSession(ctx, t.Student)
		if err != nil {
			return class.Played{}, err
		}
		sess, err := sessions.Get(id)
		if id == "" || err != nil {
			return class.Played{}, class.ErrElsewhere
		}
		rep, refused, err := sess.PlayClassCheck(ctx, t.Job, t, t.Solution, time.Duration(t.LeaseMS)*time.Millisecond)
		if err != nil {
			return class.Played{}, err
		}
		return class.Played{Report: rep, Refused: refused}, nil
	}
}
