package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/redlimit/redlimit/bench/internal/harness"
	"github.com/redlimit/redlimit/core"
)

// summary is one row in one cell, medians over the rounds.
type summary struct {
	rate, ratio  float64
	cpuPerOp     float64 // µs; NaN where getrusage is missing
	allocsPerOp  float64
	p50, p99     time.Duration
	srvUsecPerOp float64 // NaN when too few scripts ran
	callsPerOp   float64
	errors       int64
	warmErrs     int64
	firstErr     error
}

// summarize takes the medians of row r's measurements in cell c; ok is
// false when r did not run there.
func (rep *report) summarize(r *row, c cell) (s summary, ok bool) {
	ms := rep.results[r][c]
	if len(ms) == 0 {
		return s, false
	}
	var rates, cpus, allocs, p50s, p99s, srv, calls []float64
	for _, m := range ms {
		rates = append(rates, m.rate())
		if m.cpu >= 0 {
			cpus = append(cpus, m.cpuPerOp())
		}
		ops := float64(max(m.ops, 1))
		allocs = append(allocs, float64(m.mallocs)/ops)
		p50s = append(p50s, float64(m.lat.Quantile(0.50)))
		p99s = append(p99s, float64(m.lat.Quantile(0.99)))
		if m.srvCalls >= minCalls {
			srv = append(srv, m.srvUsec/ops)
		}
		calls = append(calls, m.srvCalls/ops)
		s.errors += m.errors
		s.warmErrs += m.warmErrs
		if s.firstErr == nil {
			s.firstErr = m.firstErr
		}
	}
	s.rate, s.ratio = harness.Median(rates), harness.Median(rep.ratios[r][c])
	s.cpuPerOp, s.allocsPerOp = harness.Median(cpus), harness.Median(allocs)
	s.p50, s.p99 = time.Duration(harness.Median(p50s)), time.Duration(harness.Median(p99s))
	s.srvUsecPerOp, s.callsPerOp = harness.Median(srv), harness.Median(calls)
	return s, true
}

// minCalls is the fewest script calls whose server time is shown:
// one call descheduled on a busy machine can take milliseconds.
const minCalls = 100

// errors returns how many decisions failed or answered wrongly, in all.
func (rep *report) errors() int64 {
	var n int64
	for _, byCell := range rep.results {
		for _, ms := range byCell {
			for _, m := range ms {
				n += m.errors
			}
		}
	}
	return n
}

// heading describes the run, line by line.
func (rep *report) heading() []string {
	cfg := rep.cfg
	rounds := harness.Rounds(cfg.Rounds)
	return []string{
		fmt.Sprintf("redis-server %s on %s (loopback; the same machine), %s", rep.redisVersion, rep.addr, machine()),
		fmt.Sprintf("each row in each cell: %v measured after %v of warm-up; %s; rows run cell by cell, in alternating order; took %v",
			cfg.Duration, cfg.Warmup, rounds, rep.took.Round(time.Second)),
		fmt.Sprintf("every row: a fresh go-redis v9 client, PoolSize %d, on a flushed database; its first decision loads its scripts", cfg.poolSize()),
		fmt.Sprintf("throughput limits never deny: core.Limit{Rate: %d, Period: time.Second} (GCRA), redis_rate Rate=Burst=%d per second, ulule %d per second",
			cfg.rate(), cfg.rate(), cfg.rate()),
		"× EVALSHA: decisions/s over the evalsha row's in the same cell and round; CPU µs/op: user+system CPU time of",
		"this whole process per decision (getrusage RUSAGE_SELF over the measured interval: the callers' goroutines, go-redis's",
		"and the limiter's own, GC; not redis-server's); allocs/op: runtime.MemStats.Mallocs of the whole process per decision;",
		"p50, p99: latency of one decision; server µs/op, calls/op: EVALSHA and EVAL",
		fmt.Sprintf("in INFO commandstats after CONFIG RESETSTAT, per decision (µs only from %d calls on); errors: failed or wrong answers,", minCalls),
		fmt.Sprintf("warm-up included (redlimit's decisions time out after core.DefaultTimeout, %v; the peers wait as long as go-redis lets them)", core.DefaultTimeout),
	}
}

