package main

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlimit/redlimit/bench/internal/harness"
)

// report holds every measurement of a run.
type report struct {
	cfg          config
	ref, other   *server
	cells        []cell
	results      map[*server]map[cell][]measurement
	exact        map[*server][]exactResult
	notes        []string
	profiles     []string
	redisVersion string
	took         time.Duration
}

func newReport(cfg config, ref, other *server) *report {
	rep := &report{
		cfg: cfg, ref: ref, other: other, cells: cells(cfg),
		results: map[*server]map[cell][]measurement{ref: {}, other: {}},
		exact:   map[*server][]exactResult{},
	}
	for _, s := range []*server{ref, other} {
		if s.memKind == "" {
			rep.notes = append(rep.notes, s.name+": no allocation counter answered (neither /debug/vars nor /metrics' go_memstats_mallocs_total): allocs not measured")
		}
	}
	return rep
}

func (rep *report) add(s *server, c cell, m measurement) {
	rep.results[s][c] = append(rep.results[s][c], m)
}

// summary is one server in one cell, medians over the rounds.
type summary struct {
	rate, ratio      float64
	ratioLo, ratioHi float64 // the lowest and highest ratio of the rounds
	allocs           float64 // per call, NaN when not measured
	srvUsec, srvCmds float64 // Redis commandstats per call
	cpuUsec          float64 // redis-server CPU µs per call
	procUsec         float64 // the server process's CPU µs per call, NaN when not measured
	p50, p99         time.Duration
	errs, denied     int64 // in the measurements and warm-ups
	firstErr         error
	breakdown        string // Redis commands per call, first round
}

func (rep *report) summarize(s *server, c cell) (sum summary, ok bool) {
	ms := rep.results[s][c]
	if len(ms) == 0 {
		return sum, false
	}
	refs := rep.results[rep.ref][c]
	var rates, ratios, allocs, srv, cmds, cpu, proc, p50, p99 []float64
	for i, m := range ms {
		calls := float64(max(m.load.calls, 1))
		rates = append(rates, m.load.rate())
		if i < len(refs) && refs[i].load.rate() > 0 {
			ratios = append(ratios, m.load.rate()/refs[i].load.rate())
		}
		if m.mallocsOK {
			allocs = append(allocs, float64(m.mallocs)/calls)
		}
		if m.procCPUOK {
			proc = append(proc, float64(m.procCPU.Microseconds())/calls)
		}
		srv = append(srv, m.srvUsec/calls)
		cmds = append(cmds, float64(m.srvCalls)/calls)
		cpu = append(cpu, m.cpuSec*1e6/calls)
		p50 = append(p50, float64(m.load.lat.Quantile(0.5)))
		p99 = append(p99, float64(m.load.lat.Quantile(0.99)))
		for _, l := range []*load{m.load, m.warm} {
			if l == nil {
				continue
			}
			sum.errs += l.errs
			sum.denied += l.over
			if sum.firstErr == nil {
				sum.firstErr = l.firstErr
			}
		}
		if m.mallocsErr != nil && sum.firstErr == nil {
			sum.firstErr = fmt.Errorf("allocations: %w", m.mallocsErr)
		}
	}
	sum.rate, sum.ratio, sum.allocs = harness.Median(rates), harness.Median(ratios), harness.Median(allocs)
	sum.ratioLo, sum.ratioHi = math.NaN(), math.NaN()
	if len(ratios) > 0 {
		sum.ratioLo, sum.ratioHi = slices.Min(ratios), slices.Max(ratios)
	}
	sum.srvUsec, sum.srvCmds, sum.cpuUsec, sum.procUsec = harness.Median(srv), harness.Median(cmds), harness.Median(cpu), harness.Median(proc)
	sum.p50, sum.p99 = time.Duration(harness.Median(p50)), time.Duration(harness.Median(p99))
	sum.breakdown = breakdown(ms[0].cmds, ms[0].load.calls)
	return sum, true
}

