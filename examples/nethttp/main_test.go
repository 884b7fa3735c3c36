package main

import (
	"testing"

	"github.com/redlimit/redlimit/examples/internal/run"
)

func TestApp(t *testing.T) { run.Check(t, newApp) }
