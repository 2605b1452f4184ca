package api

import (
	"fmt"
	"os"
	"sync"
)

// EventTap returns a TapFunc that appends every event to the file at
// path, one JSON line each, and the function that closes it. It is how the
// tests see every event a server emits, to check each one against the
// protocol's schema (the FENCELAB_EVENT_TAP environment variable of
// `fencelab serve` and `fencelab run`).
func EventTap(path string) (func([]byte), func() error, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("event tap: %w", err)
	}
	var mu sync.Mutex
	tap := func(b []byte) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = f.Write(append(b, '\n')) // a tap that cannot write loses lines, never events
	}
	return tap, f.Close, nil
}
