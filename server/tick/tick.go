// Package tick is the server's one loop on a clock: do something every
// so often until the context ends or the something says stop.
package tick

import (
	"context"
	"time"
)

// Every calls f every d, the first time d from now, until ctx ends or f
// returns false. It returns when it stops; f never runs after ctx has
// ended at a tick (a tick and the end at once may go either way).
func Every(ctx context.Context, d time.Duration, f func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ctx.Err() != nil || !f() {
			return
		}
	}
}
