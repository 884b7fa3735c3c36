// Command scriptcost counts the instructions redis-server spends on one
// call of redlimit's scripts, for every algorithm and the common shapes of
// a call (allowed, denied, a reservation, its settlement, several limits),
// under valgrind's callgrind: the same count on a busy machine as on an
// idle one, so that two versions of the scripts compare exactly.
//
//	cd bench && go run ./cmd/scriptcost                 # every row, about 5 minutes
//	go run ./cmd/scriptcost -rows='^gcra' -n=2000
//	../bench/scriptcost-all.sh OLD NEW                  # two checkouts side by side
//
// It drives the redlimit this module is built against (core.Limiter, no
// deny cache) on a plain redis-server and records the script calls each
// row's operations send (EVALSHA, its keys and ARGV: what the engine
// sends, in that version's wire format). Then it replays each row's last
// call on a redis-server run under callgrind: rows on many keys (allowed,
// a reservation, several limits) on -keys keys that each hold a state
// already (one call each first), rows on one key (denied, a settlement)
// after the row's other calls made its state; and it prints the
// instructions of 3n calls less those of n, per call. The server's
// instructions between calls (its cron) count too, as they would in
// service; they are a few per call.
package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/bench/internal/harness"
	"github.com/redlimit/redlimit/core"
)

func main() {
	redis.SetLogger(quiet{}) // the Limiter's goroutines redial the capture server after it stops
	harness.Main("scriptcost", run)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// call is one script call: the script's SHA, its keys and its ARGV.
type call struct {
	sha        string
	keys, args []string
}

// recorder is a go-redis hook that records the script calls a client sends.
type recorder struct {
	mu    sync.Mutex
	calls []call
	srcs  map[string]string // by SHA
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.see(cmd)
		return err
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			r.see(cmd)
		}
		return err
	}
}

func (r *recorder) see(cmd redis.Cmder) {
	var s []string
	for _, a := range cmd.Args() {
		s = append(s, fmt.Sprint(a))
	}
	if len(s) < 3 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	name := strings.ToLower(s[0])
	if name == "script" && strings.ToLower(s[1]) == "load" {
		r.srcs[sha(s[2])] = s[2]
		return
	}
	if name != "eval" && name != "evalsha" || cmd.Err() != nil && strings.HasPrefix(cmd.Err().Error(), "NOSCRIPT") {
		return
	}
	id := s[1]
	if name == "eval" {
		id = sha(s[1])
		r.srcs[id] = s[1]
	}
	n, _ := strconv.Atoi(s[2])
	r.calls = append(r.calls, call{sha: id, keys: s[3 : 3+n], args: s[3+n:]})
}

