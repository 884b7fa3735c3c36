package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// TestDemo runs the demo on embedded Redis and checks its table: every
// algorithm admits 10 of the 15 requests of the scenario.
func TestDemo(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	out := captureStdout(t, main)
	for _, want := range []string{"gcra", "token_bucket", "fixed_window", "429  retry in 200ms", "429  retry in 700ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Fields(lines[len(lines)-1]); strings.Join(got, " ") != "allowed 10 10 10" {
		t.Errorf("last line %q, want allowed 10 10 10", lines[len(lines)-1])
	}
}

func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = stdout }()
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	f()
	w.Close()
	return <-done
}
