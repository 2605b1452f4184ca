//go:build !linux

package harness

// useReaper says whether workers run under a reaper (see reaper.go): not
// here, where the kernel has no subreaper.
const useReaper = false

func runReaper(string) int { return 127 }