func sha(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

// variant is one algorithm as a Limit: the limit of the allowed rows, of
// the denied rows, and a second limit for the rows of two limits.
type variant struct {
	name               string
	allow, deny, other core.Limit
}

func variants() []variant {
	var out []variant
	add := func(name string, alg core.Algorithm, set func(*core.Limit)) {
		v := variant{name: name,
			allow: core.Limit{Algorithm: alg, Rate: 1000, Period: time.Hour},
			deny:  core.Limit{Algorithm: alg, Rate: 1, Period: time.Hour},
			other: core.Limit{Algorithm: alg, Rate: 5000, Period: 24 * time.Hour}}
		if set != nil {
			set(&v.allow)
			set(&v.deny)
			set(&v.other)
		}
		out = append(out, v)
	}
	add("gcra", core.GCRA, nil)
	add("token_bucket", core.TokenBucket, nil)
	add("token_bucket stepped", core.TokenBucket, func(l *core.Limit) { l.Stepped = true })
	add("leaky_bucket", core.LeakyBucket, nil)
	add("leaky_bucket shape", core.LeakyBucket, func(l *core.Limit) { l.Shape = true })
	add("fixed_window", core.FixedWindow, nil)
	add("fixed_window calendar", core.FixedWindow, func(l *core.Limit) {
		l.Calendar = "UTC"
		if l.Period == time.Hour {
			l.Period = 24 * time.Hour
		} else {
			l.Period = 7 * 24 * time.Hour
		}
	})
	add("sliding_window", core.SlidingWindow, nil)
	add("sliding_log", core.SlidingLog, nil)
	add("concurrency", core.Concurrency, nil)
	return out
}

// row is one line of the table: the calls its operations sent, of which
// the last is measured, on many keys or on the one key of the others.
type row struct {
	name  string
	calls []call
	many  bool
	err   error
}

// capture runs each row's operations on the key "u" of a fresh database
// and records their calls.
func capture(ctx context.Context, addr string, only *regexp.Regexp) ([]row, map[string]string, error) {
	rec := &recorder{srcs: map[string]string{}}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	rdb.AddHook(rec)
	l := core.New(rdb, core.WithDenyCache(0), core.WithTimeout(10*time.Second))
	var rows []row
	op := func(name string, many bool, f func() error) {
		if !only.MatchString(name) {
			return
		}
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			rows = append(rows, row{name: name, err: err})
			return
		}
		rec.mu.Lock()
		rec.calls = nil
		rec.mu.Unlock()
		err := f()
		rec.mu.Lock()
		calls := rec.calls
		rec.mu.Unlock()
		if err == nil && len(calls) == 0 {
			err = errors.New("no script call")
		}
		rows = append(rows, row{name: name, calls: calls, many: many, err: err})
	}
	// decide makes one decision, with AllowAll, or with Reserve for a
	// limit that holds slots (concurrency: AllowN refuses it).
	decide := func(limits ...core.Limit) (bool, error) {
		if limits[0].Algorithm == core.Concurrency {
			rsv, err := l.Reserve(ctx, "u", limits, 1)
			if err != nil {
				return false, err
			}
			return rsv.Result().Allowed, nil
		}
		res, err := l.AllowAll(ctx, "u", limits, 1)
		return res.Allowed, err
	}
	expect := func(allowed bool, err error, want bool) error {
		if err == nil && allowed != want {
			err = fmt.Errorf("allowed %v, want %v", allowed, want)
		}
		return err
	}
	for _, v := range variants() {
		op(v.name+" allowed", true, func() error {
			allowed, err := decide(v.allow)
			return expect(allowed, err, true)
		})
		op(v.name+" denied", false, func() error {
			if _, err := decide(v.deny); err != nil {
				return err
			}
			allowed, err := decide(v.deny)
			return expect(allowed, err, false)
		})
		op(v.name+" reserve", true, func() error {
			_, err := l.Reserve(ctx, "u", []core.Limit{v.allow}, 1)
			return err
		})
		op(v.name+" settle (refund)", false, func() error {
			rsv, err := l.Reserve(ctx, "u", []core.Limit{v.allow}, 1)
			if err != nil {
				return err
			}
			return rsv.Settle(ctx, 0)
		})
		op(v.name+" 2 limits", true, func() error {
			allowed, err := decide(v.allow, v.other)
			return expect(allowed, err, true)
		})
	}
	op("3 algorithms (all)", true, func() error {
		allowed, err := decide(variants()[0].allow, variants()[5].other, variants()[7].other)
		return expect(allowed, err, true)
	})
	return rows, rec.srcs, nil
}

// server is a redis-server under callgrind.
type server struct {
	cmd  *exec.Cmd
	rdb  *redis.Client
	out  string
	done chan struct{}
}

