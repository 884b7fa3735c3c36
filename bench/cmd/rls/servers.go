package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/redlimit/redlimit/bench/internal/harness"
)

// buildReference downloads the reference server's module at version with
// `go mod download` and builds its main package into dir.
func buildReference(ctx context.Context, version, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", refModule+"@"+version)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w: %s", refModule, version, err, stderrOf(err))
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w", refModule, version, err)
	}
	if mod.Error != "" || mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: %s", refModule, version, mod.Error)
	}
	return goBuild(ctx, mod.Dir, "./src/service_cmd", dir, "ratelimit")
}

// debugFile is added to redlimit-rls's main package when this program
// builds it (go build -overlay, its source untouched): a debug listener
// like the reference server's DEBUG_PORT, with expvar's /debug/vars
// (runtime.MemStats, for the allocations) and /debug/pprof, on the address
// in $REDLIMIT_BENCH_DEBUG_ADDR. Both servers' allocations are then read
// the same way, and both can be profiled.
const debugFile = `package main

import (
	_ "expvar"
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if addr := os.Getenv("REDLIMIT_BENCH_DEBUG_ADDR"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, http.DefaultServeMux) }()
	}
}
`

// buildRedlimit builds redlimit-rls's main package in srcDir into dir,
// with debugFile added.
func buildRedlimit(ctx context.Context, srcDir, dir string) (string, error) {
	abs, err := filepath.Abs(srcDir)
	if err != nil {
		return "", err
	}
	extra := filepath.Join(dir, "rlsbench_debug.go")
	if err := os.WriteFile(extra, []byte(debugFile), 0o644); err != nil {
		return "", err
	}
	overlay, err := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(abs, "zz_rlsbench_debug.go"): extra},
	})
	if err != nil {
		return "", err
	}
	overlayPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayPath, overlay, 0o644); err != nil {
		return "", err
	}
	return goBuild(ctx, abs, "", dir, "redlimit-rls", "-overlay", overlayPath)
}

// goBuild runs `go build -o dir/name flags pkg` in srcDir (pkg "" builds
// srcDir's own package) and returns the binary's path.
func goBuild(ctx context.Context, srcDir, pkg, dir, name string, flags ...string) (string, error) {
	bin := filepath.Join(dir, name)
	args := append([]string{"build", "-o", bin}, flags...)
	if pkg != "" {
		args = append(args, pkg)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = srcDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %w\n%s", srcDir, err, bytes.TrimSpace(out))
	}
	return bin, nil
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(bytes.TrimSpace(ee.Stderr))
	}
	return ""
}

// benchDomain and the descriptor keys of the configuration both servers
// load: userKey never denies (the throughput cells), exactKey allows
// -exact-limit a minute.
const (
	benchDomain = "bench"
	userKey     = "user"
	exactKey    = "exact"
	never       = 1_000_000_000 // requests_per_unit of userKey, a minute (uint32 in the reference)
)

// writeConfig writes the reference format's YAML, the same file for both
// servers, into root/rl/config (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY and the
// default RUNTIME_APPDIRECTORY of the reference) and returns that
// directory.
func writeConfig(root string, exactLimit int) (string, error) {
	dir := filepath.Join(root, "rl", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	yaml := fmt.Sprintf(`domain: %s
descriptors:
  - key: %s
    rate_limit:
      unit: minute
      requests_per_unit: %d
  - key: %s
    rate_limit:
      unit: minute
      requests_per_unit: %d
`, benchDomain, userKey, never, exactKey, max(exactLimit, 1))
	return dir, os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(yaml), 0o644)
}

// server is one running rate limit service and its clients.
type server struct {
	name     string
	grpcAddr string
	// memURL answers with the process's allocation count: the reference's
	// debug /stats (expvar), or redlimit-rls's /debug/vars or /metrics;
	// memKind says which ("" when none answered).
	memURL, memKind string
	pprofURL        string // a /debug/pprof/profile endpoint, "" when none answered
	logPath         string

	cmd     *exec.Cmd
	exited  chan struct{}
	conns   []*grpc.ClientConn
	clients []pb.RateLimitServiceClient
}

// startReference starts envoyproxy/ratelimit with its settings in
// environment variables: Redis over TCP, the config directory without
// watching the root, no stats, loopback listeners; its defaults otherwise
// (REDIS_POOL_SIZE=10, no local cache), and cfg.RefEnv last.
func startReference(ctx context.Context, cfg config, name, tmp, cfgDir, redisAddr string) (*server, error) {
	ports, err := harness.FreePorts(3)
	if err != nil {
		return nil, err
	}
	s := &server{
		name:     name,
		grpcAddr: harness.Loopback(ports[0]),
		memURL:   "http://" + harness.Loopback(ports[2]) + "/stats",
		memKind:  "expvar",
		pprofURL: "http://" + harness.Loopback(ports[2]) + "/debug/pprof/profile",
	}
	// cfgDir is root/rl/config.
	root := filepath.Dir(filepath.Dir(cfgDir))
	env := append(os.Environ(),
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+root,
		"RUNTIME_SUBDIRECTORY=rl",
		"RUNTIME_WATCH_ROOT=false",
		// No stats at all: with USE_STATSD=false alone, the reference
		// JSON-encodes every timer sample into a logging sink (7 % of its
		// CPU at one caller); statsd would cost a UDP write. Off, the
		// reference is at its cheapest.
		"USE_STATSD=false", "DISABLE_STATS=true",
		"LOG_LEVEL=warn",
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[1]),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[0]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]),
	)
	env = append(env, cfg.RefEnv...)
	cmd := exec.Command(cfg.RefBin)
	cmd.Env = env
	if err := s.start(ctx, cmd, tmp, cfg.Conns); err != nil {
		return nil, err
	}
	return s, nil
}