// legend describes every row that ran.
func (rep *report) legend() [][2]string {
	var out [][2]string
	for _, r := range rep.rows {
		out = append(out, [2]string{r.name, r.describe(rep.cfg)})
	}
	return out
}

var columns = []string{"keys", "goroutines", "row", "decisions/s", "× EVALSHA", "CPU µs/op", "allocs/op", "p50", "p99", "server µs/op", "calls/op", "errors"}

// tables returns, for each group that ran, its title and its lines of
// cells: the evalsha reference first in every cell, then the group's rows.
// When evalsha alone ran, it has a table of its own.
func (rep *report) tables() (titles []string, tables [][][]string) {
	alone := len(rep.rows) == 1
	for _, g := range groups {
		var lines [][]string
		for _, c := range rep.cells {
			rows := []*row{evalshaRow}
			for _, r := range rowsFor(rep.rows, c) {
				if r.group == g.name && r != evalshaRow {
					rows = append(rows, r)
				}
			}
			if len(rows) == 1 && !(alone && g.name == evalshaRow.group) {
				continue
			}
			for _, r := range rows {
				s, ok := rep.summarize(r, c)
				if !ok {
					continue
				}
				lines = append(lines, []string{
					strconv.Itoa(c.keys), strconv.Itoa(c.goroutines), r.name,
					harness.GroupDigits(s.rate), harness.FmtFloat(s.ratio, 2),
					harness.FmtFloat(s.cpuPerOp, 1), harness.FmtFloat(s.allocsPerOp, 1),
					harness.FmtDuration(s.p50), harness.FmtDuration(s.p99),
					harness.FmtFloat(s.srvUsecPerOp, 2), harness.FmtFloat(s.callsPerOp, 2), strconv.FormatInt(s.errors, 10),
				})
			}
		}
		if len(lines) > 0 {
			titles = append(titles, g.title)
			tables = append(tables, lines)
		}
	}
	return titles, tables
}

// failures lists the first error of every row and cell that had one.
func (rep *report) failures() []string {
	var out []string
	for _, r := range rep.rows {
		for _, c := range rep.cells {
			if s, ok := rep.summarize(r, c); ok && s.errors > 0 {
				out = append(out, fmt.Sprintf("%s, %d goroutines, %d keys: %d errors (%d during warm-up), first: %v",
					r.name, c.goroutines, c.keys, s.errors, s.warmErrs, s.firstErr))
			}
		}
	}
	return out
}

// writeText prints the report as fixed-width tables.
func (rep *report) writeText(w io.Writer) {
	for _, line := range rep.heading() {
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w, "\nrows:")
	for _, l := range rep.legend() {
		fmt.Fprintf(w, "  %-14s %s\n", l[0], l[1])
	}
	titles, tables := rep.tables()
	for i, lines := range tables {
		fmt.Fprintf(w, "\n%s\n", titles[i])
		// The row name left-aligned; an empty line between cells.
		harness.WriteTextTable(w, columns, lines, 2, func(i int) bool {
			return i > 0 && (lines[i][0] != lines[i-1][0] || lines[i][1] != lines[i-1][1])
		})
	}
	if f := rep.failures(); len(f) > 0 {
		fmt.Fprintln(w, "\nerrors:")
		for _, line := range f {
			fmt.Fprintln(w, "  "+line)
		}
	}
}

// writeMarkdown prints the report as Markdown tables, for a README.
func (rep *report) writeMarkdown(w io.Writer) {
	for _, line := range rep.heading() {
		fmt.Fprintf(w, "%s  \n", line)
	}
	fmt.Fprintln(w)
	for _, l := range rep.legend() {
		fmt.Fprintf(w, "- `%s`: %s\n", l[0], l[1])
	}
	titles, tables := rep.tables()
	for i, lines := range tables {
		fmt.Fprintf(w, "\n### %s\n\n", titles[i])
		md := make([][]string, len(lines))
		for j, l := range lines {
			md[j] = slices.Clone(l)
			md[j][2] = "`" + l[2] + "`" // the row name
		}
		harness.WriteMarkdownTable(w, columns, md, 2)
	}
	if f := rep.failures(); len(f) > 0 {
		fmt.Fprintln(w, "\nErrors:")
		for _, line := range f {
			fmt.Fprintln(w, "- "+line)
		}
	}
}
