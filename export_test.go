package redlimit

import "github.com/redlimit/redlimit/core"

// Bounds of a core.Limit the tests read: the largest Rate and Burst, and
// the most slots of a Concurrency limit.
const (
	MaxCount = core.MaxCount
	MaxSlots = 10_000 // core's maxMembers: a Concurrency limit's most slots
)
