package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestRedistestAgrees: the message and variable counted here are the ones
// redistest uses.
func TestRedistestAgrees(t *testing.T) {
	if missing != redistest.Missing {
		t.Errorf("missing = %q, redistest.Missing = %q", missing, redistest.Missing)
	}
	if requireEnv != redistest.RequireEnv {
		t.Errorf("requireEnv = %q, redistest.RequireEnv = %q", requireEnv, redistest.RequireEnv)
	}
}

// stream is go test -json's output (go 1.26) for a package that passed
// with two tests skipped for want of redis-server, one that failed, one
// without tests, and one that did not build.
const stream = `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestOK"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"    a_test.go:3: quiet when it passes\n"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"m/a","Test":"TestOK","Elapsed":0}
{"Action":"run","Package":"m/a","Test":"TestRedis"}
{"Action":"output","Package":"m/a","Test":"TestRedis","Output":"=== RUN   TestRedis\n"}
{"Action":"run","Package":"m/a","Test":"TestRedis/cluster"}
{"Action":"output","Package":"m/a","Test":"TestRedis/cluster","Output":"=== RUN   TestRedis/cluster\n"}
{"Action":"output","Package":"m/a","Test":"TestRedis/cluster","Output":"=== PAUSE TestRedis/cluster\n"}
{"Action":"cont","Package":"m/a","Test":"TestRedis/cluster"}
{"Action":"output","Package":"m/a","Test":"TestRedis/cluster","Output":"=== CONT  TestRedis/cluster\n"}
{"Action":"output","Package":"m/a","Test":"TestRedis/cluster","Output":"    redistest.go:70: redistest: redis-server is not on PATH: tests against real Redis CANNOT RUN.\n"}
{"Action":"output","Package":"m/a","Test":"TestRedis/cluster","Output":"--- SKIP: TestRedis/cluster (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestRedis/cluster","Elapsed":0}
{"Action":"output","Package":"m/a","Test":"TestRedis","Output":"--- PASS: TestRedis (0.00s)\n"}
{"Action":"pass","Package":"m/a","Test":"TestRedis","Elapsed":0}
{"Action":"run","Package":"m/a","Test":"TestShort"}
{"Action":"output","Package":"m/a","Test":"TestShort","Output":"    a_test.go:9: skipped in -short mode\n"}
{"Action":"output","Package":"m/a","Test":"TestShort","Output":"--- SKIP: TestShort (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestShort","Elapsed":0}
{"Action":"run","Package":"m/a","Test":"TestServer"}
{"Action":"output","Package":"m/a","Test":"TestServer","Output":"    redistest.go:70: redistest: redis-server is not on PATH: tests against real Redis CANNOT RUN.\n"}
{"Action":"output","Package":"m/a","Test":"TestServer","Output":"--- SKIP: TestServer (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestServer","Elapsed":0}
{"Action":"output","Package":"m/a","Output":"PASS\n"}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t0.024s\n"}
{"Action":"pass","Package":"m/a","Elapsed":0.025}
{"ImportPath":"m/d [m/d.test]","Action":"build-output","Output":"# m/d [m/d.test]\n"}
{"ImportPath":"m/d [m/d.test]","Action":"build-output","Output":"d/d_test.go:3:27: undefined: undefined\n"}
{"ImportPath":"m/d [m/d.test]","Action":"build-fail"}
{"Action":"start","Package":"m/b"}
{"Action":"start","Package":"m/c"}
{"Action":"output","Package":"m/c","Output":"?   \tm/c\t[no test files]\n"}
{"Action":"skip","Package":"m/c","Elapsed":0}
{"Action":"start","Package":"m/d"}
{"Action":"output","Package":"m/d","Output":"FAIL\tm/d [build failed]\n"}
{"Action":"fail","Package":"m/d","Elapsed":0,"FailedBuild":"m/d [m/d.test]"}
{"Action":"run","Package":"m/b","Test":"TestFail"}
{"Action":"output","Package":"m/b","Test":"TestFail","Output":"=== RUN   TestFail\n"}
{"Action":"output","Package":"m/b","Test":"TestFail","Output":"printed by the test\n"}
{"Action":"run","Package":"m/b","Test":"TestFail/sub"}
{"Action":"output","Package":"m/b","Test":"TestFail/sub","Output":"=== RUN   TestFail/sub\n"}
{"Action":"output","Package":"m/b","Test":"TestFail/sub","Output":"    b_test.go:3: boom\n"}
{"Action":"output","Package":"m/b","Test":"TestFail/sub","Output":"--- FAIL: TestFail/sub (0.00s)\n"}
{"Action":"fail","Package":"m/b","Test":"TestFail/sub","Elapsed":0}
{"Action":"run","Package":"m/b","Test":"TestFail/fine"}
{"Action":"output","Package":"m/b","Test":"TestFail/fine","Output":"=== RUN   TestFail/fine\n"}
{"Action":"output","Package":"m/b","Test":"TestFail/fine","Output":"    --- PASS: TestFail/fine (0.00s)\n"}
{"Action":"pass","Package":"m/b","Test":"TestFail/fine","Elapsed":0}
{"Action":"output","Package":"m/b","Test":"TestFail","Output":"--- FAIL: TestFail (0.00s)\n"}
{"Action":"fail","Package":"m/b","Test":"TestFail","Elapsed":0}
{"Action":"output","Package":"m/b","Output":"FAIL\n"}
{"Action":"output","Package":"m/b","Output":"FAIL\tm/b\t0.021s\n"}
{"Action":"fail","Package":"m/b","Elapsed":0.021}
not an event
`

