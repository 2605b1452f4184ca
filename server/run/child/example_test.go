package child_test

import (
	"fmt"
	"log"
	"os/exec"
	"syscall"

	"github.com/fencelab/fencelab/server/run/child"
)

// A child that must not outlive this program, however it ends: its own
// process group and, where there is one, a parent-death signal (Start);
// and a watchdog that SIGKILLs its group if this program dies first,
// which is what stops it on macOS.
func Example() {
	wd, err := child.StartWatchdog(child.Config{Name: "example-watchdog", Signal: syscall.SIGKILL})
	if err != nil {
		log.Fatal(err)
	}
	p, err := child.Start(exec.Command("sleep", "60"), child.Options{Watchdog: wd})
	if err != nil {
		log.Fatal(err)
	}

	// ... the child's work; then the program cleans up itself:
	_ = p.Signal(syscall.SIGKILL)
	_ = p.Wait() // and off the watchdog's list
	if err := wd.Stop(); err != nil {
		log.Print(err)
	}
	fmt.Println("the child is reaped and the watchdog gone")
	// Output: the child is reaped and the watchdog gone
}
