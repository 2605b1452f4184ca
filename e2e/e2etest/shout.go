package e2etest

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/servertest"
)

// shouting reports whether the binary under test was built with the
// fencelab_shout tag (FENCELAB_BUILD_TAGS=fencelab_shout go test ./e2e/...):
// then every event's text is upper-cased by the server, and the whole
// browser suite must still pass, because the page, the exports and the
// replay read the events' typed fields, never their text.
func Shouting() bool {
	return strings.Contains(os.Getenv(servertest.TagsEnv), "fencelab_shout")
}

// checkShouted fails t unless every event the server tapped has its text
// upper-cased: the shout build really is the build under test.
func checkShouted(t *testing.T, tap string) {
	t.Helper()
	f, err := os.Open(tap)
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e struct{ Text string }
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Text != strings.ToUpper(e.Text) {
			t.Errorf("a shout build emitted an event whose text is not upper-cased: %q", e.Text)
			return
		}
	}
}
