package run

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	c := Command{Path: "go run ./examples/x", Doc: "Does x.", Env: []string{Addr, RedisURL}}
	for _, tc := range []struct {
		args           []string
		code           int
		exit           bool
		stdout, stderr string
	}{
		{args: nil},
		{args: []string{"-o", "f"}},
		{args: []string{"-h"}, code: 0, exit: true, stdout: "Usage: go run ./examples/x [flags]\n\nDoes x.\n\n" +
			"Environment:\n" +
			"  ADDR       the address to listen on, host:port\n" +
			"             (default localhost:8080)\n" +
			"  REDIS_URL  the Redis that keeps the limits, redis://[[user]:password@]host:port[/db]\n" +
			"             (default: an embedded miniredis, nothing to set up)\n\n" +
			"Flags:\n" +
			"  -o string\n    \tan output\n" +
			"  -h\tprint this help\n"},
		{args: []string{"-help"}, code: 0, exit: true, stdout: "Usage: go run ./examples/x"},
		{args: []string{"-x"}, code: 2, exit: true, stderr: "flag provided but not defined: -x\nUsage: go run ./examples/x"},
		{args: []string{"extra"}, code: 2, exit: true, stderr: "unexpected argument \"extra\"\nUsage: go run ./examples/x"},
	} {
		fs := flag.NewFlagSet("x", flag.ExitOnError)
		fs.String("o", "", "an output")
		var stdout, stderr bytes.Buffer
		fs.SetOutput(&stderr)
		code, exit := c.parse(fs, tc.args, &stdout)
		if code != tc.code || exit != tc.exit {
			t.Errorf("%q: code %d, exit %v; want %d, %v", tc.args, code, exit, tc.code, tc.exit)
		}
		if !strings.HasPrefix(stdout.String(), tc.stdout) || (tc.stdout == "") != (stdout.Len() == 0) {
			t.Errorf("%q: stdout\n%s\nwant it to begin\n%s", tc.args, &stdout, tc.stdout)
		}
		if !strings.HasPrefix(stderr.String(), tc.stderr) || (tc.stderr == "") != (stderr.Len() == 0) {
			t.Errorf("%q: stderr\n%s\nwant it to begin\n%s", tc.args, &stderr, tc.stderr)
		}
	}
}

// TestUsageNoEnv: a program that reads no variable has no Environment
// section.
func TestUsageNoEnv(t *testing.T) {
	var b bytes.Buffer
	Command{Path: "p", Doc: "D."}.Usage(&b, flag.NewFlagSet("p", flag.ContinueOnError))
	if got, want := b.String(), "Usage: p [flags]\n\nD.\n\nFlags:\n  -h\tprint this help\n"; got != want {
		t.Errorf("usage:\n%s\nwant:\n%s", got, want)
	}
}
