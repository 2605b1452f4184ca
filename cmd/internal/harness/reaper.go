package harness

import (
	"os"
	"strings"
)

// A worker does not run under the harness directly: on Linux a reaper
// stands between them. The reaper is this same program, started again with
// reaperEnv set (init below catches it before main or TestMain runs). It
// makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), so that every
// process the worker starts and orphans, setsid or not, becomes its child
// rather than init's; it starts `/bin/sh -c COMMAND` as the leader of a
// process group of its own, tells the harness that shell's pid on fd 3,
// and waits. When the shell has gone, or the harness has (its parent-death
// signal, SIGTERM), it SIGKILLs the shell's group and then every child it
// has, round after round, reaping each, until it has no child left; then
// it exits as the shell did. So a case's end, which waits for the reaper,
// is the end of everything its workers started.
//
// The harness freezes, thaws and kills the shell's group, never the
// reaper: a frozen worker's reaper still reaps.
//
// Elsewhere (macOS) there is no subreaper: the shell is the harness's own
// child, and a process that leaves its group (setsid) is out of reach.
const reaperEnv = "FENCELAB_HARNESS_REAPER"

func init() {
	if os.Getenv(reaperEnv) == "1" && len(os.Args) == 2 {
		os.Exit(runReaper(os.Args[1]))
	}
}

// withoutReaperEnv is env less the reaper's own variable: the worker's
// environment is exactly the harness's choice.
func withoutReaperEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, reaperEnv+"=") {
			out = append(out, kv)
		}
	}
	return out
}
