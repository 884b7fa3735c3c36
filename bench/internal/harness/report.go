package harness

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Median returns the median of xs, NaN when there are none. xs is not
// modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// FmtFloat prints x with prec decimals, or "-" for NaN.
func FmtFloat(x float64, prec int) string {
	if math.IsNaN(x) {
		return "-"
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

// GroupDigits prints x rounded to an integer, in groups of three digits
// ("1 234 567"), or "-" for NaN.
func GroupDigits(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	s := strconv.FormatInt(int64(math.Round(x)), 10)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// FmtDuration prints d with three significant digits or so: whole
// nanoseconds below 1µs ("850ns"), then µs and ms ("4.25µs", "12.3ms");
// "-" when d is not positive.
func FmtDuration(d time.Duration) string {
	us := float64(d) / float64(time.Microsecond)
	switch {
	case d <= 0:
		return "-"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < 10*time.Microsecond:
		return fmt.Sprintf("%.2fµs", us)
	case d < 100*time.Microsecond:
		return fmt.Sprintf("%.1fµs", us)
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", us)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", us/1000)
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1fms", us/1000)
	}
	return fmt.Sprintf("%.0fms", us/1000)
}

// Rounds describes a run of n rounds for a report's heading: "1 round",
// or "3 rounds, medians shown".
func Rounds(n int) string {
	if n > 1 {
		return fmt.Sprintf("%d rounds, medians shown", n)
	}
	return "1 round"
}

// WriteTextTable prints columns and then lines as a fixed-width table: the
// cells two spaces apart, each as wide as its column's widest (in runes),
// right-aligned but for column left, trailing blanks trimmed. Before line i
// it prints an empty line when gap(i) is true (gap may be nil).
func WriteTextTable(w io.Writer, columns []string, lines [][]string, left int, gap func(i int) bool) {
	widths := make([]int, len(columns))
	for j, h := range columns {
		widths[j] = runeLen(h)
	}
	for _, l := range lines {
		for j, v := range l {
			widths[j] = max(widths[j], runeLen(v))
		}
	}
	printLine := func(l []string) {
		var b strings.Builder
		for j, v := range l {
			if j > 0 {
				b.WriteString("  ")
			}
			if j == left {
				fmt.Fprintf(&b, "%-*s", widths[j], v)
			} else {
				fmt.Fprintf(&b, "%*s", widths[j], v)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	printLine(columns)
	for i, l := range lines {
		if gap != nil && gap(i) {
			fmt.Fprintln(w)
		}
		printLine(l)
	}
}

// WriteMarkdownTable prints columns and then lines as a Markdown table,
// right-aligned but for column left.
func WriteMarkdownTable(w io.Writer, columns []string, lines [][]string, left int) {
	align := slices.Repeat([]string{"---:"}, len(columns))
	align[left] = ":---"
	fmt.Fprintf(w, "| %s |\n|%s|\n", strings.Join(columns, " | "), strings.Join(align, "|"))
	for _, l := range lines {
		fmt.Fprintf(w, "| %s |\n", strings.Join(l, " | "))
	}
}

func runeLen(s string) int { return len([]rune(s)) }
