package crowd_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/fencelab/fencelab/cmd/internal/crowd"
)

// A crowd of 30 readers against a fencelab server already running on this
// machine, arriving over 5 seconds, each playing the article's zombie-first
// run with a 300ms lease. (Without URL, set Executable to a fencelab
// binary and the crowd starts a server of its own.)
func ExampleRun() {
	rep, err := crowd.Run(context.Background(), crowd.Config{
		URL:     "http://127.0.0.1:8080",
		Readers: 30,
		Ramp:    5 * time.Second,
		Lease:   300 * time.Millisecond,
		Log:     log.New(os.Stderr, "crowd: ", 0),
	})
	if rep != nil {
		fmt.Print(rep.Table())
	}
	if err != nil {
		log.Fatal(err)
	}
}
