package engine

import (
	"math"
	"time"
)

// Result is core.Result, field for field except Limit (the engine's):
// the outcome of one decision, which core.Result documents.
type Result struct {
	Limit      Limit
	Allowed    bool
	Remaining  int
	RetryAfter time.Duration
	ResetAfter time.Duration
	NextAfter  time.Duration
	Delay      time.Duration
	Cached     bool
}

// InfDuration is the RetryAfter of a request that can never be allowed: one
// whose cost exceeds the limit's burst.
const InfDuration = time.Duration(math.MaxInt64)

// binding returns the result of a decision of several limits from each
// limit's own result, and its index: the denying limit's with the longest
// RetryAfter, or, when all allow, the one with the fewest Remaining (the
// first of equals); with the longest ResetAfter of all, and the longest
// Delay when allowed. results must not be empty.
func binding(results []Result) (Result, int) {
	b, reset, delay := 0, results[0].ResetAfter, results[0].Delay
	for i, r := range results[1:] {
		best := results[b]
		if best.Allowed && !r.Allowed ||
			!best.Allowed && !r.Allowed && r.RetryAfter > best.RetryAfter ||
			best.Allowed && r.Allowed && r.Remaining < best.Remaining {
			b = i + 1
		}
		reset, delay = max(reset, r.ResetAfter), max(delay, r.Delay)
	}
	res := results[b]
	res.ResetAfter, res.Delay = reset, delay
	if !res.Allowed {
		res.Delay = 0
	}
	return res, b
}
