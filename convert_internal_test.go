package redlimit

import (
	"testing"

	"github.com/redlimit/redlimit/internal/engine"
)

// TestResultConversion: the HTTP layer's Decision.Result carries every
// field of the engine's result.
func TestResultConversion(t *testing.T) {
	r := engine.FilledResult()
	if err := engine.SameFields(r, result(r)); err != nil {
		t.Error(err)
	}
}