func TestReport(t *testing.T) {
	var stdout, stderr bytes.Buffer
	r := newReporter(&stdout, &stderr, false)
	r.module = "m"
	for _, line := range strings.Split(stream, "\n") {
		r.line([]byte(line))
	}
	r.finish()
	if got, want := stdout.String(), "ok  \tm/a\t0.024s\n"+
		"?   \tm/c\t[no test files]\n"+
		"FAIL\tm/d [build failed]\n"+
		"printed by the test\n"+
		"    b_test.go:3: boom\n"+
		"--- FAIL: TestFail/sub (0.00s)\n"+
		"--- FAIL: TestFail (0.00s)\n"+
		"FAIL\n"+
		"FAIL\tm/b\t0.021s\n"+
		"not an event\n"+
		"FAIL\n"+
		"tests: 3 passed, 2 failed, 3 skipped\n"; got != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", got, want)
	}
	if got, want := stderr.String(), "# m/d [m/d.test]\n"+
		"d/d_test.go:3:27: undefined: undefined\n"+
		"\nredistest: redis-server is not on PATH: 2 tests against real Redis SKIPPED: ./a 2.\n"+
		"  To run them, install redis-server (Debian, Ubuntu: apt-get install redis-server) and run this again;\n"+
		"  REDLIMIT_REQUIRE_REDIS=1 makes them fail instead of skipping, as in CI (.ci/run).\n"; got != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", got, want)
	}
}

