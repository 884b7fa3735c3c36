package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/bench/internal/harness"
	"github.com/redlimit/redlimit/internal/redistest"
)

// config says what to measure and for how long.
type config struct {
	// Duration is the measured time of each row in each cell.
	Duration time.Duration
	// Warmup is the unmeasured traffic before each measurement: it dials
	// the pool's connections and warms the caches.
	Warmup time.Duration
	// Goroutines and Keys span the matrix of cells.
	Goroutines, Keys []int
	// Only selects rows, by row or group name; empty means all. The
	// evalsha row always runs, as the reference.
	Only []string
	// Rounds repeats the matrix; the report shows medians.
	Rounds int
	// PoolSize is the go-redis PoolSize of every client; 0 means the most
	// goroutines, and at least go-redis's default (10 per GOMAXPROCS).
	PoolSize int
	// Rate is the events per second the throughput rows' limits allow
	// each key, with a burst of as many: enough never to deny. 0 means
	// defaultRate.
	Rate int
	// Progress, when not nil, receives a line per measurement.
	Progress io.Writer
}

// defaultConfig is the whole matrix, about one and a half minutes per round.
func defaultConfig() config {
	return config{
		Duration:   1500 * time.Millisecond,
		Warmup:     200 * time.Millisecond,
		Goroutines: []int{1, 16, 128},
		Keys:       []int{1, 10_000},
		Rounds:     1,
	}
}

// validate checks the config's values and names.
func (c config) validate() error {
	switch {
	case c.Duration <= 0:
		return errors.New("-duration must be positive")
	case c.Warmup < 0:
		return errors.New("-warmup must not be negative")
	case c.Rounds < 1:
		return errors.New("-rounds must be at least 1")
	case c.PoolSize < 0:
		return errors.New("-pool must not be negative")
	case c.Rate < 0 || c.Rate > 1<<32-1:
		return errors.New("-rate must be 1 to 4294967295 (0: the default), as a core.Limit's Rate")
	case len(c.Goroutines) == 0 || len(c.Keys) == 0:
		return errors.New("need at least one goroutine count and one key count")
	}
	for _, name := range c.Only {
		if !slices.Contains(rowNames(), name) && !slices.Contains(groupNames(), name) {
			return fmt.Errorf("-only: unknown row or group %q; rows: %s; groups: %s",
				name, strings.Join(rowNames(), ", "), strings.Join(groupNames(), ", "))
		}
	}
	return nil
}

// poolSize is the PoolSize every client gets.
func (c config) poolSize() int {
	if c.PoolSize > 0 {
		return c.PoolSize
	}
	return max(slices.Max(c.Goroutines), 10*runtime.GOMAXPROCS(0))
}

// selected returns the rows to run, in table order; evalsha first, always.
func (c config) selected() []*row {
	var out []*row
	for _, r := range allRows {
		if r == evalshaRow || len(c.Only) == 0 ||
			slices.Contains(c.Only, r.name) || slices.Contains(c.Only, r.group) {
			out = append(out, r)
		}
	}
	return out
}

// cell is one point of the matrix.
type cell struct {
	goroutines, keys int
}

// measurement is what one row did in one cell in one round.
type measurement struct {
	ops      int64         // decisions started while measuring
	elapsed  time.Duration // from the start of measuring until every goroutine stopped
	mallocs  uint64        // heap allocations meanwhile, the whole process
	cpu      time.Duration // user+system CPU time of the whole process meanwhile; -1 if unknown
	lat      *harness.Hist // latency of each decision
	srvUsec  float64       // server time in EVALSHA and EVAL
	srvCalls float64       // EVALSHA and EVAL calls
	errors   int64         // failed decisions and wrong answers, warm-up included
	warmErrs int64         // those of them started during warm-up
	firstErr error
}

// cpuPerOp returns the process's CPU time per decision in µs, NaN if
// unknown.
func (m *measurement) cpuPerOp() float64 {
	if m.cpu < 0 {
		return math.NaN()
	}
	return float64(m.cpu) / float64(time.Microsecond) / float64(max(m.ops, 1))
}

func (m *measurement) rate() float64 {
	if m.elapsed <= 0 {
		return 0
	}
	return float64(m.ops) / m.elapsed.Seconds()
}

// report is the outcome of a run: every measurement of every selected row
// in every cell, per round.
type report struct {
	cfg          config
	addr         string
	redisVersion string
	rows         []*row
	cells        []cell
	results      map[*row]map[cell][]*measurement
	ratios       map[*row]map[cell][]float64 // to evalsha in the same round
	took         time.Duration
}

