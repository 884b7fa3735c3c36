package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// fakeRLS admits the first limit calls of each descriptor value and denies
// the rest.
type fakeRLS struct {
	pb.UnimplementedRateLimitServiceServer
	limit int
	mu    sync.Mutex
	seen  map[string]int
}

func (f *fakeRLS) ShouldRateLimit(_ context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	v := req.GetDescriptors()[0].GetEntries()[0].GetValue()
	f.mu.Lock()
	f.seen[v]++
	n := f.seen[v]
	f.mu.Unlock()
	code := pb.RateLimitResponse_OK
	if n > f.limit {
		code = pb.RateLimitResponse_OVER_LIMIT
	}
	return &pb.RateLimitResponse{OverallCode: code}, nil
}

// startFake serves fakeRLS on a loopback port and returns a server whose
// clients call it.
func startFake(t *testing.T, limit, conns int) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(gs, &fakeRLS{limit: limit, seen: map[string]int{}})
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	s := &server{name: "fake", grpcAddr: ln.Addr().String()}
	if err := s.connect(conns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.closeConns)
	return s
}

// TestDriveCounts checks that drive stops at maxCalls and counts every
// answer once, as the exactness check relies on.
func TestDriveCounts(t *testing.T) {
	s := startFake(t, 100, 2)
	l := drive(context.Background(), s.clients, []*pb.RateLimitRequest{request(exactKey, "x", 1)}, 16, time.Minute, 300)
	if l.calls != 300 || l.ok != 100 || l.over != 200 || l.errs != 0 {
		t.Fatalf("calls %d ok %d over %d errors %d (%v), want 300, 100, 200, 0", l.calls, l.ok, l.over, l.errs, l.firstErr)
	}
	if l.lat.Count() != 300 {
		t.Errorf("%d latencies recorded, want 300", l.lat.Count())
	}

	// Bounded by time: many values, never denied.
	start := time.Now()
	l = drive(context.Background(), s.clients, requests(1000), 4, 100*time.Millisecond, 1<<62)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v for a 100ms run", took)
	}
	if l.calls == 0 || l.ok != l.calls || l.rate() <= 0 {
		t.Errorf("calls %d ok %d rate %v", l.calls, l.ok, l.rate())
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_incr:calls=4,usec=6,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=34,usec_per_call=34.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=2,usec=61,usec_per_call=30.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_time:calls=2,usec=2,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n"
	cmds := parseCommandStats(info)
	if got := cmds["evalsha"]; got.calls != 2 || got.usec != 61 {
		t.Errorf("evalsha %+v", got)
	}
	// Scripts ran: only their time, the commands inside are in it.
	if usec, calls := serverUsec(cmds); usec != 61 || calls != 2 {
		t.Errorf("with scripts: %v µs in %d calls, want 61 in 2", usec, calls)
	}
	delete(cmds, "evalsha")
	if usec, calls := serverUsec(cmds); usec != 8 || calls != 6 {
		t.Errorf("without scripts: %v µs in %d calls, want 8 in 6 (not CONFIG)", usec, calls)
	}
	if got := breakdown(cmds, 2); got != "incr 2.00×/3.00µs, time 1.00×/1.00µs" {
		t.Errorf("breakdown %q", got)
	}
	if got := parseCPU("# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.25\r\nused_cpu_sys_children:9\r\n"); got != 3.75 {
		t.Errorf("cpu %v, want 3.75", got)
	}
}

