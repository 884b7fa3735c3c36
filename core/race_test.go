//go:build race

package core_test

// raceEnabled: the race detector drops a quarter of what goes into a
// sync.Pool, so pooled objects are allocated again now and then.
const raceEnabled = true
