package harness

import (
	"bytes"
	"flag"
	"io"
	"math"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	xs := []float64{3, 1, 2, 10}
	if got := Median(xs); got != 2.5 {
		t.Errorf("Median(%v) = %v, want 2.5", xs, got)
	}
	if xs[0] != 3 {
		t.Errorf("Median sorted its argument: %v", xs)
	}
	if got := Median([]float64{5, 1, 3}); got != 3 {
		t.Errorf("Median of three = %v, want 3", got)
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %v, want NaN", got)
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{GroupDigits(0), "0"},
		{GroupDigits(999.6), "1 000"},
		{GroupDigits(1234567), "1 234 567"},
		{GroupDigits(-123456), "-123 456"},
		{GroupDigits(math.NaN()), "-"},
		{FmtFloat(1.236, 2), "1.24"},
		{FmtFloat(math.NaN(), 1), "-"},
		{Rounds(1), "1 round"},
		{Rounds(3), "3 rounds, medians shown"},
		{FmtDuration(0), "-"},
		{FmtDuration(850 * time.Nanosecond), "850ns"},
		{FmtDuration(4250 * time.Nanosecond), "4.25µs"},
		{FmtDuration(42500 * time.Nanosecond), "42.5µs"},
		{FmtDuration(425 * time.Microsecond), "425µs"},
		{FmtDuration(4250 * time.Microsecond), "4.25ms"},
		{FmtDuration(42500 * time.Microsecond), "42.5ms"},
		{FmtDuration(425 * time.Millisecond), "425ms"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestWriteTables(t *testing.T) {
	columns := []string{"n", "µs", "name"}
	lines := [][]string{{"1", "10", "a"}, {"22", "5", "bbb"}, {"3", "7", "c"}}
	var b bytes.Buffer
	WriteTextTable(&b, columns, lines, 2, func(i int) bool { return i == 2 })
	want := " n  µs  name\n" +
		" 1  10  a\n" +
		"22   5  bbb\n" +
		"\n" +
		" 3   7  c\n"
	if b.String() != want {
		t.Errorf("text table:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	WriteMarkdownTable(&b, columns, lines[:1], 2)
	want = "| n | µs | name |\n|---:|---:|:---|\n| 1 | 10 | a |\n"
	if b.String() != want {
		t.Errorf("markdown table:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestParse(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	n := fs.Int("n", 0, "")
	if err := Parse(fs, []string{"-n=2"}); err != nil || *n != 2 {
		t.Errorf("Parse: %v, n=%d", err, *n)
	}
	if err := Parse(fs, []string{"-n=2", "extra"}); err == nil {
		t.Error("Parse accepted a positional argument")
	}
	if err := Parse(fs, []string{"-nope"}); err == nil {
		t.Error("Parse accepted an unknown flag")
	}
}

func TestParseInts(t *testing.T) {
	got, err := ParseInts("1, 16,128")
	if err != nil || len(got) != 3 || got[0] != 1 || got[1] != 16 || got[2] != 128 {
		t.Errorf("ParseInts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "-1", "x", "1,,2"} {
		if _, err := ParseInts(bad); err == nil {
			t.Errorf("ParseInts(%q): no error", bad)
		}
	}
}
