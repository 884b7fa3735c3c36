package harness

import (
	"context"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestStartRedis checks the programs' own server: on loopback, answering,
// gone after stop, and its directory removed by stop only when StartRedis
// made it.
func TestStartRedis(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv(redistest.RequireEnv) != "1" {
		t.Skipf("%s: %v", redistest.Missing, err)
	}
	for _, tc := range []struct {
		name string
		dir  string
	}{{"own dir", ""}, {"caller's dir", t.TempDir()}} {
		t.Run(tc.name, func(t *testing.T) {
			addr, stop, err := StartRedis("redis-server", tc.dir)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
				t.Errorf("address %s is not on loopback", addr)
			}
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			defer c.Close()
			ctx := context.Background()
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := RedisVersion(ctx, c); err != nil || v == "" {
				t.Errorf("RedisVersion = %q, %v", v, err)
			}
			cfg, err := c.ConfigGet(ctx, "dir").Result()
			if err != nil {
				t.Fatal(err)
			}
			dir := cfg["dir"]
			if tc.dir != "" && dir != tc.dir {
				t.Errorf("server's dir %q, want %q", dir, tc.dir)
			}
			stop()
			stop() // harmless
			if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				conn.Close()
				t.Error("the server still accepts connections after stop")
			}
			_, err = os.Stat(dir)
			switch {
			case tc.dir == "" && !os.IsNotExist(err):
				t.Errorf("its own directory %s is still there after stop (%v)", dir, err)
			case tc.dir != "" && err != nil:
				t.Errorf("the caller's directory is gone after stop: %v", err)
			}
		})
	}
}

// TestStartRedisMissing checks the error when there is no such binary.
func TestStartRedisMissing(t *testing.T) {
	if _, _, err := StartRedis("redlimit-no-such-redis-server", ""); err == nil {
		t.Fatal("no error for a missing binary")
	}
}

// TestFreePorts checks that the ports differ.
func TestFreePorts(t *testing.T) {
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("ports %v: not distinct and positive", ports)
		}
		seen[p] = true
	}
	if got := Loopback(6379); got != "127.0.0.1:6379" {
		t.Errorf("Loopback(6379) = %q", got)
	}
}
