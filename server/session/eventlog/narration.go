//go:build !fencelab_shout

package eventlog

// narration is an event's text as the log keeps it: as it was written.
// Built with the fencelab_shout tag, the log upper-cases every event's
// text instead (narration_shout.go), so a test can show that no consumer
// of the log reads the text for anything but showing it.
func narration(s string) string { return s }
