package child_test

import (
	"fmt"
	"log"
	"os/exec"
	"syscall"

	"github.com/fencelab/fencelab/server/run/child"
)

// A child that must not outlive this program, however it ends: its own
// process group and, where there is one, a parent-death signal; and a
// watchdog that SIGKILLs its group if this program dies first.
func Example() {
	wd, err := child.Start(child.Config{Name: "example-watchdog", Signal: syscall.SIGKILL})
	if err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = child.SysProcAttr(syscall.SIGKILL)
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	if err := wd.Watch(cmd.Process.Pid); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // unwatched, it could outlive us
		_ = cmd.Wait()
		log.Fatal(err)
	}

	// ... the child's work; then the program cleans up itself:
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	if err := wd.Unwatch(cmd.Process.Pid); err != nil {
		log.Print(err)
	}
	if err := wd.Stop(); err != nil {
		log.Print(err)
	}
	fmt.Println("the child is reaped and the watchdog gone")
	// Output: the child is reaped and the watchdog gone
}
