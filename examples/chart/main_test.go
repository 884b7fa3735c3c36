package main

import (
	"bytes"
	"encoding/xml"
	"os"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/examples/internal/run"
)

func TestMain(m *testing.M) { run.TestMain(m, main) }

// TestHelp: -h documents the flag, and that no environment is read.
func TestHelp(t *testing.T) {
	run.CheckHelp(t, "Usage: go run ./examples/chart", "-o string", "reads no environment variables")
}

func TestChart(t *testing.T) {
	panels, err := simulate()
	if err != nil {
		t.Fatal(err)
	}
	var svg bytes.Buffer
	if err := draw(&svg, panels); err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(svg.Bytes(), new(struct{})); err != nil {
		t.Fatalf("not well-formed XML: %v", err)
	}
	if got := strings.Count(svg.String(), `<g class="panel">`); got != len(limits) {
		t.Fatalf("%d panels, want %d", got, len(limits))
	}

	admitted := func(i int) int {
		n := 0
		for _, o := range panels[i] {
			if o.allowed {
				n++
			}
		}
		return n
	}
	// Continuous token bucket, GCRA and both leaky bucket modes are the
	// same meter: they admit the same requests.
	for _, i := range []int{5, 6, 7} {
		if admitted(i) != admitted(3) {
			t.Errorf("%v admitted %d, %v admitted %d; want the same", limits[i], admitted(i), limits[3], admitted(3))
		}
	}

	committed, err := os.ReadFile("../../docs/algorithms.svg")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, svg.Bytes()) {
		t.Error("docs/algorithms.svg is out of date: go run ./examples/chart -o docs/algorithms.svg")
	}
}
