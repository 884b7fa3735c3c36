// Command redlimit answers support's questions about a service that
// rate-limits with redlimit ("why is tenant X getting 429?", "unlock this
// user") from the rules file the service loads and the Redis it keeps its
// state in:
//
//	go install github.com/redlimit/redlimit/cmd/redlimit@latest
//
//	redlimit show  [flags] KEY          the key's state under every rule, read-only
//	redlimit reset [flags] KEY [RULE]   forget the key's state, under RULE only if given
//	redlimit check [flags] FILE         check a rules file as the service would load it
//
// KEY is what the service's key function finds, as its logs and observers
// show it (redlimit.Decision.Key): "ip:203.0.113.7", "ip:2001:db8:1:2::/64"
// (IPv6 by its /64), "user:42", "header:X-Api-Key:k1", "tenant:acme". A
// key longer than 128 bytes is hashed as the service hashes it. RULE is a
// rule as the file writes it ("POST /login", "* tier=pro"), its pattern,
// or the name of a -policy.
//
// Flags (before or after the arguments):
//
//	-rules FILE    the rules file the service loads (a JSON object of
//	               pattern to limits, redlimit.ParseRules); REDLIMIT_RULES
//	-policy SPEC   a policy of the service's code, not in the file:
//	               NAME=LIMITS for one named by redlimit.WithName
//	               ("login=5/m, 20/d"), or LIMITS alone for one named by
//	               its limits, as it is without WithName; repeatable
//	-redis URL     the service's Redis: redis://[user:password@]host:port/db,
//	               rediss:// or unix://; REDIS_URL
//	-cluster       -redis names a Redis Cluster:
//	               redis://host:port?addr=host2:port2&addr=host3:port3
//	-prefix P      the service's core.WithPrefix (default "redlimit:")
//	-tier NAME     show the rules a request of this tier is decided by
//	               (the tier's, the default's where it has none)
//	-json          JSON for scripts instead of a table for people
//	-timeout D     bound on each call to Redis (default 5s)
//
// show and check write nothing in Redis: show reads each limit's state
// with a decision of cost 0 (core.Limiter.Look). reset deletes the state
// (core.Limiter.ResetRequest); instances of the service that denied the
// key in the last second may answer from their deny cache for up to a
// second more. Exit status: 0 done, 1 failed (Redis, the rules file), 2
// a bad command line. docs/operations.md tells more.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, nil))
}

// usage is the command line's summary, for -h and mistakes.
const usage = `usage:
  redlimit show  [flags] KEY          the key's state under every rule, read-only
  redlimit reset [flags] KEY [RULE]   forget the key's state, under RULE only if given
  redlimit check [flags] FILE         check a rules file as the service would load it
run "redlimit COMMAND -h" for the flags; "go doc github.com/redlimit/redlimit/cmd/redlimit" for more
`

// errUsage marks a bad command line (exit status 2); its message was
// printed with the usage.
var errUsage = errors.New("usage")

// run runs the command line args with the environment env and returns
// the exit status. clock, if not nil, is the time the decisions pass to
// Redis instead of its own (core.WithClock), for the tests of a page
// written at one instant.
func run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer, clock func() time.Time) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, args := args[0], args[1:]
	c, err := parse(cmd, args, env, stdout, stderr)
	if err == nil {
		c.out, c.clock = stdout, clock
		switch cmd {
		case "show":
			err = c.show(ctx)
		case "reset":
			err = c.reset(ctx)
		case "check":
			err = c.check()
		}
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case err != nil:
		fmt.Fprintln(stderr, "redlimit "+cmd+":", err)
		return 1
	}
	return 0
}

// command is a parsed command line.
type command struct {
	name     string
	args     []string // KEY [RULE], or FILE
	rules    string
	policies []string
	redisURL string
	cluster  bool
	prefix   string
	tier     string
	json     bool
	timeout  time.Duration
	out      io.Writer
	clock    func() time.Time // nil: the Redis server's
}

// parse parses the command name's flags and arguments, anywhere on the
// line, with env's defaults.
func parse(name string, args []string, env func(string) string, stdout, stderr io.Writer) (*command, error) {
	want := map[string][2]int{"show": {1, 1}, "reset": {1, 2}, "check": {1, 1}}[name]
	if want[0] == 0 {
		fmt.Fprintf(stderr, "redlimit: unknown command %q\n%s", name, usage)
		return nil, errUsage
	}
	c := &command{name: name}
	fs := flag.NewFlagSet("redlimit "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.rules, "rules", env("REDLIMIT_RULES"), "the rules `file` the service loads (JSON); REDLIMIT_RULES")
	fs.Func("policy", "a policy of the service's code: NAME=LIMITS, or LIMITS for one named by its limits; repeatable",
		func(s string) error { c.policies = append(c.policies, s); return nil })
	fs.StringVar(&c.redisURL, "redis", env("REDIS_URL"), "the service's Redis, redis://host:port/db; REDIS_URL")
	fs.BoolVar(&c.cluster, "cluster", false, "-redis names a Redis Cluster (redis://host:port?addr=host2:port2)")
	fs.StringVar(&c.prefix, "prefix", "redlimit:", "the service's core.WithPrefix")
	fs.StringVar(&c.tier, "tier", "", "show the rules of this tier only (and the default's where it has none)")
	fs.BoolVar(&c.json, "json", false, "write JSON instead of a table")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "bound on each call to Redis")
	fs.Usage = func() {} // printed below, to the right place
	printUsage := func(w io.Writer) {
		fs.SetOutput(w)
		fmt.Fprintf(w, "%sflags of %s:\n", usage, name)
		fs.PrintDefaults()
	}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printUsage(stdout)
				return nil, err
			}
			printUsage(stderr)
			return nil, errUsage
		}
		if args = fs.Args(); len(args) == 0 {
			break
		}
		c.args, args = append(c.args, args[0]), args[1:] // an argument, and flags may follow
	}
	if len(c.args) < want[0] || len(c.args) > want[1] {
		fmt.Fprintf(stderr, "redlimit %s takes %s, not %d arguments\n", name, map[string]string{"show": "KEY", "reset": "KEY [RULE]", "check": "FILE"}[name], len(c.args))
		printUsage(stderr)
		return nil, errUsage
	}
	return c, nil
}

// connect returns a client of the service's Redis.
func (c *command) connect() (redis.UniversalClient, error) {
	if c.redisURL == "" {
		return nil, errors.New("no Redis given: set -redis or REDIS_URL to the Redis the service keeps its limits in")
	}
	if c.cluster {
		opts, err := redis.ParseClusterURL(c.redisURL)
		if err != nil {
			return nil, fmt.Errorf("-redis: %w", err)
		}
		return redis.NewClusterClient(opts), nil
	}
	opts, err := redis.ParseURL(c.redisURL)
	if err != nil {
		return nil, fmt.Errorf("-redis: %w", err)
	}
	return redis.NewClient(opts), nil
}

// limiter returns a Limiter on rdb that names state as the service's
// does, and makes every call wait for Redis's answer up to the timeout.
func (c *command) limiter(rdb redis.UniversalClient) *core.Limiter {
	return core.New(rdb, core.WithPrefix(c.prefix), core.WithTimeout(c.timeout),
		core.WithDenyCache(0), core.WithBreaker(0), core.WithClock(c.clock))
}

// where describes the Redis of c, without its password.
func (c *command) where() string {
	u := c.redisURL
	if at := strings.LastIndex(u, "@"); at >= 0 {
		if scheme := strings.Index(u, "://"); scheme >= 0 && scheme < at {
			u = u[:scheme+3] + u[at+1:]
		}
	}
	return u
}