// run measures every selected row in every cell on the Redis at addr,
// Rounds times. Each cell runs every row before the next cell starts, in an
// order that alternates, so that the machine's noise hits all rows alike.
// Each measurement gets a fresh go-redis client and limiter, on a flushed
// database.
func run(ctx context.Context, cfg config, addr string) (*report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	begin := time.Now()
	admin := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer admin.Close()
	version, err := harness.RedisVersion(ctx, admin)
	if err != nil {
		return nil, err
	}
	if version == "" {
		version = "unknown"
	}
	rep := newReport(cfg, addr, version)
	total, done := 0, 0
	for _, c := range rep.cells {
		total += cfg.Rounds * len(rowsFor(rep.rows, c))
	}
	keysets := map[int]*keyset{}
	for round := 0; round < cfg.Rounds; round++ {
		for ci, c := range rep.cells {
			if keysets[c.keys] == nil {
				keysets[c.keys] = newKeyset(c.keys)
			}
			rows := rowsFor(rep.rows, c)
			if (round+ci)%2 == 1 {
				slices.Reverse(rows)
			}
			got := map[*row]*measurement{}
			for _, r := range rows {
				m, err := measureRow(ctx, cfg, addr, admin, r, c, keysets[c.keys])
				if err != nil {
					return nil, fmt.Errorf("%s, %d goroutines, %d keys: %w", r.name, c.goroutines, c.keys, err)
				}
				got[r] = m
				done++
				if cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "[%d/%d] round %d, %3d goroutines, %5d keys: %-13s %12s/s  %d errors\n",
						done, total, round+1, c.goroutines, c.keys, r.name, harness.GroupDigits(m.rate()), m.errors)
				}
			}
			rep.add(c, got)
		}
	}
	rep.took = time.Since(begin)
	return rep, nil
}

// newReport returns an empty report of cfg's rows and cells.
func newReport(cfg config, addr, version string) *report {
	rep := &report{cfg: cfg, addr: addr, redisVersion: version, rows: cfg.selected(),
		results: map[*row]map[cell][]*measurement{}, ratios: map[*row]map[cell][]float64{}}
	for _, k := range cfg.Keys {
		for _, g := range cfg.Goroutines {
			rep.cells = append(rep.cells, cell{goroutines: g, keys: k})
		}
	}
	for _, r := range rep.rows {
		rep.results[r] = map[cell][]*measurement{}
		rep.ratios[r] = map[cell][]float64{}
	}
	return rep
}

// add records one round of cell c: each row's measurement, and its ratio
// to the evalsha row's.
func (rep *report) add(c cell, got map[*row]*measurement) {
	ref := got[evalshaRow]
	for r, m := range got {
		rep.results[r][c] = append(rep.results[r][c], m)
		if ref != nil && ref.rate() > 0 {
			rep.ratios[r][c] = append(rep.ratios[r][c], m.rate()/ref.rate())
		}
	}
}

// rowsFor returns the rows that run in cell c, in table order.
func rowsFor(rows []*row, c cell) []*row {
	var out []*row
	for _, r := range rows {
		if !r.hotOnly || c.keys == 1 {
			out = append(out, r)
		}
	}
	return out
}

// measureRow sets up row r on a fresh client over a flushed database and
// measures it in cell c.
func measureRow(ctx context.Context, cfg config, addr string, admin *redis.Client, r *row, c cell, ks *keyset) (*measurement, error) {
	if err := admin.FlushDB(ctx).Err(); err != nil {
		return nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: cfg.poolSize(), ContextTimeoutEnabled: r.contextTimeouts})
	defer rdb.Close()
	env := &env{ctx: ctx, rdb: rdb, keys: ks, poolSize: cfg.poolSize(), rate: cfg.rate()}
	o, err := r.setup(env)
	if err != nil {
		return nil, fmt.Errorf("setting up: %w", err)
	}
	runtime.GC() // start every row with the previous rows' garbage collected
	m, err := measure(ctx, admin, o, r.want, c, cfg.Warmup, cfg.Duration)
	if err != nil {
		return nil, err
	}
	if n, first := env.errs.get(); n > 0 {
		m.errors += n
		if m.firstErr == nil {
			m.firstErr = first
		}
	}
	return m, nil
}

// op makes one decision on the key numbered key and reports whether it was
// allowed.
type op func(ctx context.Context, key int) (allowed bool, err error)