func TestReportVerbose(t *testing.T) {
	var stdout, stderr bytes.Buffer
	r := newReporter(&stdout, &stderr, true)
	for _, line := range strings.Split(stream, "\n") {
		r.line([]byte(line))
	}
	r.finish()
	for _, want := range []string{"=== RUN   TestOK\n", "quiet when it passes", "--- PASS: TestFail/fine", "PASS\nok  \tm/a"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("-v output lacks %q:\n%s", want, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "2 tests against real Redis SKIPPED: m/a 2.") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
}

func TestReportRequired(t *testing.T) {
	var stdout, stderr bytes.Buffer
	r := newReporter(&stdout, &stderr, false)
	r.module = "m"
	for _, line := range []string{
		`{"Action":"output","Package":"m","Test":"TestServer","Output":"    redistest.go:70: redistest: redis-server is not on PATH: tests against real Redis CANNOT RUN. REDLIMIT_REQUIRE_REDIS=1 makes this a failure.\n"}`,
		`{"Action":"output","Package":"m","Test":"TestServer","Output":"--- FAIL: TestServer (0.00s)\n"}`,
		`{"Action":"fail","Package":"m","Test":"TestServer","Elapsed":0}`,
		`{"Action":"output","Package":"m","Output":"FAIL\tm\t0.1s\n"}`,
		`{"Action":"fail","Package":"m","Elapsed":0.1}`,
	} {
		r.line([]byte(line))
	}
	r.finish()
	if want := "redistest: redis-server is not on PATH: 1 test against real Redis FAILED: . 1, since REDLIMIT_REQUIRE_REDIS=1."; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
	if want := "FAIL\ntests: 0 passed, 1 failed, 0 skipped\n"; !strings.HasSuffix(stdout.String(), want) {
		t.Errorf("stdout does not end in %q:\n%s", want, stdout.String())
	}
}

func TestVerbose(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"-race", "./..."}, false},
		{[]string{"-v", "./core"}, true},
		{[]string{"-v=true"}, true},
		{[]string{"-v=false"}, false},
		{[]string{"--test.v"}, true},
		{[]string{"-run", "X", "-bench", "."}, true},
		{[]string{"-bench=Allow", "-benchmem"}, true},
		{[]string{"-benchtime", "2s"}, false},
		{[]string{"./core", "-args", "-v"}, false},
	} {
		if got := verbose(tc.args); got != tc.want {
			t.Errorf("verbose(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestRun runs go test through run on a small module of its own: a test
// that passes and one that skips as redistest does without redis-server.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":    "module example.com/m\n\ngo 1.25\n",
		"a_test.go": "package m\n\nimport \"testing\"\n\nfunc TestOK(t *testing.T) {}\n\nfunc TestRedis(t *testing.T) { t.Skip(" + `"` + missing + `: CANNOT RUN"` + ") }\n",
		"b/b.go":    "package b\n",
	}
	for name, body := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-count=1", "./..."}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit status %d\n%s%s", code, &stdout, &stderr)
	}
	// Packages are reported as they end, in either order.
	lines := strings.Split(stdout.String(), "\n")
	if len(lines) != 4 || lines[3] != "" || lines[2] != "tests: 1 passed, 0 failed, 1 skipped" {
		t.Fatalf("stdout:\n%s", &stdout)
	}
	if lines[0] > lines[1] {
		lines[0], lines[1] = lines[1], lines[0]
	}
	if lines[0] != "?   \texample.com/m/b\t[no test files]" || !strings.HasPrefix(lines[1], "ok  \texample.com/m\t") {
		t.Errorf("stdout:\n%s", &stdout)
	}
	if want := "1 test against real Redis SKIPPED: . 1."; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, &stderr)
	}
}

// TestHeartbeat: after a quiet spell testall says what it waits for:
// the build, then the packages whose tests run, and how long each has.
func TestHeartbeat(t *testing.T) {
	var stdout, stderr bytes.Buffer
	r := newReporter(&stdout, &stderr, false)
	r.module = "m"
	t0 := r.said
	r.tick(t0.Add(10*time.Second), 30*time.Second)
	if stderr.Len() != 0 {
		t.Fatalf("spoke after 10 s of quiet: %q", stderr.String())
	}
	r.tick(t0.Add(31*time.Second), 30*time.Second)
	if got := stderr.String(); got != "testall: 0 packages finished; building\n" {
		t.Fatalf("during the build: %q", got)
	}
	stderr.Reset()
	r.line([]byte(`{"Action":"start","Package":"m/core"}`))
	r.line([]byte(`{"Action":"start","Package":"m"}`))
	r.line([]byte(`{"Action":"output","Package":"m","Output":"ok  \tm\t0.1s\n"}`))
	r.line([]byte(`{"Action":"pass","Package":"m"}`))
	r.started["m/core"] = t0
	r.tick(r.said.Add(30*time.Second), 30*time.Second)
	if got := stderr.String(); !strings.HasPrefix(got, "testall: 1 package finished; running ./core (") {
		t.Fatalf("while a package runs: %q", got)
	}
	if got := stdout.String(); got != "ok  \tm\t0.1s\n" {
		t.Fatalf("stdout %q", got)
	}
}
