package experiments

import (
	"strings"

	"github.com/fencelab/fencelab/server/fault"
)

// Chapter is a chapter of the guided lesson, by its id: what the page
// opens with ?lesson=<id>, and what a teacher sends to every student's
// page (protocol.NoteChapter). The lesson itself, its steps and the runs
// they start, is the page's (static/js/lesson.js, chapters()); this is
// the list the server allows, and TestChapters_AreTheLessons holds the two
// to the same ids and titles, in the same order.
type Chapter string

// The chapters, in the lesson's order.
const (
	ChapterPredict       Chapter = "predict"
	ChapterBuildUp       Chapter = "build-up"
	ChapterNewOwnerFirst Chapter = "new-owner-first"
	ChapterZombieFirst   Chapter = "zombie-first"
	ChapterBreakAGuard   Chapter = "break-a-guard"
	ChapterLimits        Chapter = "limits"
)

// Chapters lists the lesson's chapters in its order.
func Chapters() []Chapter {
	return []Chapter{ChapterPredict, ChapterBuildUp, ChapterNewOwnerFirst, ChapterZombieFirst, ChapterBreakAGuard, ChapterLimits}
}

// Title is the chapter's title, as the lesson's heading and the board's
// choice show it: "The pieces". An unknown chapter's is its id.
func (c Chapter) Title() string {
	switch c {
	case ChapterPredict:
		return "Predict"
	case ChapterBuildUp:
		return "The pieces"
	case ChapterNewOwnerFirst:
		return "The new owner reaches the receiver first"
	case ChapterZombieFirst:
		return "The zombie reaches the receiver first"
	case ChapterBreakAGuard:
		return "Break one guard at a time"
	case ChapterLimits:
		return "What fencing does not do"
	}
	return string(c)
}

// ParseChapter parses a chapter's id. An id that is none of the lesson's
// is refused as bad input, in a sentence that names the ones there are.
func ParseChapter(s string) (Chapter, error) {
	var ids []string
	for _, c := range Chapters() {
		if string(c) == s {
			return c, nil
		}
		ids = append(ids, string(c))
	}
	return "", fault.Invalidf("the lesson has no chapter %q: it has %s", s, strings.Join(ids, ", "))
}
