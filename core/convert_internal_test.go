package core

import (
	"testing"

	"github.com/redlimit/redlimit/internal/engine"
)

// TestConversions: core's Result, Limit, Stats and Algorithm carry every
// field of the engine's, both ways, so that nothing the engine decides is
// lost on the way to a caller; and core documents the engine's defaults.
func TestConversions(t *testing.T) {
	r := engine.FilledResult()
	if err := engine.SameFields(r, result(r)); err != nil {
		t.Errorf("result: %v", err)
	}
	if got := engine.Limit(Limit(r.Limit)); got != r.Limit {
		t.Errorf("Limit round trip: %+v, want %+v", got, r.Limit)
	}
	s := engine.Stats{BreakerOpen: true, BreakerOpens: 1, FailedSettlements: 2, RetriedReleases: 3, AbandonedReleases: 4}
	if err := engine.SameFields(s, Stats(s)); err != nil {
		t.Errorf("Stats: %v", err)
	}
	if DefaultTimeout != engine.DefaultTimeout || DefaultDenyCacheKeys != engine.DefaultDenyCacheKeys || InfDuration != engine.InfDuration {
		t.Errorf("core's defaults are not the engine's")
	}
	for a, b := range map[Algorithm]engine.Algorithm{FixedWindow: engine.FixedWindow, SlidingWindow: engine.SlidingWindow,
		SlidingLog: engine.SlidingLog, TokenBucket: engine.TokenBucket, LeakyBucket: engine.LeakyBucket, GCRA: engine.GCRA,
		Concurrency: engine.Concurrency} {
		if a != b {
			t.Errorf("core's %q is the engine's %q", a, b)
		}
	}
}
