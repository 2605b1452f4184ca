package supervisor

import (
	"io"
	"runtime"
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

// TestReadLines_ShortLinesHoldLittle: a worker's short lines are read
// with a few KiB, not the 1 MiB a line may hold (the server keeps two
// readers a worker, hundreds of workers at once); a long line in between
// is read whole, and its memory is not kept after it.
func TestReadLines_ShortLinesHoldLittle(t *testing.T) {
	lines := strings.Repeat(`{"kind":"sql","text":"a worker's event"}`+"\n", 1000)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	n := 0
	readLines(strings.NewReader(lines), MaxLineBytes, func([]byte) { n++ }, func(int) { t.Error("a short line read as long") })
	runtime.ReadMemStats(&ms1)
	if n != 1000 {
		t.Fatalf("%d lines read, want 1000", n)
	}
	if got := ms1.TotalAlloc - ms0.TotalAlloc; got > 64<<10 {
		t.Errorf("reading 1000 short lines allocated %d bytes, want under 64 KiB", got)
	}
	var got []int
	big := strings.Repeat("z", 300<<10)
	readLines(strings.NewReader("a\n"+big+"\nb\n"), MaxLineBytes, func(b []byte) { got = append(got, len(b)) }, func(int) { t.Error("a 300 KiB line read as long") })
	if len(got) != 3 || got[1] != 300<<10 {
		t.Errorf("line lengths %v, want 1, 300 KiB, 1", got)
	}
}
