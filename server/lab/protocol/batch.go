package protocol

import (
	"fmt"

	"github.com/fencelab/fencelab/server/lab/experiments"
)

// OpenRunWords are the words of a button that opens a batch's run:
// "new-owner-first: ✗ unsafe — open this run".
func OpenRunWords(o experiments.Ordering, m Mark) string {
	w := MarkWords(m)
	return fmt.Sprintf("%s: %s %s — open this run", o, w.Sign, w.Word)
}
