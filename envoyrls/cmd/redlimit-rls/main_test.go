package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestProgram builds redlimit-rls, starts it on the reference server's
// README examples, asks it with Envoy's client over gRPC and over /json,
// reads /healthcheck and /metrics, and stops it with SIGTERM: with the
// embedded Redis (flags), and with a redis-server given as the reference
// server's environment variables.
func TestProgram(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "redlimit-rls")
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command builds the program: %v", err)
	}
	build := exec.Command(gocmd, "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	config, err := filepath.Abs("../../testdata/reference")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		p := start(t, bin, nil, "-config", config, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
		if !strings.Contains(p.log(), "rate-limit state is IN MEMORY") {
			t.Errorf("no loud line about the in-memory state:\n%s", p.log())
		}
		p.check(t)
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Standalone(t)
		p := start(t, bin, []string{
			"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.Addr, "GRPC_HOST=127.0.0.1", "GRPC_PORT=0",
			"HOST=127.0.0.1", "PORT=0", "RUNTIME_ROOT=" + filepath.Dir(config), "RUNTIME_APPDIRECTORY=reference",
			"LIMIT_RESPONSE_HEADERS_ENABLED=true",
		})
		if strings.Contains(p.log(), "IN MEMORY") {
			t.Errorf("in memory with REDIS_URL set:\n%s", p.log())
		}
		resp := p.check(t)
		if got := resp.GetResponseHeadersToAdd(); len(got) < 2 || got[1].GetKey() != "ratelimit-limit" {
			t.Errorf("headers %v, want the reference's names", got)
		}
	})
}

// process is a running redlimit-rls.
type process struct {
	cmd            *exec.Cmd
	grpcAddr, http string
	lines          chan string
	logs           strings.Builder
	exited         chan error
}

// log returns what the program logged so far.
func (p *process) log() string { return p.logs.String() }

var serving = regexp.MustCompile(`msg="redlimit-rls serving" grpc=(\S+) http=(\S+)`)

// start runs bin with env and args and waits, at most 60 s, until it
// says where it serves.
func start(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), lines: make(chan string, 100), exited: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.exited <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
		}
	})
	deadline := time.After(60 * time.Second)
	for p.grpcAddr == "" {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("exited before serving:\n%s", p.log())
			}
			p.logs.WriteString(line + "\n")
			if m := serving.FindStringSubmatch(line); m != nil {
				p.grpcAddr, p.http = m[1], m[2]
			}
		case <-deadline:
			t.Fatalf("not serving after 60 s:\n%s", p.log())
		}
	}
	return p
}

// check asks the program over gRPC and HTTP, stops it, and returns an
// OVER_LIMIT answer.
func (p *process) check(t *testing.T) *rlsv3.RateLimitResponse {
	t.Helper()
	cc, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := rlsv3.NewRateLimitServiceClient(cc)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req := &rlsv3.RateLimitRequest{Domain: "edge_proxy_per_ip", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "50.0.0.9"}},
	}}}
	var codes []string
	var last *rlsv3.RateLimitResponse
	for range 11 {
		// Within one second: 10 a second per address.
		resp, err := c.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.GetOverallCode().String())
		last = resp
	}
	if n := strings.Count(strings.Join(codes, " "), "OVER_LIMIT"); n < 1 || codes[0] != "OK" {
		t.Errorf("11 requests at 10 a second: %v", codes)
	}

	get := func(method, path, body string) (int, string) {
		r, err := http.NewRequestWithContext(ctx, method, "http://"+p.http+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	if code, body := get("GET", "/healthcheck", ""); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q", code, body)
	}
	if code, body := get("POST", "/json", `{"domain": "edge_proxy_per_ip", "descriptors": [{"entries": [{"key": "remote_address", "value": "50.0.0.5"}]}]}`); code != 429 || !strings.Contains(body, `"OVER_LIMIT"`) {
		t.Errorf("/json: %d %s", code, body)
	}
	code, body := get("GET", "/metrics", "")
	if code != 200 || !strings.Contains(body, `redlimit_decisions_total{outcome="denied",policy="edge_proxy_per_ip.remote_address"}`) || !strings.Contains(body, "redlimit_breaker_open") {
		t.Errorf("/metrics: %d\n%s", code, body)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if ok {
				p.logs.WriteString(line + "\n")
				continue
			}
			if err := <-p.exited; err != nil {
				t.Errorf("exit: %v\n%s", err, p.log())
			}
			if !strings.Contains(p.log(), "redlimit-rls stopping") {
				t.Errorf("no clean stop:\n%s", p.log())
			}
			return last
		case <-timeout:
			t.Fatalf("still running 20 s after SIGTERM:\n%s", p.log())
		}
	}
}

// TestParse: flags win over environment variables, which win over the
// defaults.
func TestParse(t *testing.T) {
	t.Parallel()
	env := map[string]string{"REDIS_URL": "redis:6379", "GRPC_PORT": "9000", "RUNTIME_ROOT": "/srv/runtime", "RUNTIME_SUBDIRECTORY": "ratelimit", "MERGE_DOMAIN_CONFIG": "true"}
	s, err := parse([]string{"-redis", "redis://other:6379"}, newEnv(func(k string) string { return env[k] }), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.redis != "redis://other:6379" || s.grpcAddr != ":9000" || s.httpAddr != ":8080" || s.config != "/srv/runtime/ratelimit/config" || !s.merge || s.timeout != 100*time.Millisecond {
		t.Errorf("%+v", s)
	}
	if _, err := parse([]string{"x"}, newEnv(func(string) string { return "" }), io.Discard); err == nil {
		t.Error("an argument accepted")
	}
}

// TestCompatTimeout: with -compat reference a decision waits for Redis
// as long as the reference's REDIS_TIMEOUT says (10 s by default), unless
// REDLIMIT_TIMEOUT or -timeout says otherwise; the default mode's bound
// is 100 ms.
func TestCompatTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  []string
		args []string
		want time.Duration
	}{
		{nil, nil, 100 * time.Millisecond},
		{[]string{"REDLIMIT_COMPAT=reference"}, nil, 10 * time.Second},
		{[]string{"REDLIMIT_COMPAT=reference", "REDIS_TIMEOUT=3s"}, nil, 3 * time.Second},
		{[]string{"REDLIMIT_COMPAT=reference", "REDLIMIT_TIMEOUT=50ms"}, nil, 50 * time.Millisecond},
		{[]string{"REDLIMIT_COMPAT=reference"}, []string{"-timeout", "1s"}, time.Second},
	} {
		s, err := parse(tc.args, envOf(tc.env), io.Discard)
		if err != nil || s.timeout != tc.want {
			t.Errorf("%v %v: timeout %v (%v), want %v", tc.env, tc.args, s.timeout, err, tc.want)
		}
	}
}
