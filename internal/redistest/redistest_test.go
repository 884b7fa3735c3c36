package redistest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

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
	if r.failed != "" || !strings.Contains(r.skipped, "SKIPPING") {
		t.Errorf("without %s: skipped %q, failed %q; want a loud skip", redistest.RequireEnv, r.skipped, r.failed)
	}

	t.Setenv(redistest.RequireEnv, "1")
	r = run(t)
	if r.skipped != "" || !strings.Contains(r.failed, "failure") {
		t.Errorf("with %s=1: skipped %q, failed %q; want a failure", redistest.RequireEnv, r.skipped, r.failed)
	}
}
