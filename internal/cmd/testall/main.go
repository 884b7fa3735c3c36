// Command testall runs the tests as `go test -race ./...` does, then says
// what could not run: how many tests against real Redis were skipped
// because redis-server is not on PATH, in which packages, and how to run
// them. Plain `go test ./...` keeps that quiet, since it shows a passing
// package's output only with -v.
//
//	go run ./internal/cmd/testall                    # go test -race ./...
//	go run ./internal/cmd/testall -run Suite ./core  # arguments replace "-race ./..."
//
// It runs `go test -json` with the same arguments and prints what go test
// would: a line per package and the output of the tests that failed, or
// with -v or -bench everything. Its last line counts tests and subtests,
// "tests: 812 passed, 0 failed, 53 skipped", and its exit status is go
// test's.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"
)

// missing begins the message of every test that needs redis-server when
// none is on PATH: redistest.Missing, copied so that this command builds
// from the standard library alone (a test checks that the two agree).
const missing = "redistest: redis-server is not on PATH"

// requireEnv is redistest.RequireEnv.
const requireEnv = "REDLIMIT_REQUIRE_REDIS"

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		args = []string{"-race", "./..."}
	}
	// Ctrl-C reaches go test too; let it end, then report what ran. (Not
	// signal.Ignore: an ignored signal would stay ignored in go test.)
	signal.Notify(make(chan os.Signal, 1), os.Interrupt)
	os.Exit(run(args, os.Stdout, os.Stderr))
}

// run runs go test -json with args, reports to stdout and stderr as go
// test would, and returns go test's exit status.
func run(args []string, stdout, stderr io.Writer) int {
	// go test's own stderr, the reporter and its heartbeat share stderr.
	if _, ok := stderr.(*os.File); !ok {
		stderr = &lockedWriter{w: stderr}
	}
	cmd := exec.Command("go", append([]string{"test", "-json"}, args...)...)
	cmd.Stderr = stderr
	events, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(stderr, "testall:", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "testall:", err)
		return 1
	}
	r := newReporter(stdout, stderr, verbose(args))
	r.module = modulePath()
	fmt.Fprintf(stderr, "testall: go test %s: building, then a line per package as it finishes\n", strings.Join(args, " "))
	stopHeartbeat := r.heartbeat(heartbeatEvery)
	sc := bufio.NewScanner(events)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		r.mu.Lock()
		r.line(sc.Bytes())
		r.mu.Unlock()
	}
	stopHeartbeat()
	if err := sc.Err(); err != nil {
		fmt.Fprintln(stderr, "testall: reading go test's output:", err)
		_, _ = io.Copy(io.Discard, events) // let go test finish
	}
	err = cmd.Wait()
	r.finish()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintln(stderr, "testall:", err)
		return 1
	case r.failed > 0 || len(r.failedPkgs) > 0:
		return 1
	}
	return 0
}

// lockedWriter serializes writes to w, for a writer that is not a file
// (which the operating system serializes).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// verbose reports whether args ask go test for its whole output: -v, or
// -bench, whose results go test shows for passing packages too.
func verbose(args []string) bool {
	for _, a := range args {
		if a == "-args" || a == "--args" {
			return false // the rest is the test binary's
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch strings.TrimPrefix(name, "test.") {
		case "v":
			if value != "false" {
				return true
			}
		case "bench":
			return true
		}
	}
	return false
}

// modulePath returns the path of the module in the current directory, or
// "" if go list cannot tell one.
func modulePath() string {
	out, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		return ""
	}
	path := strings.TrimSpace(string(out))
	if strings.ContainsAny(path, " \n") {
		return "" // a workspace: several modules
	}
	return path
}

// event is one line of go test -json (cmd/test2json), with the fields
// testall reads.
type event struct {
	Action  string
	Package string // "" in build-output events
	Test    string
	Output  string
}

// heartbeatEvery is how long testall stays silent before it says what is
// still running.
const heartbeatEvery = 30 * time.Second

// reporter turns go test -json's events back into go test's own output,
// and counts what ran.
type reporter struct {
	stdout, stderr io.Writer
	verbose        bool
	module         string // stripped from package paths in the summary

	mu       sync.Mutex // held by line and tick, which run on two goroutines
	pkgs     map[string]*pkgState
	started  map[string]time.Time // packages whose tests run, since when
	finished int                  // packages that ended
	said     time.Time            // when a line was last printed

	passed, failed, skipped int
	// missingSkipped and missingFailed count, by package, the tests that
	// skipped or failed for want of redis-server.
	missingSkipped, missingFailed map[string]int
	failedPkgs                    []string
}

// pkgState is what one package has printed so far.
type pkgState struct {
	lines   []outputLine
	ended   map[string]string // test -> "pass", "fail" or "skip"
	missing map[string]bool   // tests whose output carries the missing message
}

// outputLine is one line of output and the test that printed it ("" for
// the package itself).
type outputLine struct {
	test, text string
}

func newReporter(stdout, stderr io.Writer, verbose bool) *reporter {
	return &reporter{
		stdout: stdout, stderr: stderr, verbose: verbose,
		pkgs:           map[string]*pkgState{},
		started:        map[string]time.Time{},
		said:           time.Now(),
		missingSkipped: map[string]int{},
		missingFailed:  map[string]int{},
	}
}

