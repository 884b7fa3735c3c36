package main

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/examples/internal/run"
)

// TestDemo runs the demo on embedded Redis and checks its table.
func TestDemo(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	out := captureStdout(t, demo)
	for _, want := range []string{
		"5/s gcra                  +++++-- rem 0 retry 200ms",
		"5/s token_bucket stepped  +++++-- rem 0 retry 1s",
		"queued up to 800ms",
		"5/s fixed_window          +++++-- rem 0 retry 1s",
		"------ rem 0 retry 20ms",
		"net/http   3    429     2                  0          1      1            {\"error\":\"rate limit exceeded\",\"retry_after\":1}",
		"gin        2    200     2                  0          1                   hello",
		"gin        3    429     2                  0          1      1            {\"error\":\"rate limit exceeded\",\"retry_after\":1}",
		"echo       3    429     2                  0          1      1            {\"error\":\"rate limit exceeded\",\"retry_after\":1}",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if got := strings.Count(out, "  10\n"); got != len(limits)-1 {
		t.Errorf("%d limits admitted 10 of 15, want all but the sliding window (%d):\n%s", got, len(limits)-1, out)
	}
}

func TestMain(m *testing.M) { run.TestMain(m, main) }

// TestHelp: -h names the environment variable and its default.
func TestHelp(t *testing.T) {
	run.CheckHelp(t, "Usage: go run ./examples/demo", "REDIS_URL", "embedded miniredis")
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