// errors counts failed calls and denials in the throughput cells, where
// the limit never denies.
func (rep *report) errors() int64 {
	var n int64
	for _, s := range []*server{rep.ref, rep.other} {
		for _, c := range rep.cells {
			if sum, ok := rep.summarize(s, c); ok {
				n += sum.errs + sum.denied
			}
		}
	}
	return n
}

var columns = []string{"values", "callers", "server", "calls/s", "× reference", "rounds' ×", "CPU µs/call", "allocs/call",
	"Redis µs/call", "Redis cmds/call", "Redis CPU µs/call", "p50", "p99", "errors"}

func (rep *report) lines() [][]string {
	var out [][]string
	for _, c := range rep.cells {
		for _, s := range []*server{rep.ref, rep.other} {
			sum, ok := rep.summarize(s, c)
			if !ok {
				continue
			}
			out = append(out, []string{
				strconv.Itoa(c.values), strconv.Itoa(c.callers), s.name,
				harness.GroupDigits(sum.rate), harness.FmtFloat(sum.ratio, 2), fmtRange(sum.ratioLo, sum.ratioHi), harness.FmtFloat(sum.procUsec, 1), harness.FmtFloat(sum.allocs, 1),
				harness.FmtFloat(sum.srvUsec, 2), harness.FmtFloat(sum.srvCmds, 2), harness.FmtFloat(sum.cpuUsec, 2),
				harness.FmtDuration(sum.p50), harness.FmtDuration(sum.p99), strconv.FormatInt(sum.errs+sum.denied, 10),
			})
		}
	}
	return out
}

func (rep *report) heading() []string {
	cfg := rep.cfg
	rounds := harness.Rounds(cfg.Rounds)
	alloc := func(s *server) string {
		if s.memKind == "" {
			return s.name + ": not measured"
		}
		u := strings.TrimPrefix(s.memURL, "http://")
		if i := strings.IndexByte(u, '/'); i >= 0 {
			u = u[i:]
		}
		return s.name + ": " + u
	}
	return []string{
		fmt.Sprintf("redis-server %s on loopback, the same machine; client: %s, GOMAXPROCS=%d, %d CPUs",
			rep.redisVersion, runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU()),
		fmt.Sprintf("each server in each cell: %v measured (at most %d calls) after %v of warm-up on a flushed Redis; %s; the servers alternate; took %v",
			cfg.Duration, cfg.MaxCalls, cfg.Warmup, rounds, rep.took.Round(time.Second)),
		fmt.Sprintf("ShouldRateLimit, domain %q, one descriptor {%s: uN}, limit %d a minute (never denies); %d gRPC connections per server",
			benchDomain, userKey, never, cfg.Conns),
		"× reference: calls/s over the reference's in the same cell and round (median; rounds' ×: lowest–highest);",
		"CPU µs/call: the server process's user+system time (/proc, 10 ms ticks) per call;",
		"allocs/call: its runtime Mallocs per call (" + alloc(rep.ref) + ", " + alloc(rep.other) + ");",
		"Redis µs/call, cmds/call: INFO commandstats after CONFIG RESETSTAT (scripts' time only when scripts ran, since",
		"the commands inside are counted twice); Redis CPU µs/call: redis-server's used_cpu_user+sys (I/O included)",
	}
}

func (rep *report) exactLines() []string {
	cfg := rep.cfg
	if cfg.ExactRequests <= 0 {
		return nil
	}
	out := []string{fmt.Sprintf("exactness: %d requests for one value limited to %d a minute, from %d callers, on a flushed Redis; OK answers per round:",
		cfg.ExactRequests, cfg.ExactLimit, cfg.ExactCallers)}
	costs := false
	for _, s := range []*server{rep.ref, rep.other} {
		var parts []string
		for _, e := range rep.exact[s] {
			parts = append(parts, exactPart(e.load, e.load.ok, e.crossed))
			costs = costs || e.costs != nil
		}
		out = append(out, fmt.Sprintf("  %-14s %s", s.name, strings.Join(parts, ", ")))
	}
	if costs {
		out = append(out, rep.costLines()...)
	}
	edge := false
	for _, e := range rep.exact[rep.ref] {
		edge = edge || e.edge != nil
	}
	if edge {
		out = append(out, fmt.Sprintf("then 1 s of requests from %d callers, from half a second before a minute of the wall clock begins; OK answers per round (of all):",
			cfg.ExactCallers))
		for _, s := range []*server{rep.ref, rep.other} {
			var parts []string
			for _, e := range rep.exact[s] {
				if e.edge != nil {
					parts = append(parts, exactPart(e.edge, e.edge.ok, false)+fmt.Sprintf(" (%d)", e.edge.calls))
				}
			}
			out = append(out, fmt.Sprintf("  %-14s %s", s.name, strings.Join(parts, ", ")))
		}
	}
	return out
}

