package main

// Old against new: -tsv appends every measurement of a run to a file, and
// -ab prints the medians of two such files side by side. abrun.sh builds
// this program against two checkouts of redlimit and alternates them.

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/redlimit/redlimit/bench/internal/harness"
)

// tsvColumns head a -tsv file: one line per row, cell and round. The
// ratios are to the evalsha row in the same cell and round.
var tsvColumns = []string{"round", "keys", "goroutines", "row", "decisions/s", "x_evalsha",
	"cpu_us/op", "cpu_x_evalsha", "allocs/op", "p50_us", "p99_us", "server_us/op", "calls/op", "errors"}

// writeTSV prints a header line and then every measurement of the run.
func (rep *report) writeTSV(w io.Writer) {
	fmt.Fprintln(w, strings.Join(tsvColumns, "\t"))
	num := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	for _, c := range rep.cells {
		refs := rep.results[evalshaRow][c]
		for _, r := range rowsFor(rep.rows, c) {
			for i, m := range rep.results[r][c] {
				ratio, cpuRatio := math.NaN(), math.NaN()
				if i < len(refs) {
					ratio, cpuRatio = m.rate()/refs[i].rate(), m.cpuPerOp()/refs[i].cpuPerOp()
				}
				ops := float64(max(m.ops, 1))
				fmt.Fprintln(w, strings.Join([]string{
					strconv.Itoa(i + 1), strconv.Itoa(c.keys), strconv.Itoa(c.goroutines), r.name,
					num(m.rate()), num(ratio), num(m.cpuPerOp()), num(cpuRatio),
					num(float64(m.mallocs) / ops),
					num(m.lat.Quantile(0.50).Seconds() * 1e6), num(m.lat.Quantile(0.99).Seconds() * 1e6),
					num(m.srvUsec / ops), num(m.srvCalls / ops), strconv.FormatInt(m.errors, 10),
				}, "\t"))
			}
		}
	}
}

// appendTSV appends the run's measurements to the file at path.
func (rep *report) appendTSV(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	rep.writeTSV(w)
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// abKey names one row in one cell.
type abKey struct {
	keys, goroutines int
	row              string
}

// abSide is what one -tsv file holds: each row's values per cell and
// column, one per round of every run appended to it.
type abSide struct {
	path  string
	order []abKey // in the order of first appearance
	vals  map[abKey]map[string][]float64
}

// readTSV reads a file that -tsv appended to, once or many times.
func readTSV(path string) (*abSide, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	side := &abSide{path: path, vals: map[abKey]map[string][]float64{}}
	var header []string
	for n, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		fields := strings.Split(line, "\t")
		if fields[0] == tsvColumns[0] {
			header = fields
			continue
		}
		if header == nil || len(fields) != len(header) || len(fields) < 4 {
			return nil, fmt.Errorf("%s:%d: not a line of compare -tsv (%d fields, header %q)", path, n+1, len(fields), header)
		}
		var k abKey
		k.keys, err = strconv.Atoi(fields[1])
		if err == nil {
			k.goroutines, err = strconv.Atoi(fields[2])
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n+1, err)
		}
		k.row = fields[3]
		if side.vals[k] == nil {
			side.order = append(side.order, k)
			side.vals[k] = map[string][]float64{}
		}
		for j := 4; j < len(fields); j++ {
			x, err := strconv.ParseFloat(fields[j], 64)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: column %s: %w", path, n+1, header[j], err)
			}
			side.vals[k][header[j]] = append(side.vals[k][header[j]], x)
		}
	}
	if len(side.order) == 0 {
		return nil, fmt.Errorf("%s: no measurements", path)
	}
	return side, nil
}

// median returns the median of column col of row k, NaN if none.
func (s *abSide) median(k abKey, col string) float64 {
	return harness.Median(s.vals[k][col])
}

// spread prints the median of column col of row k, and the range of its
// values when there are several: "0.98 (0.95–1.02)".
func (s *abSide) spread(k abKey, col string) string {
	xs := s.vals[k][col]
	if len(xs) < 2 {
		return harness.FmtFloat(harness.Median(xs), 2)
	}
	return fmt.Sprintf("%s (%s–%s)", harness.FmtFloat(harness.Median(xs), 2),
		harness.FmtFloat(slices.Min(xs), 2), harness.FmtFloat(slices.Max(xs), 2))
}

