package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

func TestStandalone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Standalone(t)
	if !strings.HasPrefix(s.Addr, "127.0.0.1:") {
		t.Fatalf("Addr %q is not on loopback", s.Addr)
	}
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := c.Get(ctx, "k").Val(); got != "v" {
		t.Fatalf("GET k = %q, want v", got)
	}
	other := redistest.Standalone(t)
	if other.Addr == s.Addr {
		t.Fatal("two servers on one address")
	}
	if n := other.Client(t).Exists(ctx, "k").Val(); n != 0 {
		t.Fatal("a second server shares state with the first")
	}

	s.Stop()
	s.Stop() // idempotent
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded after Stop")
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.NewCluster(t, 3)
	cc := c.Client(t)
	const keys = 300
	for i := 0; i < keys; i++ {
		if err := cc.Set(ctx, fmt.Sprintf("key%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Every master holds a share of the keys, and together all of them.
	total := 0
	for _, n := range c.Nodes {
		size := n.Client(t).DBSize(ctx).Val()
		if size == 0 {
			t.Errorf("master %s holds no keys", n.Addr)
		}
		total += int(size)
	}
	if total != keys {
		t.Errorf("masters hold %d keys in all, want %d", total, keys)
	}
	// A multi-key script works when the keys share a hash tag.
	script := redis.NewScript(`return redis.call('MSET', KEYS[1], 1, KEYS[2], 2)`)
	if err := script.Run(ctx, cc, []string{"{id}:a", "{id}:b"}).Err(); err != nil {
		t.Fatalf("script over one hash tag: %v", err)
	}
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.NewSentinel(t)
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The write went to the master the Sentinel named.
	if got := s.Master.Client(t).Get(ctx, "k").Val(); got != "v" {
		t.Fatalf("master has k = %q, want v", got)
	}
	script := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	if n, err := script.Run(ctx, c, []string{"n"}).Int(); err != nil || n != 1 {
		t.Fatalf("a script through Sentinel: %d, %v", n, err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Standalone(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	s.Resume() // not paused: does nothing
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	s.Pause()
	s.Pause() // twice is the same as once
	var ne net.Error
	if err := c.Ping(ctx).Err(); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PING on a paused server: %v, want a timeout", err)
	}
	s.Resume()
	s.Resume()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}

	// Stop ends a paused server, and Pause and Resume do nothing after it.
	s.Pause()
	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop hangs on a paused server")
	}
	s.Pause()
	s.Resume()
}

func TestRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Standalone(t)
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr
	s.Restart(t)
	if s.Addr != addr {
		t.Fatalf("Addr changed from %s to %s", addr, s.Addr)
	}
	// The client made before Restart works at once, without a failed
	// command: go-redis drops the pooled connection the old process closed
	// and dials the new one. The data did not survive.
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("GET k after Restart: %v, want redis.Nil", err)
	}

	// A paused or stopped server restarts running.
	s.Pause()
	s.Restart(t)
	s.Stop()
	s.Restart(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Stop and Restart: %v", err)
	}
}

func TestKillClients(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Standalone(t)
	c := s.Client(t)
	conn := s.Client(t).Conn() // one connection of its own, never redialled
	t.Cleanup(func() { _ = conn.Close() })
	if c.Ping(ctx).Err() != nil || conn.Ping(ctx).Err() != nil {
		t.Fatal("PING failed")
	}
	if n := s.KillClients(t); n != 2 {
		t.Fatalf("KillClients = %d, want 2", n)
	}
	if err := conn.Ping(ctx).Err(); err == nil {
		t.Fatal("PING on a killed connection succeeded")
	}
	// A pooled client notices and dials anew.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through the pool after KillClients: %v", err)
	}
}

func TestSlowFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Standalone(t)
	c := s.Client(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const d = 300 * time.Millisecond
	s.SlowFor(t, d)
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// A lower bound only: a busy machine can make it take longer.
	if took := time.Since(start); took < d/2 {
		t.Fatalf("PING took %v during SlowFor(%v)", took, d)
	}
}

func TestClientCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Standalone(t)
	if n := s.ClientCount(t); n != 0 {
		t.Fatalf("ClientCount = %d on a fresh server", n)
	}
	var clients []*redis.Client
	for i := 0; i < 3; i++ {
		c := s.Client(t)
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	if n := s.ClientCount(t); n != 3 {
		t.Fatalf("ClientCount = %d, want 3", n)
	}
	_ = clients[0].Close()
	for deadline := time.Now().Add(5 * time.Second); s.ClientCount(t) != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ClientCount = %d 5s after closing one of 3 clients, want 2", s.ClientCount(t))
		}
	}
}

// tb records how a helper ends a test instead of ending the real one.
type tb struct {
	testing.TB
	skipped, failed string
}

func (r *tb) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *tb) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls Standalone with a recording TB in a goroutine of its own, since
// Skipf and Fatalf end the goroutine that calls them.
func run(t *testing.T) *tb {
	r := &tb{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redistest.Standalone(r)
	}()
	<-done
	return r
}

func TestMissingServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no redis-server here

	t.Setenv(redistest.RequireEnv, "")
	r := run(t)
	if r.failed != "" || !strings.Contains(r.skipped, "SKIPPING") || !strings.HasPrefix(r.skipped, redistest.Missing) {
		t.Errorf("without %s: skipped %q, failed %q; want a loud skip", redistest.RequireEnv, r.skipped, r.failed)
	}

	t.Setenv(redistest.RequireEnv, "1")
	r = run(t)
	if r.skipped != "" || !strings.Contains(r.failed, "failure") || !strings.HasPrefix(r.failed, redistest.Missing) {
		t.Errorf("with %s=1: skipped %q, failed %q; want a failure", redistest.RequireEnv, r.skipped, r.failed)
	}
}
