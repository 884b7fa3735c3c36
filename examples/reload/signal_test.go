//go:build unix

package main

import (
	"log/slog"
	"net/http"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestSIGHUP: the program's own wiring, a real SIGHUP sent to this
// process, reloads the rules; a file with a mistake is logged and the
// rules in force stay.
func TestSIGHUP(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	a := newTestApp(t, rdb, `{"GET /hello": "100/m"}`)
	var out redistest.LockedBuffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	hup := hangups()
	done := make(chan struct{})
	go func() { watch(hup, a.rs, a.path, log); close(done) }()
	t.Cleanup(func() { signal.Stop(hup); close(hup); <-done })

	// hangup sends SIGHUP and waits for the reload's log line.
	lines := 0
	hangup := func(want string) {
		t.Helper()
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		lines++
		for deadline := time.Now().Add(10 * time.Second); strings.Count(out.String(), "\n") < lines; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no log line after SIGHUP; log:\n%s", out.String())
			}
		}
		if got := strings.Split(strings.TrimSpace(out.String()), "\n")[lines-1]; !strings.Contains(got, want) {
			t.Fatalf("after SIGHUP, log %q; want %q", got, want)
		}
	}

	a.send("hello", "GET", "/hello", http.StatusOK, "100")
	a.write(`{"GET /hello": "1/m"}`)
	hangup(`msg="rules reloaded"`)
	a.send("hello under the new rule", "GET", "/hello", http.StatusTooManyRequests, "1")
	a.write(`{"get /hello": "100/m"}`)
	hangup(`level=ERROR msg="rules not reloaded; the rules in force stay"`)
	if !strings.Contains(out.String(), `method \"get\"`) {
		t.Errorf("the error is not logged: %s", out.String())
	}
	a.send("hello under the rules in force", "GET", "/hello", http.StatusTooManyRequests, "1")
}