var abColumns = []string{"keys", "goroutines", "row", "× EVALSHA, old", "new", "new/old",
	"CPU µs/op, old", "new", "CPU × EVALSHA, old", "new", "allocs/op, old", "new", "decisions/s, old", "new", "errors, old", "new"}

// writeAB prints the medians of before (old) and after (new) side by
// side, cell by cell, in the order of before's file (then rows that only
// after has).
func writeAB(w io.Writer, before, after *abSide, markdown bool) {
	order := slices.Clone(before.order)
	for _, k := range after.order {
		if before.vals[k] == nil {
			order = append(order, k)
		}
	}
	var lines [][]string
	for _, k := range order {
		newOld := after.median(k, "x_evalsha") / before.median(k, "x_evalsha")
		if k.row == evalshaRow.name {
			newOld = after.median(k, "decisions/s") / before.median(k, "decisions/s")
		}
		errs := func(s *abSide) string {
			var n float64
			for _, x := range s.vals[k]["errors"] {
				n += x
			}
			return harness.FmtFloat(n, 0)
		}
		lines = append(lines, []string{
			strconv.Itoa(k.keys), strconv.Itoa(k.goroutines), k.row,
			before.spread(k, "x_evalsha"), after.spread(k, "x_evalsha"), harness.FmtFloat(newOld, 2),
			harness.FmtFloat(before.median(k, "cpu_us/op"), 1), harness.FmtFloat(after.median(k, "cpu_us/op"), 1),
			harness.FmtFloat(before.median(k, "cpu_x_evalsha"), 2), harness.FmtFloat(after.median(k, "cpu_x_evalsha"), 2),
			harness.FmtFloat(before.median(k, "allocs/op"), 1), harness.FmtFloat(after.median(k, "allocs/op"), 1),
			harness.GroupDigits(before.median(k, "decisions/s")), harness.GroupDigits(after.median(k, "decisions/s")),
			errs(before), errs(after),
		})
	}
	heading := []string{
		fmt.Sprintf("old: %s (%s); new: %s (%s)", before.path, harness.Rounds(before.rounds()), after.path, harness.Rounds(after.rounds())),
		"× EVALSHA: decisions/s over the evalsha row's in the same cell and round (the rounds' range in brackets);",
		"new/old: of those medians (on the evalsha row: of its decisions/s, the machine's drift between the builds);",
		"CPU µs/op: this process's user+system CPU time per decision (getrusage); CPU × EVALSHA: over the evalsha row's, per round",
	}
	if markdown {
		for _, l := range heading {
			fmt.Fprintf(w, "%s  \n", l)
		}
		fmt.Fprintln(w)
		for _, l := range lines {
			l[2] = "`" + l[2] + "`"
		}
		harness.WriteMarkdownTable(w, abColumns, lines, 2)
		return
	}
	for _, l := range heading {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
	harness.WriteTextTable(w, abColumns, lines, 2, func(i int) bool {
		return i > 0 && (lines[i][0] != lines[i-1][0] || lines[i][1] != lines[i-1][1])
	})
}

// rounds returns the most rounds any row has.
func (s *abSide) rounds() int {
	n := 0
	for _, cols := range s.vals {
		n = max(n, len(cols["x_evalsha"]))
	}
	return n
}

// compareAB reads the two -tsv files named by -ab and prints them side
// by side.
func compareAB(files string, markdown bool, stdout io.Writer) error {
	paths := strings.Split(files, ",")
	if len(paths) != 2 || paths[0] == "" || paths[1] == "" {
		return fmt.Errorf("-ab=%q: want two files written by -tsv, old and new, as -ab=old.tsv,new.tsv", files)
	}
	before, err := readTSV(paths[0])
	if err != nil {
		return err
	}
	after, err := readTSV(paths[1])
	if err != nil {
		return err
	}
	writeAB(stdout, before, after, markdown)
	return nil
}