// startRedlimit starts redlimit-rls with its flags.
func startRedlimit(ctx context.Context, cfg config, tmp, cfgDir, redisAddr string) (*server, error) {
	ports, err := harness.FreePorts(3)
	if err != nil {
		return nil, err
	}
	s := &server{name: "redlimit-rls", grpcAddr: harness.Loopback(ports[0])}
	args := append([]string{
		"-config", cfgDir,
		"-redis", "redis://" + redisAddr,
		"-grpc", s.grpcAddr,
		"-http", harness.Loopback(ports[1]),
	}, cfg.RedlimitArgs...)
	cmd := exec.Command(cfg.RedlimitBin, args...)
	cmd.Env = append(os.Environ(), "REDLIMIT_BENCH_DEBUG_ADDR="+harness.Loopback(ports[2]))
	if err := s.start(ctx, cmd, tmp, cfg.Conns); err != nil {
		return nil, err
	}
	// Where its allocations and profile can be read: the debug listener
	// this program builds in, else its own /debug/vars or /metrics.
	for _, base := range []string{"http://" + harness.Loopback(ports[2]), "http://" + harness.Loopback(ports[1])} {
		if s.memKind != "" {
			break
		}
		for _, c := range []struct{ path, kind string }{{"/debug/vars", "expvar"}, {"/metrics", "prometheus"}} {
			s.memURL, s.memKind = base+c.path, c.kind
			if _, err := s.mallocs(ctx); err == nil {
				break
			}
			s.memURL, s.memKind = "", ""
		}
		if ok, _ := httpOK(ctx, base+"/debug/pprof/"); ok && s.pprofURL == "" {
			s.pprofURL = base + "/debug/pprof/profile"
		}
	}
	return s, nil
}

// start runs cmd with its output in a log file, dials it and waits until
// it answers ShouldRateLimit with OK (its configuration is loaded).
func (s *server) start(ctx context.Context, cmd *exec.Cmd, tmp string, conns int) error {
	s.logPath = filepath.Join(tmp, strings.ReplaceAll(s.name, " ", "-")+".log")
	logf, err := os.Create(s.logPath)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: %w", s.name, err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(s.exited) }()

	if err := s.connect(conns); err != nil {
		s.stop()
		return err
	}
	req := request(userKey, "probe", 1)
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := s.clients[0].ShouldRateLimit(cctx, req)
		cancel()
		if err == nil && resp.GetOverallCode() == pb.RateLimitResponse_OK {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("answered %v, want OK", resp.GetOverallCode())
		}
		select {
		case <-s.exited:
			return fmt.Errorf("%s exited: %s", s.name, s.logTail())
		case <-ctx.Done():
			s.stop()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("%s did not answer ShouldRateLimit with OK within a minute: %v\n%s", s.name, err, s.logTail())
		}
	}
}

// connect opens n connections to the server.
func (s *server) connect(n int) error {
	s.closeConns()
	for i := 0; i < n; i++ {
		// The defaults, as a client written for the API would have.
		cc, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		cc.Connect()
		s.conns = append(s.conns, cc)
		s.clients = append(s.clients, pb.NewRateLimitServiceClient(cc))
	}
	return nil
}

func (s *server) closeConns() {
	for _, c := range s.conns {
		c.Close()
	}
	s.conns, s.clients = nil, nil
}

// stop closes the connections and kills the process.
func (s *server) stop() {
	s.closeConns()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// logTail returns the end of the server's log.
func (s *server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// request builds a RateLimitRequest of one descriptor with one entry.
func request(key, value string, hits uint32) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{
		Domain: benchDomain,
		Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		}},
		HitsAddend: hits,
	}
}

// mallocs returns the process's count of heap allocations so far.
func (s *server) mallocs(ctx context.Context) (uint64, error) {
	if s.memURL == "" {
		return 0, errors.New("no allocation counter")
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, s.memURL, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", s.memURL, resp.Status)
	}
	switch s.memKind {
	case "expvar":
		return parseExpvarMallocs(b.Bytes())
	default:
		return parsePromMallocs(b.Bytes())
	}
}

// parseExpvarMallocs reads memstats.Mallocs from expvar's JSON (/debug/vars)
// or from the reference's /stats, which prints each variable as "name: value"
// on a line.
func parseExpvarMallocs(b []byte) (uint64, error) {
	var ms struct{ Mallocs *uint64 }
	var vars struct {
		Memstats json.RawMessage `json:"memstats"`
	}
	if json.Unmarshal(b, &vars) == nil && len(vars.Memstats) > 0 {
		if err := json.Unmarshal(vars.Memstats, &ms); err == nil && ms.Mallocs != nil {
			return *ms.Mallocs, nil
		}
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "memstats: "); ok {
			if err := json.Unmarshal([]byte(v), &ms); err == nil && ms.Mallocs != nil {
				return *ms.Mallocs, nil
			}
		}
	}
	return 0, errors.New("no memstats.Mallocs in the expvar output")
}

// parsePromMallocs reads go_memstats_mallocs_total from Prometheus' text
// format.
func parsePromMallocs(b []byte) (uint64, error) {
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_mallocs_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, err
			}
			return uint64(f), nil
		}
	}
	return 0, errors.New("no go_memstats_mallocs_total in /metrics")
}

// profile writes a CPU profile of d to path.
func (s *server) profile(ctx context.Context, d time.Duration, path string) error {
	if s.pprofURL == "" {
		return errors.New("no /debug/pprof/profile endpoint")
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	cctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, s.pprofURL+"?seconds="+strconv.Itoa(secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", s.pprofURL, resp.Status)
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func httpOK(ctx context.Context, url string) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}
