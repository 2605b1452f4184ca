package check

import (
	"fmt"
	"io"
	"strings"

	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/sandbox"
)

// WriteText prints a report for a terminal: the article's table for the
// solution, case by case and cell by cell against the article's, then the
// requirements the runs showed broken, then what fencelab asks beyond the
// article (a note), then the result in one sentence.
// A case's notes (how each worker program exited) follow its table in
// parentheses: reported, never judged.
func WriteText(w io.Writer, rep protocol.CheckReport) error {
	var b strings.Builder
	width := 0
	for _, c := range protocol.Columns() {
		width = max(width, len(protocol.ColumnWords(c)))
	}
	for _, c := range rep.Cases {
		fmt.Fprintf(&b, "%s %s\n", mark(c.OK), c.Title)
		if c.Error != nil {
			fmt.Fprintf(&b, "    could not run to its end: %s\n", c.Error.Message)
		}
		for _, cell := range c.Table {
			fmt.Fprintf(&b, "    %-*s  %s %s", width, protocol.ColumnWords(cell.Column), mark(cell.AsCorrect), cell.Words)
			if !cell.AsCorrect {
				fmt.Fprintf(&b, "   (the article: %s)", cell.Expected)
			}
			b.WriteString("\n")
		}
		for _, n := range c.Notes {
			fmt.Fprintf(&b, "    (%s)\n", n)
		}
	}
	if len(rep.Broken) > 0 {
		b.WriteString("\nWhat the runs show broken:\n")
		for _, br := range rep.Broken {
			fmt.Fprintf(&b, "  - %s\n", br.Words)
		}
	}
	if len(rep.Beyond) > 0 {
		b.WriteString("\nBeyond the article (a note, not a failure):\n")
		for _, br := range rep.Beyond {
			fmt.Fprintf(&b, "  - %s\n", br.Words)
		}
	}
	fmt.Fprintf(&b, "\n%s\n", rep.Words)
	_, err := io.WriteString(w, b.String())
	return err
}

// mark is a case's or a cell's sign, as the protocol's words give it.
func mark(ok bool) string { return protocol.MarkWords(protocol.CaseMark(ok)).Sign }

// FileName is the file a solution's statement of kind k is written to and
// read from: claim.sql, complete.sql, fail.sql, receiver.sql.
func FileName(k sandbox.Kind) string { return k.String() + ".sql" }
