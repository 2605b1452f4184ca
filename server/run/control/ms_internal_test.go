package control

import (
	"fmt"
	"strings"
	"testing"
)

// TestEveryMillisecondFieldIsChecked: a field in milliseconds that an
// action takes, now or added later, is range-checked as sent: one too big
// for a time.Duration is refused in words that give the limit.
func TestEveryMillisecondFieldIsChecked(t *testing.T) {
	lim := DefaultLimits()
	for a, fs := range fields {
		for _, f := range fs {
			if !strings.HasSuffix(f, "_ms") {
				continue
			}
			if !contains(msFields, f) {
				t.Errorf("%s takes %s, which msFields does not list", a, f)
				continue
			}
			in := fmt.Sprintf(`{"action":%q,%q:9223372036854775807}`, a, f)
			_, err := Parse([]byte(in), lim)
			_, most := lim.msRange(a, f)
			if want := fmt.Sprintf("%s 9223372036854775807 is more than the most, %d", f, most); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Parse(%s) = %v, want %q", in, err, want)
			}
		}
	}
}
