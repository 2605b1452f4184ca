package runner

// SetSpawnHook sets spawnHook for a test, and returns how to unset it.
func SetSpawnHook(f func(*Run)) func() {
	spawnHook = f
	return func() { spawnHook = nil }
}
