package harness

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartRedis starts the redis-server binary path (looked up on PATH) on a
// free loopback port, without persistence, and returns its address once it
// answers PING, and a function that kills it; calling stop more than once
// is harmless.
//
// The server's working directory is dir. When dir is "", StartRedis makes a
// temporary directory of its own, and stop removes it; a dir passed in is
// left to the caller.
func StartRedis(path, dir string) (addr string, stop func(), err error) {
	bin, err := exec.LookPath(path)
	if err != nil {
		return "", nil, fmt.Errorf("redis-server is needed (install it, or pass -redis-server): %w", err)
	}
	cleanup := func() {}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "redlimit-bench-redis-"); err != nil {
			return "", nil, err
		}
		own := dir
		cleanup = func() { os.RemoveAll(own) }
	}
	// Another process may take the port between choosing and binding it:
	// try a few.
	for attempt := 0; attempt < 5; attempt++ {
		var ports []int
		if ports, err = FreePorts(1); err != nil {
			continue
		}
		addr = Loopback(ports[0])
		var kill func()
		if kill, err = launchRedis(bin, dir, addr, ports[0]); err == nil {
			var once sync.Once
			return addr, func() { once.Do(func() { kill(); cleanup() }) }, nil
		}
	}
	cleanup()
	return "", nil, fmt.Errorf("could not start redis-server: %w", err)
}

// launchRedis runs one redis-server and waits until it answers.
func launchRedis(bin, dir, addr string, port int) (kill func(), err error) {
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning")
	var out bytes.Buffer // written by the process until it exits; read after
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	kill = func() { _ = cmd.Process.Kill(); <-exited }

	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return kill, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("redis-server on %s exited: %s", addr, bytes.TrimSpace(out.Bytes()))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			kill()
			return nil, fmt.Errorf("redis-server on %s did not answer PING: %w", addr, err)
		}
	}
}

// FreePorts asks the kernel for n distinct free loopback ports, holding
// them all open until each is known, so that they differ.
func FreePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Loopback returns the address of port on 127.0.0.1.
func Loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// RedisVersion reads redis_version from INFO server; "" (and no error)
// when the reply has none.
func RedisVersion(ctx context.Context, rdb *redis.Client) (string, error) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("INFO server: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", nil
}