// line handles one line of go test -json's output.
func (r *reporter) line(b []byte) {
	var e event
	if len(bytes.TrimSpace(b)) == 0 {
		return
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Action == "" {
		fmt.Fprintf(r.stdout, "%s\n", b) // not an event: pass it on
		return
	}
	switch e.Action {
	case "build-output":
		io.WriteString(r.stderr, e.Output)
		r.said = time.Now()
		return
	case "start":
		r.started[e.Package] = time.Now()
		return
	case "build-fail", "run", "pause", "cont", "bench":
		return
	}
	if e.Package == "" {
		return
	}
	p := r.pkgs[e.Package]
	if p == nil {
		p = &pkgState{ended: map[string]string{}, missing: map[string]bool{}}
		r.pkgs[e.Package] = p
	}
	switch e.Action {
	case "output":
		if e.Test != "" && strings.Contains(e.Output, missing) {
			p.missing[e.Test] = true
		}
		if r.verbose {
			io.WriteString(r.stdout, e.Output)
			r.said = time.Now()
			return
		}
		p.lines = append(p.lines, outputLine{e.Test, e.Output})
	case "pass", "fail", "skip":
		if e.Test == "" {
			r.endPackage(e.Package, p, e.Action)
			return
		}
		p.ended[e.Test] = e.Action
		switch e.Action {
		case "pass":
			r.passed++
		case "fail":
			r.failed++
			if p.missing[e.Test] {
				r.missingFailed[e.Package]++
			}
		case "skip":
			r.skipped++
			if p.missing[e.Test] {
				r.missingSkipped[e.Package]++
			}
		}
	}
}

// endPackage prints what go test prints for a package that ended with
// action: the "ok" line of a package that passed, every line of one with
// no tests, and for one that failed, the output of its tests that did not
// pass or skip (without test2json's "=== RUN" framing) and its own lines.
func (r *reporter) endPackage(name string, p *pkgState, action string) {
	delete(r.pkgs, name)
	delete(r.started, name)
	r.finished++
	r.said = time.Now()
	if action == "fail" {
		r.failedPkgs = append(r.failedPkgs, name)
	}
	if r.verbose {
		return
	}
	for _, l := range p.lines {
		var show bool
		switch {
		case action == "pass":
			show = l.test == "" && strings.HasPrefix(l.text, "ok ")
		case l.test == "":
			show = true
		case action == "fail":
			ended := p.ended[l.test]
			show = ended != "pass" && ended != "skip" && !strings.HasPrefix(l.text, "=== ")
		}
		if show {
			io.WriteString(r.stdout, l.text)
		}
	}
}

// heartbeat calls tick every `every` until the returned function is
// called, so that a long build or a slow package does not look like a
// hang.
func (r *reporter) heartbeat(every time.Duration) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				r.mu.Lock()
				r.tick(now, every)
				r.mu.Unlock()
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// tick says, to stderr, what is still running if nothing was printed for
// the last `quiet`.
func (r *reporter) tick(now time.Time, quiet time.Duration) {
	if now.Sub(r.said) < quiet {
		return
	}
	r.said = now
	if len(r.started) == 0 {
		fmt.Fprintf(r.stderr, "testall: %d %s finished; building\n", r.finished, plural(r.finished, "package"))
		return
	}
	var running []string
	for _, name := range slices.Sorted(maps.Keys(r.started)) {
		running = append(running, fmt.Sprintf("%s (%v)", r.short(name), now.Sub(r.started[name]).Round(time.Second)))
	}
	fmt.Fprintf(r.stderr, "testall: %d %s finished; running %s\n", r.finished, plural(r.finished, "package"), strings.Join(running, ", "))
}

// finish reports packages that never ended (go test was killed), then what
// was skipped for want of redis-server, and the counts.
func (r *reporter) finish() {
	for _, name := range slices.Sorted(maps.Keys(r.pkgs)) {
		r.endPackage(name, r.pkgs[name], "fail")
	}
	if n := total(r.missingSkipped); n > 0 {
		fmt.Fprintf(r.stderr, "\n%s: %d %s against real Redis SKIPPED: %s.\n"+
			"  To run them, install redis-server (Debian, Ubuntu: apt-get install redis-server) and run this again;\n"+
			"  %s=1 makes them fail instead of skipping, as in CI (.ci/run).\n",
			missing, n, plural(n, "test"), r.byPackage(r.missingSkipped), requireEnv)
	}
	if n := total(r.missingFailed); n > 0 {
		fmt.Fprintf(r.stderr, "\n%s: %d %s against real Redis FAILED: %s, since %s=1.\n"+
			"  To run them, install redis-server (Debian, Ubuntu: apt-get install redis-server).\n",
			missing, n, plural(n, "test"), r.byPackage(r.missingFailed), requireEnv)
	}
	if len(r.failedPkgs) > 0 {
		fmt.Fprintln(r.stdout, "FAIL")
	}
	fmt.Fprintf(r.stdout, "tests: %d passed, %d failed, %d skipped\n", r.passed, r.failed, r.skipped)
}

// byPackage lists counts by package, "./core 25, ./nethttp 8".
func (r *reporter) byPackage(counts map[string]int) string {
	var parts []string
	for _, pkg := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", r.short(pkg), counts[pkg]))
	}
	return strings.Join(parts, ", ")
}

// short writes a package of the current module as a relative path, "./core"
// or "." for the module's root.
func (r *reporter) short(pkg string) string {
	switch {
	case r.module == "":
		return pkg
	case pkg == r.module:
		return "."
	case strings.HasPrefix(pkg, r.module+"/"):
		return "./" + strings.TrimPrefix(pkg, r.module+"/")
	}
	return pkg
}

func total(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
