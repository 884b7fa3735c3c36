package main

import (
	"testing"

	"github.com/redlimit/redlimit/examples/internal/run"
)

func TestApp(t *testing.T) { run.Check(t, newApp) }

func TestMain(m *testing.M) { run.TestMain(m, main) }

// TestHelp: -h names the environment variables and their defaults.
func TestHelp(t *testing.T) {
	run.CheckHelp(t, "Usage: go run ./examples/nethttp", "ADDR", "localhost:8080", "REDIS_URL", "embedded miniredis")
}
