// Command compare prints, side by side in one run, how many rate-limit
// decisions per second redlimit and its peers make on one real
// redis-server, and what each costs: allocations, latency and server time
// per script call.
//
//	cd bench && go run ./cmd/compare                   # the whole matrix, a few minutes
//	go run ./cmd/compare -only=core,ulule -goroutines=16 -keys=10000 -duration=3s
//	go run ./cmd/compare -rounds=3 -markdown           # medians of three, for the README
//	go run ./cmd/compare -rate=1000000000              # the runs before 2026-11-27: limits of 1e9/s
//	go run ./cmd/compare -ab=old.tsv,new.tsv           # two builds side by side: see abrun.sh
//
// It starts its own redis-server (from PATH, or -redis-server) on a free
// loopback port, with no persistence, and stops it when done. Every row is
// quoted as a ratio to a bare EVALSHA of a script that only returns 1,
// measured in the same cell: the floor of one round trip.
//
// Rows (select with -only, by row or group name):
//
//	decide:  evalsha, core, core-pipeline, core-ctxtimeout, redis_rate, ulule
//	http:    http-redlimit, http-ctxtimeout, http-cost-stands, http-cost-refund, http-ulule
//	denied:  deny-cache, deny-nocache (one hot key only)
//
// The evalsha row always runs: it is the reference.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/redlimit/redlimit/bench/internal/harness"
)

func main() { harness.Main("compare", mainErr) }

// mainErr parses the flags, starts redis-server, runs the comparison and
// prints the table. It returns instead of exiting, so that the server is
// always stopped.
func mainErr(args []string, stdout, stderr io.Writer) error {
	cfg, opts, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if opts.ab != "" {
		return compareAB(opts.ab, opts.markdown, stdout)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	addr, stopRedis, err := harness.StartRedis(opts.redisServer, "")
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
	if opts.tsv != "" {
		if err := rep.appendTSV(opts.tsv); err != nil {
			return fmt.Errorf("-tsv: %w", err)
		}
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
	tsv, ab     string
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
	fs.IntVar(&cfg.Rate, "rate", defaultRate, "events per second per key the throughput rows' limits allow (burst as many): never denying")
	fs.IntVar(&cfg.PoolSize, "pool", 0, "go-redis PoolSize of every client (default: the most goroutines, at least go-redis's own default)")
	fs.StringVar(&opts.redisServer, "redis-server", "redis-server", "the redis-server binary to start")
	fs.BoolVar(&opts.markdown, "markdown", false, "print Markdown tables instead of fixed-width text")
	fs.BoolVar(&opts.quiet, "q", false, "do not report progress on stderr")
	fs.StringVar(&opts.tsv, "tsv", "", "also append every measurement to this file, tab-separated: a header, then a line per row, cell and round (for -ab)")
	fs.StringVar(&opts.ab, "ab", "", "old.tsv,new.tsv: run nothing, print the medians of two -tsv files side by side, old against new (see abrun.sh)")
	fs.StringVar(&opts.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	if err := harness.Parse(fs, args); err != nil {
		return cfg, opts, err
	}
	var err error
	if cfg.Goroutines, err = harness.ParseInts(*goroutines); err != nil {
		return cfg, opts, fmt.Errorf("-goroutines: %w", err)
	}
	if cfg.Keys, err = harness.ParseInts(*keys); err != nil {
		return cfg, opts, fmt.Errorf("-keys: %w", err)
	}
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
	}
	return cfg, opts, cfg.validate()
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// machine describes where the run happens, for the table's heading.
func machine() string {
	return fmt.Sprintf("%s, %s/%s, GOMAXPROCS=%d, %d CPUs",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU())
}
