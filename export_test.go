package redlimit

import "github.com/redlimit/redlimit/internal/engine"

// Bounds of a core.Limit the tests read: the largest Rate and Burst, and
// the most slots of a Concurrency limit.
const (
	MaxCount = engine.MaxCount
	MaxSlots = engine.MaxMembers
)
