package runner

// SetSpawnHook sets spawnHook for a test, and returns how to unset it.
func SetSpawnHook(f func(*Run)) func() {
	spawnHook = f
	return func() { spawnHook = nil }
}

// SetNotifyHook sets notifyHook for a test, and returns how to unset it.
// Not for parallel tests: it sees every run's notifications.
func SetNotifyHook(f func(r *Run, payload string)) func() {
	notifyHook.Store(&f)
	return func() { notifyHook.Store(nil) }
}