func (rep *report) costLines() []string {
	cfg := rep.cfg
	var out []string
	out = append(out, fmt.Sprintf("then %d requests of hits_addend 1, 2, … %d in turn; hits admitted per round (OK answers), at most the limit:",
		cfg.ExactRequests, cfg.ExactMaxHits))
	for _, s := range []*server{rep.ref, rep.other} {
		var parts []string
		for _, e := range rep.exact[s] {
			if e.costs != nil {
				parts = append(parts, exactPart(e.costs, e.costs.okHits, e.crossed)+fmt.Sprintf(" (%d)", e.costs.ok))
			}
		}
		out = append(out, fmt.Sprintf("  %-14s %s", s.name, strings.Join(parts, ", ")))
	}
	return out
}

func exactPart(l *load, n int64, crossed bool) string {
	p := strconv.FormatInt(n, 10)
	if l.errs > 0 {
		p += fmt.Sprintf(" [%d errors: %v]", l.errs, l.firstErr)
	}
	if crossed {
		p += " [crossed a minute]"
	}
	return p
}

func (rep *report) tail() []string {
	var out []string
	out = append(out, rep.exactLines()...)
	out = append(out, "Redis commands per call (first round): ×calls/µs")
	for _, c := range rep.cells {
		for _, s := range []*server{rep.ref, rep.other} {
			if sum, ok := rep.summarize(s, c); ok {
				out = append(out, fmt.Sprintf("  %5d values %3d callers %-14s %s", c.values, c.callers, s.name, sum.breakdown))
			}
		}
	}
	for _, c := range rep.cells {
		for _, s := range []*server{rep.ref, rep.other} {
			if sum, ok := rep.summarize(s, c); ok && sum.firstErr != nil {
				out = append(out, fmt.Sprintf("%s, %d values, %d callers: %d errors, %d denied, first: %v",
					s.name, c.values, c.callers, sum.errs, sum.denied, sum.firstErr))
			}
		}
	}
	if len(rep.profiles) > 0 {
		out = append(out, "CPU profiles (go tool pprof -top FILE):")
		for _, p := range rep.profiles {
			out = append(out, "  "+p)
		}
	}
	return append(out, rep.notes...)
}

func (rep *report) writeText(w io.Writer) {
	for _, l := range rep.heading() {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
	// The server's name left-aligned; an empty line between cells (two
	// servers each).
	harness.WriteTextTable(w, columns, rep.lines(), 2, func(i int) bool { return i > 0 && i%2 == 0 })
	fmt.Fprintln(w)
	for _, l := range rep.tail() {
		fmt.Fprintln(w, l)
	}
}

func (rep *report) writeMarkdown(w io.Writer) {
	for _, l := range rep.heading() {
		fmt.Fprintf(w, "%s  \n", l)
	}
	fmt.Fprintln(w)
	harness.WriteMarkdownTable(w, columns, rep.lines(), 2)
	fmt.Fprintln(w)
	for _, l := range rep.tail() {
		fmt.Fprintf(w, "%s  \n", l)
	}
}

// fmtRange prints "lo–hi" with two decimals, "-" for NaN.
func fmtRange(lo, hi float64) string {
	if math.IsNaN(lo) || math.IsNaN(hi) {
		return "-"
	}
	return harness.FmtFloat(lo, 2) + "–" + harness.FmtFloat(hi, 2)
}
