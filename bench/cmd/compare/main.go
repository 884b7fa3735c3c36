// Command compare prints, side by side in one run, how many rate-limit
// decisions per second redlimit and its peers make on one real
// redis-server, and what each costs: allocations, latency and server time
// per script call.
//
//	cd bench && go run ./cmd/compare                   # the whole matrix, a few minutes
//	go run ./cmd/compare -only=core,ulule -goroutines=16 -keys=10000 -duration=3s
//	go run ./cmd/compare -rounds=3 -markdown           # medians of three, for the README
//
// It starts its own redis-server (from PATH, or -redis-server) on a free
// loopback port, with no persistence, and stops it when done. Every row is
// quoted as a ratio to a bare EVALSHA of a script that only returns 1,
// measured in the same cell: the floor of one round trip.
//
// Rows (select with -only, by row or group name):
//
//	decide:  evalsha, core, core-pipeline, core-ctxtimeout, redis_rate, ulule
//	http:    http-redlimit, http-ulule
//	denied:  deny-cache, deny-nocache (one hot key only)
//
// The evalsha row always runs: it is the reference.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	err := mainErr(os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

// mainErr parses the flags, starts redis-server, runs the comparison and
// prints the table. It returns instead of exiting, so that the server is
// always stopped.
func mainErr(args []string, stdout, stderr io.Writer) error {
	cfg, opts, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	addr, stopRedis, err := startRedis(opts.redisServer)
	if err != nil {
		return err
	}
	defer stopRedis()

	if !opts.quiet {
		cfg.Progress = stderr
	}
	if opts.cpuProfile != "" {
		f, err := os.Create(opts.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := run(ctx, cfg, addr)
	if err != nil {
		return err
	}
	if opts.markdown {
		rep.writeMarkdown(stdout)
	} else {
		rep.writeText(stdout)
	}
	if n := rep.errors(); n > 0 {
		return fmt.Errorf("%d decisions failed or had the wrong answer (see the errors column)", n)
	}
	return nil
}

// cliOptions are the flags that are not part of a config.
type cliOptions struct {
	redisServer string
	markdown    bool
	quiet       bool
	cpuProfile  string
}

// parseFlags reads the command line into a config.
func parseFlags(args []string, stderr io.Writer) (config, cliOptions, error) {
	cfg := defaultConfig()
	var opts cliOptions
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: compare [flags]\n\n"+
			"Decisions per second of redlimit and its peers on one redis-server, side by side.\n"+
			"Rows: %s (groups: %s).\n\nFlags:\n",
			strings.Join(rowNames(), ", "), strings.Join(groupNames(), ", "))
		fs.PrintDefaults()
	}
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured time of each row in each cell")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured traffic before each measurement (fills the connection pool)")
	goroutines := fs.String("goroutines", joinInts(cfg.Goroutines), "comma-separated goroutine counts")
	keys := fs.String("keys", joinInts(cfg.Keys), "comma-separated key counts (1: one hot key)")
	only := fs.String("only", "", "comma-separated rows or groups to run (default all); evalsha always runs")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "repeat the whole matrix this many times and print medians")
	fs.IntVar(&cfg.PoolSize, "pool", 0, "go-redis PoolSize of every client (default: the most goroutines, at least go-redis's own default)")
	fs.StringVar(&opts.redisServer, "redis-server", "redis-server", "the redis-server binary to start")
	fs.BoolVar(&opts.markdown, "markdown", false, "print Markdown tables instead of fixed-width text")
	fs.BoolVar(&opts.quiet, "q", false, "do not report progress on stderr")
	fs.StringVar(&opts.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return cfg, opts, err
	}
	if fs.NArg() > 0 {
		return cfg, opts, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.Goroutines, err = parseInts(*goroutines); err != nil {
		return cfg, opts, fmt.Errorf("-goroutines: %w", err)
	}
	if cfg.Keys, err = parseInts(*keys); err != nil {
		return cfg, opts, fmt.Errorf("-keys: %w", err)
	}
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
	}
	return cfg, opts, cfg.validate()
}

// parseInts reads "1,16,128": positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// startRedis starts redis-server on a free loopback port, without
// persistence, and returns its address once it answers PING, and a function
// that kills it and removes its directory.
func startRedis(path string) (addr string, stop func(), err error) {
	bin, err := exec.LookPath(path)
	if err != nil {
		return "", nil, fmt.Errorf("redis-server is needed (install it, or pass -redis-server): %w", err)
	}
	dir, err := os.MkdirTemp("", "redlimit-compare-")
	if err != nil {
		return "", nil, err
	}
	// Another process may take the port between choosing and binding it:
	// try a few.
	for attempt := 0; attempt < 5; attempt++ {
		var port int
		if port, err = freePort(); err != nil {
			continue
		}
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		var kill func()
		if kill, err = launchRedis(bin, dir, addr, port); err == nil {
			var once sync.Once
			return addr, func() { once.Do(func() { kill(); os.RemoveAll(dir) }) }, nil
		}
	}
	os.RemoveAll(dir)
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

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if port == 0 {
		return 0, errors.New("no free loopback port")
	}
	return port, nil
}

// machine describes where the run happens, for the table's heading.
func machine() string {
	return fmt.Sprintf("%s, %s/%s, GOMAXPROCS=%d, %d CPUs",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU())
}
