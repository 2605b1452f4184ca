package supervisor

import (
	"io"
	"strings"
	"testing"
)

// TestReadLines_ALongLineIsSkippedAndSaidAndReadingGoesOn: a line over the
// cap (5 MiB, where the scanner before stopped at 4 MiB and read no more)
// is named with its length, and every line after it is still read.
func TestReadLines_ALongLineIsSkippedAndSaidAndReadingGoesOn(t *testing.T) {
	pr, pw := io.Pipe()
	go func() {
		io.WriteString(pw, "first\n")                       //nolint:errcheck
		io.WriteString(pw, strings.Repeat("x", 5<<20)+"\n") //nolint:errcheck
		io.WriteString(pw, "after\r\n")                     //nolint:errcheck
		io.WriteString(pw, strings.Repeat("y", 2<<20))      //nolint:errcheck // and no end of line
		pw.Close()
	}()
	var got []string
	var long []int
	readLines(pr, 1<<20, func(b []byte) { got = append(got, string(b)) }, func(n int) { long = append(long, n) })
	if strings.Join(got, ",") != "first,after" {
		t.Errorf("lines %q, want first and after", got)
	}
	if len(long) != 2 || long[0] != 5<<20 || long[1] < 2<<20-1 {
		t.Errorf("long lines %v, want 5 MiB and 2 MiB", long)
	}
}
