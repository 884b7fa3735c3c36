package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// listen are the settings of loopback listeners on free ports.
var listen = []string{"GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0"}

// eventually retries f every 50 ms for at most 20 s, until it returns "".
func eventually(t *testing.T, what string, f func() string) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if last = f(); last == "" {
			return
		}
	}
	t.Errorf("%s: %s", what, last)
}

// TestBadConfigAtStart: a configuration that does not load at start
// leaves the program serving, as the reference does: every request is
// answered "no rate limit configuration loaded" (Unavailable, or Unknown
// as the reference's with REDLIMIT_COMPAT=reference), /healthcheck is OK
// unless HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED; once the files are
// fixed they load.
func TestBadConfigAtStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env    []string
		code   codes.Code
		health int
	}{
		{nil, codes.Unavailable, 200},
		{[]string{"REDLIMIT_COMPAT=reference"}, codes.Unknown, 200},
		{[]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true"}, codes.Unavailable, 500},
	} {
		dir := t.TempDir()
		writeConfig(t, dir, map[string]string{"bad.yaml": "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: minute, requests_per_unit: 1}\n"})
		p := mustRun(t, append(tc.env, listen...), "-config", dir, "-reload", "20ms")
		_, err := p.client(t).ShouldRateLimit(t.Context(), request("d", "k", "v"))
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), "no rate limit configuration loaded") {
			t.Errorf("%v: %v", tc.env, err)
		}
		if code, _ := get(t, p.httpAddr, "/healthcheck"); code != tc.health {
			t.Errorf("%v: /healthcheck %d, want %d", tc.env, code, tc.health)
		}
		writeConfig(t, dir, map[string]string{"bad.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"})
		eventually(t, "the fixed file", func() string {
			r, err := p.client(t).ShouldRateLimit(t.Context(), request("d", "k", "v"))
			if err != nil {
				return err.Error()
			}
			if code, _ := get(t, p.httpAddr, "/healthcheck"); code != 200 || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				return "not healthy, or not OK"
			}
			return ""
		})
	}
}

// TestHealthWithConfig: with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED an
// empty configuration directory (served as the reference serves it: no
// domains) is not healthy, over HTTP and gRPC's health service, until a
// domain is configured; without it, it is.
func TestHealthWithConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := mustRun(t, append(listen, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true"), "-config", dir, "-reload", "20ms")
	if code, _ := get(t, p.httpAddr, "/healthcheck"); code != 500 {
		t.Errorf("no domain: /healthcheck %d", code)
	}
	writeConfig(t, dir, map[string]string{"ratelimit.conf": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"})
	hc := healthpb.NewHealthClient(grpcConn(t, p))
	eventually(t, "healthy once a domain loads", func() string {
		code, _ := get(t, p.httpAddr, "/healthcheck")
		r, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if code != 200 || err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return "not healthy"
		}
		return ""
	})
	q := mustRun(t, listen, "-config", t.TempDir())
	if code, body := get(t, q.httpAddr, "/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("an empty directory without the setting: %d %q", code, body)
	}
	if r, err := q.client(t).ShouldRateLimit(t.Context(), request("any", "k", "v")); err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("an empty configuration answers: %v %v", r, err)
	}
}

// TestConfigMapSwap: a Kubernetes ConfigMap volume is files that link
// through ..data to a timestamped directory, swapped atomically on an
// update; with RUNTIME_IGNOREDOTFILES the files load once, and a swap
// reloads them. RUNTIME_ROOT swapped as a symbolic link (the
// reference's RUNTIME_WATCH_ROOT way) reloads too.
func TestConfigMapSwap(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "config")
	limit := func(n string) string {
		return "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: " + n + "}\n"
	}
	writeConfig(t, dir, map[string]string{"..2026_01_01_00_00_00.1/limits.yaml": limit("5")})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("..2026_01_01_00_00_00.1", filepath.Join(dir, "..data")))
	must(os.Symlink("..data/limits.yaml", filepath.Join(dir, "limits.yaml")))
	p := mustRun(t, append(listen, "RUNTIME_ROOT="+root, "RUNTIME_IGNOREDOTFILES=true"), "-reload", "20ms")
	current := func() uint32 {
		r, err := p.client(t).ShouldRateLimit(t.Context(), request("d", "k", "v"))
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if got := current(); got != 5 {
		t.Fatalf("limit %d, want 5\n%s", got, p.log())
	}
	// The kubelet's swap: a new directory, a new link renamed over ..data.
	writeConfig(t, dir, map[string]string{"..2026_01_01_00_01_00.2/limits.yaml": limit("7")})
	must(os.Symlink("..2026_01_01_00_01_00.2", filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	must(os.RemoveAll(filepath.Join(dir, "..2026_01_01_00_00_00.1")))
	eventually(t, "the swapped ConfigMap", func() string {
		if current() != 7 {
			return "still the old limit"
		}
		return ""
	})

	// RUNTIME_ROOT as a link to a version, swapped.
	base := t.TempDir()
	writeConfig(t, base, map[string]string{"v1/rl/config/a.yaml": limit("3"), "v2/rl/config/a.yaml": limit("4")})
	link := filepath.Join(base, "current")
	must(os.Symlink(filepath.Join(base, "v1"), link))
	q := mustRun(t, append(listen, "RUNTIME_ROOT="+link, "RUNTIME_SUBDIRECTORY=rl"), "-reload", "20ms")
	if r, err := q.client(t).ShouldRateLimit(t.Context(), request("d", "k", "v")); err != nil || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 3 {
		t.Fatalf("RUNTIME_ROOT a link: %v %v\n%s", r, err, q.log())
	}
	must(os.Symlink(filepath.Join(base, "v2"), link+".tmp"))
	must(os.Rename(link+".tmp", link))
	eventually(t, "the swapped RUNTIME_ROOT", func() string {
		r, err := q.client(t).ShouldRateLimit(t.Context(), request("d", "k", "v"))
		if err != nil || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 4 {
			return "still the old limit"
		}
		return ""
	})
}

// TestLogSettings: LOG_LEVEL takes the reference's names (warning,
// trace, fatal) and LOG_FORMAT=json writes the reference's field names;
// a level that is not one is refused with one line.
func TestLogSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		level string
		info  bool // the serving line, at level warn, is written
	}{{"warning", true}, {"trace", true}, {"fatal", false}, {"error", false}, {"panic", false}, {"Info", true}} {
		p := startQuiet(t, []string{"LOG_LEVEL=" + tc.level}, "-config", dir)
		if _, err := p.client(t).ShouldRateLimit(t.Context(), request("d", "k", "v")); err != nil {
			t.Errorf("LOG_LEVEL=%s: %v", tc.level, err)
		}
		eventually(t, "the serving line at LOG_LEVEL="+tc.level, func() string {
			if strings.Contains(p.log(), "redlimit-rls serving") != tc.info {
				return p.log()
			}
			return ""
		})
	}
	p := startQuiet(t, []string{"LOG_FORMAT=json"}, "-config", dir)
	first, _, _ := strings.Cut(p.log(), "\n")
	var line map[string]any
	if err := json.Unmarshal([]byte(first), &line); err != nil || line["@message"] == nil || line["@timestamp"] == nil || line["level"] == nil {
		t.Errorf("LOG_FORMAT=json: %q (%v)", first, err)
	}
	if _, err := startRun(t, append(listen, "LOG_LEVEL=loud"), "-config", dir); err == nil || !strings.Contains(err.Error(), "LOG_LEVEL") {
		t.Errorf("LOG_LEVEL=loud: %v", err)
	}
}
