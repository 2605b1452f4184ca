package experiments_test

import (
	"errors"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/static"
)

// TestChapters_AreTheLessons holds the server's list of chapters to the
// lesson the page plays (static/js/lesson.js, chapters()): the same ids
// and titles, in the same order. The server allows a teacher to send only
// these; a chapter the page has and the server lacks could never be sent,
// and one the server has and the page lacks would open the first chapter
// instead. (The browser test TestClass_SendsAChapter checks the same with
// the lesson's own module, run: the board's choices are its chapters.)
func TestChapters_AreTheLessons(t *testing.T) {
	src, err := fs.ReadFile(static.FS, "js/lesson.js")
	if err != nil {
		t.Fatal(err)
	}
	body := string(src)
	start := strings.Index(body, "export function chapters(")
	if start < 0 {
		t.Fatal("lesson.js has no chapters() function")
	}
	body = body[start:]
	if end := strings.Index(body, "\n}\n"); end > 0 {
		body = body[:end]
	}
	type chapter struct{ ID, Title string }
	var js []chapter
	for _, m := range regexp.MustCompile(`\bid: "([^"]*)", title: "([^"]*)"`).FindAllStringSubmatch(body, -1) {
		js = append(js, chapter{m[1], m[2]})
	}
	if n := strings.Count(body, " id: "); n != len(js) {
		t.Fatalf("lesson.js's chapters() has %d ids, %d of them read with a title: write each chapter as { id: \"…\", title: \"…\", … }", n, len(js))
	}
	var gos []chapter
	for _, c := range experiments.Chapters() {
		gos = append(gos, chapter{string(c), c.Title()})
	}
	if !slices.Equal(js, gos) {
		t.Errorf("the lesson's chapters are\n%v\nthe server's (experiments.Chapters)\n%v", js, gos)
	}
}

func TestParseChapter_RefusesAnyOther(t *testing.T) {
	for _, c := range experiments.Chapters() {
		if got, err := experiments.ParseChapter(string(c)); got != c || err != nil {
			t.Errorf("ParseChapter(%q) = %q, %v", c, got, err)
		}
	}
	for _, s := range []string{"", "Predict", "build up", "build-up ", "../predict", "matrix"} {
		_, err := experiments.ParseChapter(s)
		if !errors.Is(err, engine.ErrInvalidInput) || !strings.Contains(err.Error(), "predict, build-up, new-owner-first") {
			t.Errorf("ParseChapter(%q): %v, want bad input naming the chapters there are", s, err)
		}
	}
}