func startCallgrind(ctx context.Context, bin string) (*server, error) {
	ports, err := harness.FreePorts(1)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "scriptcost-")
	if err != nil {
		return nil, err
	}
	s := &server{out: dir, done: make(chan struct{})}
	s.cmd = exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+dir+"/callgrind.out",
		bin, "--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir)
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("valgrind is needed: %w", err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	s.rdb = redis.NewClient(&redis.Options{Addr: harness.Loopback(ports[0]), ReadTimeout: time.Minute})
	for i := 0; ; i++ {
		if s.rdb.Ping(ctx).Err() == nil {
			return s, nil
		}
		if i == 300 {
			s.stop()
			return nil, errors.New("redis-server under callgrind did not answer")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *server) stop() {
	s.rdb.Close()
	s.cmd.Process.Kill()
	<-s.done
	os.RemoveAll(s.out)
}

// control runs callgrind_control with args on the server and returns the
// sum of the instruction counters it prints (with -e).
func (s *server) control(args ...string) (int64, error) {
	out, err := exec.Command("callgrind_control", append(args, strconv.Itoa(s.cmd.Process.Pid))...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("callgrind_control %v: %v: %s", args, err, out)
	}
	var total int64
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "Th" {
			n, err := strconv.ParseInt(strings.ReplaceAll(f[2], ",", ""), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("callgrind_control: %q", line)
			}
			total += n
		}
	}
	return total, nil
}

// measure replays r's last call: instructions per call, and its last reply.
func (s *server) measure(ctx context.Context, r row, srcs map[string]string, n, keys int) (int64, string, error) {
	// Only the row's scripts: the server's Lua collector walks every
	// loaded script's code (a step every 50 calls), so each one costs.
	if err := s.rdb.FlushAll(ctx).Err(); err != nil {
		return 0, "", err
	}
	if err := s.rdb.ScriptFlush(ctx).Err(); err != nil {
		return 0, "", err
	}
	for _, c := range r.calls {
		if err := s.rdb.ScriptLoad(ctx, srcs[c.sha]).Err(); err != nil {
			return 0, "", fmt.Errorf("SCRIPT LOAD %s: %w", c.sha, err)
		}
	}
	var reply any
	do := func(c call, key int) error {
		args := []any{"EVALSHA", c.sha, len(c.keys)}
		for _, k := range c.keys {
			if key >= 0 {
				k = strings.Replace(k, "{u}", "{u"+strconv.Itoa(key)+"}", 1)
			}
			args = append(args, k)
		}
		for _, a := range c.args {
			args = append(args, a)
		}
		var err error
		reply, err = s.rdb.Do(ctx, args...).Result()
		return err
	}
	last := r.calls[len(r.calls)-1]
	for _, c := range r.calls[:len(r.calls)-1] {
		if err := do(c, -1); err != nil {
			return 0, "", err
		}
	}
	if r.many {
		for k := range keys {
			if err := do(last, k); err != nil {
				return 0, "", err
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	count := func(calls int) (int64, error) {
		if _, err := s.control("-z"); err != nil {
			return 0, err
		}
		for range calls {
			key := -1
			if r.many {
				key = rng.IntN(keys)
			}
			if err := do(last, key); err != nil {
				return 0, err
			}
		}
		return s.control("-e")
	}
	a, err := count(n)
	if err != nil {
		return 0, "", err
	}
	b, err := count(3 * n)
	if err != nil {
		return 0, "", err
	}
	return (b - a) / int64(2*n), fmt.Sprint(reply), nil
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scriptcost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rows := fs.String("rows", "", "measure only the rows whose name matches this regular expression")
	n := fs.Int("n", 1000, "the count is that of 3n calls less that of n, per call")
	keys := fs.Int("keys", 2000, "keys of the rows on many keys")
	bin := fs.String("redis-server", "redis-server", "the redis-server binary")
	verbose := fs.Bool("v", false, "print each row's last reply and call too")
	if err := harness.Parse(fs, args); err != nil {
		return err
	}
	only, err := regexp.Compile(*rows)
	if err != nil {
		return err
	}
	ctx := context.Background()
	addr, stop, err := harness.StartRedis(*bin, "")
	if err != nil {
		return err
	}
	captured, srcs, err := capture(ctx, addr, only)
	stop()
	if err != nil {
		return err
	}
	s, err := startCallgrind(ctx, *bin)
	if err != nil {
		return err
	}
	defer s.stop()
	for _, r := range captured {
		if r.err != nil {
			fmt.Fprintf(stdout, "%s\t-\t%v\n", r.name, r.err)
			continue
		}
		per, reply, err := s.measure(ctx, r, srcs, *n, *keys)
		if err != nil {
			fmt.Fprintf(stdout, "%s\t-\t%v\n", r.name, err)
			continue
		}
		fmt.Fprintf(stdout, "%s\t%d", r.name, per)
		if *verbose {
			last := r.calls[len(r.calls)-1]
			fmt.Fprintf(stdout, "\t%s\t%q %q", reply, last.keys, last.args)
		}
		fmt.Fprintln(stdout)
	}
	return nil
}
