//go:build !linux

package child

// onMainThread cannot tell here; it matters only where a thread's end
// sends the parent-death signal (Linux).
func onMainThread() bool { return false }
