package main

import (
	"testing"

	"github.com/redlimit/redlimit/examples/internal/run"
)

func TestApp(t *testing.T) { run.Check(t, newApp) }

// TestPartners: the partner API limits per partner, keyed by what
// checkAPIKey stored with c.Set.
func TestPartners(t *testing.T) { run.CheckPartners(t, newApp) }

func TestMain(m *testing.M) { run.TestMain(m, main) }

// TestHelp: -h names the environment variables and their defaults.
func TestHelp(t *testing.T) {
	run.CheckHelp(t, "Usage: go run ./examples/echo", "ADDR", "localhost:8080", "REDIS_URL", "embedded miniredis")
}