func TestParseMallocs(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		prom     bool
		want     uint64
	}{
		{"debug/vars", `{"cmdline": ["x"], "memstats": {"Alloc": 1, "Mallocs": 12345}}`, false, 12345},
		{"reference /stats", "cmdline: [\"x\"]\nmemstats: {\"Alloc\":1,\"Mallocs\":777,\"Frees\":3}\n", false, 777},
		{"prometheus", "# TYPE go_memstats_mallocs_total counter\ngo_memstats_mallocs_total 1.2345e+06\n", true, 1234500},
	} {
		var got uint64
		var err error
		if tc.prom {
			got, err = parsePromMallocs([]byte(tc.in))
		} else {
			got, err = parseExpvarMallocs([]byte(tc.in))
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
	if _, err := parseExpvarMallocs([]byte("cmdline: []\n")); err == nil {
		t.Error("no memstats: no error")
	}
}

func TestParseFlags(t *testing.T) {
	cfg, opts, err := parseFlags([]string{"-rounds=2", "-callers=1,8", "-values=5", "-ref-env=REDIS_POOL_SIZE=64, REDIS_PIPELINE_LIMIT=8"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Rounds != 2 || len(cfg.Callers) != 2 || cfg.Callers[1] != 8 || cfg.Values[0] != 5 ||
		len(cfg.RefEnv) != 2 || cfg.RefEnv[1] != "REDIS_PIPELINE_LIMIT=8" || opts.refVersion != refVersion {
		t.Errorf("%+v %+v", cfg, opts)
	}
	for _, bad := range [][]string{{"-callers=0"}, {"-rounds=0"}, {"-ref-env=X"}, {"extra"}} {
		if _, _, err := parseFlags(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestSideBySide runs the whole program for a couple of seconds against
// both servers. It needs the network (the reference server is built from
// the Go module proxy), redis-server on PATH and redlimit-rls's source, so
// it runs only when REDLIMIT_BENCH_RLS=1; REDLIMIT_BENCH_RLS_REDLIMIT names
// redlimit-rls's directory or binary ("ref": a second reference server).
func TestSideBySide(t *testing.T) {
	if os.Getenv("REDLIMIT_BENCH_RLS") != "1" {
		t.Skip("set REDLIMIT_BENCH_RLS=1 to build envoyproxy/ratelimit and redlimit-rls and run them side by side")
	}
	rl := os.Getenv("REDLIMIT_BENCH_RLS_REDLIMIT")
	if rl == "" {
		rl = "../../../envoyrls/cmd/redlimit-rls"
	}
	var out, errOut bytes.Buffer
	err := mainErr([]string{"-rounds=1", "-duration=500ms", "-warmup=100ms", "-callers=1,16", "-values=1,100",
		"-exact-limit=50", "-exact-requests=200", "-redlimit=" + rl}, &out, &errOut)
	t.Log(out.String())
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	text := out.String()
	if !strings.Contains(text, "reference") || strings.Count(text, "\n") < 10 {
		t.Errorf("short report:\n%s", text)
	}
}

// TestRedlimitBuild builds a stand-in for redlimit-rls (same flags) the
// way the program builds redlimit-rls, with the debug listener added, and
// checks that its allocations and profile endpoint are found and that it
// is driven.
func TestRedlimitBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	tmp := t.TempDir()
	bin, err := buildRedlimit(context.Background(), "testdata/fakerls", tmp)
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig()
	cfg.RedlimitBin = bin
	s, err := startRedlimit(context.Background(), cfg, tmp, tmp, "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	if s.memKind != "expvar" || !strings.HasSuffix(s.memURL, "/debug/vars") || s.pprofURL == "" {
		t.Errorf("allocations from %s %q, profile from %q; want the added debug listener's", s.memKind, s.memURL, s.pprofURL)
	}
	m0, err := s.mallocs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l := drive(context.Background(), s.clients, requests(10), 4, time.Minute, 200)
	m1, err := s.mallocs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if l.ok != 200 || m1 <= m0 {
		t.Errorf("%d OK of 200; mallocs %d then %d", l.ok, m0, m1)
	}
}

func TestParseProcStat(t *testing.T) {
	stat := "4242 (redlimit rls) S 1 4242 4242 0 -1 4194560 1200 0 0 0 250 37 0 0 20 0 9 0 1000 0 0\n"
	got, err := parseProcStat(stat)
	if err != nil || got != 2870*time.Millisecond {
		t.Errorf("%v, %v; want 2.87s", got, err)
	}
	if cpu, err := processCPU(os.Getpid()); err != nil && cpu < 0 {
		t.Errorf("own process: %v, %v", cpu, err)
	}
}

// TestRunStandIns runs the whole matrix, the exactness check and the
// report on a real redis-server with the stand-in on both sides, so that
// the program keeps working without the network.
func TestRunStandIns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program and starts redis-server")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not on PATH")
	}
	tmp := t.TempDir()
	bin, err := buildRedlimit(context.Background(), "testdata/fakerls", tmp)
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig()
	cfg.RefBin, cfg.RedlimitBin = bin, bin
	cfg.Rounds, cfg.Duration, cfg.Warmup = 2, 100*time.Millisecond, 20*time.Millisecond
	cfg.Callers, cfg.Values = []int{1, 4}, []int{1, 10}
	cfg.ExactRequests, cfg.ExactLimit, cfg.ExactMaxHits = 40, 10, 3
	rep, err := run(context.Background(), cfg, tmp)
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.errors(); n != 0 {
		t.Errorf("%d errors", n)
	}
	for _, s := range []*server{rep.ref, rep.other} {
		if s.memKind == "" {
			t.Errorf("%s: no allocation counter", s.name)
		}
		for _, c := range rep.cells {
			sum, ok := rep.summarize(s, c)
			if !ok || !(sum.rate > 0) || !(sum.ratio > 0) || !(sum.allocs > 0) || sum.firstErr != nil {
				t.Errorf("%s %+v: %+v", s.name, c, sum)
			}
		}
		if len(rep.exact[s]) != 2 {
			t.Fatalf("%s: %d exactness rounds, want 2", s.name, len(rep.exact[s]))
		}
		for _, e := range rep.exact[s] {
			// The stand-in admits everything.
			if e.load.ok != 40 || e.costs == nil || e.costs.ok != 40 || e.costs.okHits < 40 {
				t.Errorf("%s: exactness %+v, costs %+v", s.name, e.load, e.costs)
			}
		}
	}
	var text, md bytes.Buffer
	rep.writeText(&text)
	rep.writeMarkdown(&md)
	for _, want := range []string{"reference", "redlimit-rls", "exactness", "hits_addend"} {
		if !strings.Contains(text.String(), want) || !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, text.String())
		}
	}
}