// worker is one goroutine's tally, allocated apart so that goroutines do
// not share cache lines.
type worker struct {
	lat      harness.Hist
	ops      int64
	errors   int64
	warmErrs int64
	firstErr error
}

// The phases of a measurement.
const (
	warming int32 = iota
	measuring
	stopped
)

// run makes decisions with o until phase says stop, cycling through keys
// from key on. A decision counts when it started while measuring; one that
// fails, or whose answer is not want, is an error.
func (w *worker) run(ctx context.Context, o op, want bool, phase *atomic.Int32, key, keys int) {
	for {
		p := phase.Load()
		if p == stopped {
			return
		}
		start := time.Now()
		allowed, err := o(ctx, key)
		d := time.Since(start)
		if err == nil && allowed != want {
			err = fmt.Errorf("allowed = %v, want %v", allowed, want)
		}
		if err != nil {
			w.errors++
			if p == warming {
				w.warmErrs++
			}
			if w.firstErr == nil {
				w.firstErr = err
			}
		}
		if p == measuring {
			w.ops++
			w.lat.Add(d)
		}
		if key++; key == keys {
			key = 0
		}
	}
}

// measure runs o from c.goroutines workers, each starting at its own
// offset in the keys: unmeasured for warmup, then measured for duration.
func measure(ctx context.Context, admin *redis.Client, o op, want bool, c cell, warmup, duration time.Duration) (*measurement, error) {
	var phase atomic.Int32
	var wg sync.WaitGroup
	workers := make([]*worker, c.goroutines)
	for i := range workers {
		w := new(worker)
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx, o, want, &phase, i*c.keys/c.goroutines, c.keys)
		}()
	}

	sleep(ctx, warmup)
	var before, after runtime.MemStats
	phase.Store(measuring)
	start, cpuStart := time.Now(), processCPU()
	runtime.ReadMemStats(&before)
	resetErr := admin.ConfigResetStat(ctx).Err()
	sleep(ctx, duration)
	phase.Store(stopped)
	wg.Wait()
	elapsed, cpuEnd := time.Since(start), processCPU()
	runtime.ReadMemStats(&after)
	m := &measurement{elapsed: elapsed, mallocs: after.Mallocs - before.Mallocs, cpu: -1, lat: new(harness.Hist)}
	if cpuStart >= 0 && cpuEnd >= 0 {
		m.cpu = cpuEnd - cpuStart
	}

	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if resetErr != nil {
		return nil, fmt.Errorf("CONFIG RESETSTAT: %w", resetErr)
	}
	stats, err := redistest.CommandStats(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	for _, cmd := range []string{"evalsha", "eval"} {
		m.srvUsec += stats[cmd].Usec
		m.srvCalls += stats[cmd].Calls
	}
	for _, w := range workers {
		m.ops += w.ops
		m.lat.Merge(&w.lat)
		m.errors += w.errors
		m.warmErrs += w.warmErrs
		if m.firstErr == nil {
			m.firstErr = w.firstErr
		}
	}
	return m, nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// keyset holds the keys of a cell, built once: names for the limiters,
// one-key slices for EVALSHA and one request per key (its RemoteAddr the
// key) for the middleware. Requests are shared by the goroutines, which
// only read them.
type keyset struct {
	names    []string
	evalKeys [][]string
	requests []*http.Request
}

func newKeyset(n int) *keyset {
	ks := &keyset{names: make([]string, n), evalKeys: make([][]string, n), requests: make([]*http.Request, n)}
	for i := range n {
		ks.names[i] = fmt.Sprintf("user:%d", i)
		ks.evalKeys[i] = []string{"bare:" + ks.names[i]}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:40000", i>>16&255, i>>8&255, i&255)
		ks.requests[i] = r
	}
	return ks
}

// env is what a row's setup gets: a fresh client and the cell's keys.
type env struct {
	ctx      context.Context
	rdb      *redis.Client
	keys     *keyset
	poolSize int
	rate     int // config.Rate, or defaultRate
	errs     errSink
}

// errSink counts errors reported out of band, such as those a fail-open
// middleware passes to its error handler while the request succeeds.
type errSink struct {
	n     atomic.Int64
	first atomic.Pointer[error]
}

func (s *errSink) add(err error) {
	s.n.Add(1)
	s.first.CompareAndSwap(nil, &err)
}

func (s *errSink) get() (int64, error) {
	var first error
	if p := s.first.Load(); p != nil {
		first = *p
	}
	return s.n.Load(), first
}
