//go:build fencelab_shout

package eventlog

import "strings"

// narration upper-cases every event's text in a fencelab_shout build: the
// page, the exports and the replay must work from the typed fields alone.
func narration(s string) string { return strings.ToUpper(s) }
