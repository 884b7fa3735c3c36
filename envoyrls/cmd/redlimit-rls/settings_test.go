package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/connectivity"
)

// settingCase is redlimit-rls started with one of the reference's
// settings: refused (at start, one line naming it), unused (it starts,
// and a line says the setting changes nothing), or honoured (it starts
// and check sees the setting's effect; parsed checks what it was read
// as, for effects that need more than one process, with the test that
// shows them named).
type settingCase struct {
	name, value string
	want        string // "refused", "unused" or "honoured"
	check       func(t *testing.T, sc *settingRun)
	parsed      func(s settings) bool
	shownBy     string   // the test that shows the effect parsed stands for
	extra       []string // more settings the case needs
}

// settingRun is one started program and what its case may need.
type settingRun struct {
	p      *inProcess
	dir    string // its configuration directory
	redis  *miniredis.Miniredis
	env    []string
	values map[string]string
}

// settingsConfig is the configuration every case loads: two limits, a
// metadata block, one domain in two files.
var settingsConfig = map[string]string{
	"a.yaml": `domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {owner: team-a}
  - key: wide
    rate_limit: {unit: minute, requests_per_unit: 100}
`,
	"sub/b.conf":   "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
	".hidden.yaml": "domain: hidden\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
}

// TestReferenceSettings starts redlimit-rls with each of the reference
// server's settings (testdata/reference-settings.txt lists them) and
// checks that it is honoured, refused with one line that names it, or
// said in one line to change nothing.
func TestReferenceSettings(t *testing.T) {
	t.Parallel()
	cases := settingCases(t)
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.name] = true
	}
	isCovered := func(name string) bool {
		for c := range covered {
			if c == name || (strings.HasSuffix(c, "_") && strings.HasPrefix(name, c)) {
				return true
			}
		}
		return false
	}
	for _, name := range referenceSettingNames(t) {
		if !isCovered(name) {
			t.Errorf("%s: no case: honour it, refuse it, or say why it changes nothing", name)
		}
	}
	for _, c := range cases {
		t.Run(c.name+"="+c.value, func(t *testing.T) { runSettingCase(t, c) })
	}
}

// referenceSettingNames reads testdata/reference-settings.txt.
func referenceSettingNames(t *testing.T) []string {
	f, err := os.Open("testdata/reference-settings.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			names = append(names, line)
		}
	}
	if len(names) < 100 {
		t.Fatalf("%d names", len(names))
	}
	return names
}

func runSettingCase(t *testing.T, c settingCase) {
	sr := &settingRun{dir: t.TempDir(), redis: miniredis.RunT(t), values: map[string]string{}}
	writeConfig(t, sr.dir, settingsConfig)
	name := strings.TrimSuffix(c.name, "_")
	if name != c.name {
		name += "_EXAMPLE"
	}
	sr.env = append([]string{"REDIS_URL=" + sr.redis.Addr(), "REDIS_SOCKET_TYPE=tcp", "MERGE_DOMAIN_CONFIG=true", "REDLIMIT_RELOAD=20ms"}, c.extra...)
	sr.env = append(sr.env, name+"="+strings.ReplaceAll(c.value, "$REDIS", sr.redis.Addr()))
	for _, kv := range listen {
		if k, _, _ := strings.Cut(kv, "="); k != name {
			sr.env = append(sr.env, kv)
		}
	}
	if c.parsed != nil {
		s, err := parse(nil, envOf(sr.env), io.Discard)
		if err != nil || !c.parsed(s) {
			t.Errorf("read as %+v (%v); its effect is shown by %s", s, err, c.shownBy)
		}
		return
	}
	p, err := startRun(t, sr.env, "-config", sr.dir)
	sr.p = p
	switch c.want {
	case "refused":
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), name) {
			t.Errorf("want one line refusing %s, got %v", name, err)
		}
		return
	case "unused":
		if err != nil || !strings.Contains(p.log(), name+" is read and changes nothing: ") {
			t.Errorf("want a line saying %s changes nothing (%v):\n%s", name, err, p.log())
		}
		return
	}
	if err != nil {
		t.Fatalf("run: %v\n%s", err, p.log())
	}
	c.check(t, sr)
}

// ask sends one request of descriptors (each key=value pairs) and
// returns the answer.
func (sr *settingRun) ask(t *testing.T, domain string, descriptors ...[]string) *rlsv3.RateLimitResponse {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, kv := range descriptors {
		req.Descriptors = append(req.Descriptors, request(domain, kv...).GetDescriptors()[0])
	}
	r, err := sr.p.client(t).ShouldRateLimit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// answerText is an answer's overall code and statuses' codes and remaining.
func answerText(r *rlsv3.RateLimitResponse) string {
	s := r.GetOverallCode().String()
	for _, st := range r.GetStatuses() {
		s += fmt.Sprintf(" %s/%d", st.GetCode(), st.GetLimitRemaining())
	}
	return s
}

func wantEq(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %q, want %q", what, got, want)
	}
}

// httpGet is get on an address of the program, or "" for none.
func httpGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	if addr == "" {
		t.Fatal("no such listener")
	}
	return get(t, addr, path)
}

// unusedCases are the settings that qualify what is not served.
func unusedCases() []settingCase {
	var out []settingCase
	for _, u := range unused {
		for _, name := range u.names {
			value := "1"
			if name == "FORCE_START_WITHOUT_INITIAL_CONFIG" || name == "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS" {
				value = "true"
			}
			out = append(out, settingCase{name: name, value: value, want: "unused"})
		}
	}
	return out
}

// refusedCases are the settings that ask for what is not served.
func refusedCases() []settingCase {
	return []settingCase{
		{name: "USE_STATSD", value: "true", want: "refused"},
		{name: "USE_DOG_STATSD", value: "true", want: "refused"},
		{name: "TRACING_ENABLED", value: "true", want: "refused"},
		{name: "REDIS_PERSECOND", value: "true", want: "refused"},
		{name: "BACKEND_TYPE", value: "memcache", want: "refused"},
		{name: "CONFIG_TYPE", value: "GRPC_XDS_SOTW", want: "refused"},
		{name: "PROMETHEUS_MAPPER_YAML", value: "/etc/mapper.yaml", want: "refused"},
		{name: "REDIS_POOL_ON_EMPTY_BEHAVIOR", value: "CREATE", want: "refused"},
		{name: "REDIS_POOL_ON_EMPTY_BEHAVIOR", value: "ERROR", want: "refused"},
		{name: "SHADOW_MODE", value: "sometimes", want: "refused"}, // not a boolean, as envconfig refuses it
	}
}

// settingCases is every case.
func settingCases(t *testing.T) []settingCase {
	cases := append(unusedCases(), refusedCases()...)
	cases = append(cases, listenerCases(t)...)
	cases = append(cases, answerCases()...)
	cases = append(cases, configCases()...)
	cases = append(cases, redisCases()...)
	return append(cases, metricsCases()...)
}

// listenerCases: where it listens, TLS, logs.
func listenerCases(t *testing.T) []settingCase {
	sock := filepath.Join(t.TempDir(), "rls.sock")
	port := func(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }
	httpPort, grpcPort, debugPort := port(freeAddr(t)), port(freeAddr(t)), port(freeAddr(t))
	answers := func(t *testing.T, sr *settingRun) {
		wantEq(t, "answer", answerText(sr.ask(t, "d", []string{"k", "v"})), "OK OK/0")
	}
	return []settingCase{
		{name: "HOST", value: "127.0.0.1", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			wantEq(t, "http", strings.Split(sr.p.httpAddr, ":")[0], "127.0.0.1")
		}},
		{name: "PORT", value: httpPort, want: "honoured", check: func(t *testing.T, sr *settingRun) { wantEq(t, "http", port(sr.p.httpAddr), httpPort) }},
		{name: "GRPC_HOST", value: "127.0.0.1", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			wantEq(t, "grpc", strings.Split(sr.p.grpcAddr, ":")[0], "127.0.0.1")
		}},
		{name: "GRPC_PORT", value: grpcPort, want: "honoured", check: func(t *testing.T, sr *settingRun) { wantEq(t, "grpc", port(sr.p.grpcAddr), grpcPort); answers(t, sr) }},
		{name: "GRPC_UDS", value: sock, want: "honoured", check: func(t *testing.T, sr *settingRun) { wantEq(t, "grpc", sr.p.grpcAddr, sock); answers(t, sr) }},
		{name: "DEBUG_HOST", value: "127.0.0.1", want: "honoured", check: checkDebug},
		{name: "DEBUG_PORT", value: debugPort, want: "honoured", check: checkDebug},
		{name: "GRPC_MAX_CONNECTION_AGE", value: "300ms", want: "honoured", check: checkConnectionAge},
		{name: "GRPC_MAX_CONNECTION_AGE_GRACE", value: "5m", want: "honoured", parsed: func(s settings) bool { return s.maxConnAgeGrace == 5*time.Minute }, shownBy: "grpc.KeepaliveParams"},
		{name: "GRPC_SERVER_USE_TLS", value: "true", want: "refused"}, // without its files; with them, TestGRPCServerTLS
		{name: "GRPC_SERVER_TLS_CERT", value: "/c.pem", parsed: func(s settings) bool { return s.grpcTLS.cert == "/c.pem" }, shownBy: "TestGRPCServerTLS"},
		{name: "GRPC_SERVER_TLS_KEY", value: "/k.pem", parsed: func(s settings) bool { return s.grpcTLS.key == "/k.pem" }, shownBy: "TestGRPCServerTLS"},
		{name: "GRPC_CLIENT_TLS_CACERT", value: "/ca.pem", parsed: func(s settings) bool { return s.grpcTLS.ca == "/ca.pem" }, shownBy: "TestGRPCServerTLS"},
		{name: "GRPC_CLIENT_TLS_SAN", value: "envoy", parsed: func(s settings) bool { return s.grpcTLS.san == "envoy" }, shownBy: "TestGRPCServerTLS"},
		{name: "LOG_LEVEL", value: "warning", parsed: func(s settings) bool { return s.level == "warning" }, shownBy: "TestLogSettings"},
		{name: "LOG_FORMAT", value: "json", parsed: func(s settings) bool { return s.logJSON }, shownBy: "TestLogSettings"},
	}
}

func checkDebug(t *testing.T, sr *settingRun) {
	code, body := httpGet(t, sr.p.debugAddr, "/rlconfig")
	if code != 200 || !strings.Contains(body, "d.k: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: false") {
		t.Errorf("/rlconfig: %d %q", code, body)
	}
	if code, _ := httpGet(t, sr.p.debugAddr, "/debug/pprof/"); code != 200 {
		t.Errorf("/debug/pprof/: %d", code)
	}
	if code, body := httpGet(t, sr.p.debugAddr, "/stats"); code != 200 || !strings.Contains(body, "memstats: ") {
		t.Errorf("/stats: %d", code)
	}
}

// checkConnectionAge: a connection is closed (GOAWAY) once it is older
// than GRPC_MAX_CONNECTION_AGE.
func checkConnectionAge(t *testing.T, sr *settingRun) {
	cc := grpcConn(t, sr.p)
	c := rlsv3.NewRateLimitServiceClient(cc)
	if _, err := c.ShouldRateLimit(t.Context(), request("d", "k", "v")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if !cc.WaitForStateChange(ctx, connectivity.Ready) {
		t.Error("the connection was not closed within 10 s")
	}
}

// answerCases: what the answers say.
func answerCases() []settingCase {
	over := func(t *testing.T, sr *settingRun) *rlsv3.RateLimitResponse {
		sr.ask(t, "d", []string{"k", "v"})
		return sr.ask(t, "d", []string{"k", "v"}, []string{"wide", "v"})
	}
	return []settingCase{
		{name: "SHADOW_MODE", value: "true", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			wantEq(t, "shadow", answerText(over(t, sr)), "OK OVER_LIMIT/0 OK/99")
		}},
		{name: "QUOTA_MODE", value: "true", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			wantEq(t, "quota", answerText(over(t, sr)), "OK OVER_LIMIT/0 OK/99")
		}},
		{name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", value: "false", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			wantEq(t, "charged", answerText(over(t, sr)), "OVER_LIMIT OVER_LIMIT/0 OK/99")
			wantEq(t, "then", answerText(sr.ask(t, "d", []string{"wide", "v"})), "OK OK/98")
		}},
		{name: "RESPONSE_DYNAMIC_METADATA", value: "true", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			md := sr.ask(t, "d", []string{"k", "v"}).GetDynamicMetadata().GetFields()
			wantEq(t, "metadata", md["metadata"].GetStructValue().GetFields()["owner"].GetStringValue()+" "+md["domain"].GetStringValue(), "team-a d")
		}},
		{name: "LIMIT_RESPONSE_HEADERS_ENABLED", value: "true", want: "honoured", check: headerCheck("ratelimit-limit,ratelimit-remaining,ratelimit-reset")},
		{name: "LIMIT_LIMIT_HEADER", value: "X-Limit", want: "honoured", extra: []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true"}, check: headerCheck("x-limit,ratelimit-remaining,ratelimit-reset")},
		{name: "LIMIT_REMAINING_HEADER", value: "X-Left", want: "honoured", extra: []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true"}, check: headerCheck("ratelimit-limit,x-left,ratelimit-reset")},
		{name: "LIMIT_RESET_HEADER", value: "X-Reset", want: "honoured", extra: []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true"}, check: headerCheck("ratelimit-limit,ratelimit-remaining,x-reset")},
		{name: "LIMIT_RESPONSE_HEADERS_ENABLED", value: "true", want: "honoured", extra: []string{"REDLIMIT_COMPAT=reference"}, check: headerCheck("RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset")},
		{name: "LOCAL_CACHE_SIZE_IN_BYTES", value: "0", want: "honoured", parsed: func(s settings) bool { return s.denyCacheKeys == 0 }, shownBy: "core.WithDenyCache"},
		{name: "CACHE_KEY_PREFIX", value: "rl-test:", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			sr.ask(t, "d", []string{"k", "v"})
			keys := sr.redis.Keys()
			if len(keys) == 0 || !strings.HasPrefix(keys[0], "rl-test:") {
				t.Errorf("keys %v", keys)
			}
		}},
	}
}

// headerCheck: with LIMIT_RESPONSE_HEADERS_ENABLED the rate-limit
// fields have the reference's names, or those given: want, in order.
func headerCheck(want string) func(t *testing.T, sr *settingRun) {
	return func(t *testing.T, sr *settingRun) {
		var keys []string
		for _, h := range sr.ask(t, "d", []string{"wide", "v"}).GetResponseHeadersToAdd() {
			keys = append(keys, h.GetKey())
		}
		wantEq(t, "fields", strings.Join(keys, ","), want)
	}
}

// configCases: where the configuration is read from, and how.
func configCases() []settingCase {
	loads := func(domains string) func(t *testing.T, sr *settingRun) {
		return func(t *testing.T, sr *settingRun) {
			if !strings.Contains(sr.p.log(), "domains="+domains+" ") {
				t.Errorf("want domains=%s:\n%s", domains, sr.p.log())
			}
		}
	}
	return []settingCase{
		{name: "CONFIG_TYPE", value: "FILE", want: "honoured", check: loads("d,e,hidden")},
		{name: "BACKEND_TYPE", value: "redis", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			sr.ask(t, "d", []string{"k", "v"})
			if len(sr.redis.Keys()) == 0 {
				t.Error("nothing in Redis")
			}
		}},
		{name: "MERGE_DOMAIN_CONFIG", value: "true", want: "honoured", extra: []string{"RUNTIME_IGNOREDOTFILES=true"}, check: func(t *testing.T, sr *settingRun) {
			writeConfig(t, sr.dir, map[string]string{"sub/c.yaml": "domain: d\ndescriptors:\n  - key: merged\n    rate_limit: {unit: minute, requests_per_unit: 9}\n"})
			eventually(t, "a second file of domain d", func() string {
				if got := answerText(sr.ask(t, "d", []string{"merged", "v"})); got != "OK OK/8" {
					return got
				}
				return ""
			})
		}},
		{name: "RUNTIME_IGNOREDOTFILES", value: "true", want: "honoured", check: loads("d,e")},
		{name: "RUNTIME_ROOT", value: "/srv", want: "honoured", parsed: func(s settings) bool { return s.config == "/srv/config" }, shownBy: "TestConfigMapSwap"},
		{name: "RUNTIME_SUBDIRECTORY", value: "rl", want: "honoured", extra: []string{"RUNTIME_ROOT=/srv"}, parsed: func(s settings) bool { return s.config == "/srv/rl/config" }, shownBy: "TestConfigMapSwap"},
		{name: "RUNTIME_APPDIRECTORY", value: "limits", want: "honoured", extra: []string{"RUNTIME_ROOT=/srv"}, parsed: func(s settings) bool { return s.config == "/srv/limits" }, shownBy: "TestConfigMapSwap"},
		{name: "RUNTIME_WATCH_ROOT", value: "false", want: "honoured", check: loads("d,e,hidden")}, // reloads either way: TestConfigMapSwap
		{name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", value: "true", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			if code, _ := httpGet(t, sr.p.httpAddr, "/healthcheck"); code != 200 {
				t.Errorf("domains loaded, /healthcheck %d", code)
			}
		}}, // and with none: TestHealthWithConfig
	}
}

// redisCases: the Redis client.
func redisCases() []settingCase {
	redisParsed := func(f func(r redisSettings) bool) func(s settings) bool {
		return func(s settings) bool { return f(s.redisOpts) }
	}
	return []settingCase{
		{name: "REDIS_URL", value: "$REDIS", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			sr.ask(t, "d", []string{"k", "v"})
			if len(sr.redis.Keys()) == 0 {
				t.Error("nothing in the Redis of REDIS_URL")
			}
		}},
		{name: "REDIS_SOCKET_TYPE", value: "unix", want: "honoured", parsed: redisParsed(func(r redisSettings) bool { return r.network == "unix" }), shownBy: "TestRedisKinds"},
		{name: "REDIS_TYPE", value: "cluster", want: "honoured", parsed: redisParsed(func(r redisSettings) bool { return r.kind == "CLUSTER" }), shownBy: "TestRedisKinds"},
		{name: "REDIS_POOL_SIZE", value: "64", want: "honoured", parsed: redisParsed(func(r redisSettings) bool { return r.poolSize == 64 }), shownBy: "TestUniversalOptions"},
		{name: "REDIS_AUTH", value: "user:secret", want: "honoured", parsed: redisParsed(func(r redisSettings) bool { return r.user == "user" && r.password == "secret" }), shownBy: "TestRedisACLUser"},
		{name: "REDIS_SENTINEL_AUTH", value: "sentinel:secret", want: "honoured", parsed: redisParsed(func(r redisSettings) bool { return r.sentinelUser == "sentinel" && r.sentinelPassword == "secret" }), shownBy: "TestUniversalOptions"},
		{name: "REDIS_TLS", value: "true", want: "honoured", parsed: redisParsed(func(r redisSettings) bool { return r.tlsConfig != nil }), shownBy: "TestRedisTLS"},
		{name: "REDIS_TLS_CACERT", value: "/ca.pem", want: "honoured", parsed: redisParsed(func(r redisSettings) bool { return r.tls.ca == "/ca.pem" }), shownBy: "TestRedisTLS"},
		{name: "REDIS_TLS_CLIENT_CERT", value: "/c.pem", want: "honoured", parsed: redisParsed(func(r redisSettings) bool { return r.tls.cert == "/c.pem" }), shownBy: "TestRedisTLS"},
		{name: "REDIS_TLS_CLIENT_KEY", value: "/k.pem", want: "honoured", parsed: redisParsed(func(r redisSettings) bool { return r.tls.key == "/k.pem" }), shownBy: "TestRedisTLS"},
		{name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", value: "true", want: "honoured", parsed: redisParsed(func(r redisSettings) bool { return r.tls.skipHostVerification }), shownBy: "TestRedisTLS"},
		{name: "REDIS_TIMEOUT", value: "2s", want: "honoured", parsed: redisParsed(func(r redisSettings) bool { return r.timeout == 2*time.Second }), shownBy: "TestUniversalOptions"},
		{name: "REDIS_POOL_ON_EMPTY_BEHAVIOR", value: "WAIT", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			wantEq(t, "answer", answerText(sr.ask(t, "d", []string{"k", "v"})), "OK OK/0")
		}},
		{name: "REDIS_STARTUP_INITIAL_INTERVAL", value: "10ms", want: "honoured", parsed: redisParsed(func(r redisSettings) bool { return r.startFirst == 10*time.Millisecond }), shownBy: "TestRedisACLUser"},
		{name: "REDIS_STARTUP_MAX_INTERVAL", value: "1s", want: "honoured", parsed: redisParsed(func(r redisSettings) bool { return r.startMax == time.Second }), shownBy: "waitForRedis"},
		{name: "REDIS_STARTUP_MAX_ELAPSED_TIME", value: "300ms", want: "honoured", parsed: redisParsed(func(r redisSettings) bool { return r.startGiveUp == 300*time.Millisecond }), shownBy: "TestRedisACLUser"},
		{name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", value: "true", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			if code, _ := httpGet(t, sr.p.httpAddr, "/healthcheck"); code != 200 {
				t.Errorf("Redis up: /healthcheck %d", code)
			}
			sr.redis.Close()
			eventually(t, "Redis gone", func() string {
				if code, _ := httpGet(t, sr.p.httpAddr, "/healthcheck"); code != 500 {
					return fmt.Sprint("/healthcheck ", code)
				}
				return ""
			})
		}},
	}
}

// metricsCases: where statistics are served.
func metricsCases() []settingCase {
	promAt := func(path string) func(t *testing.T, sr *settingRun) {
		return func(t *testing.T, sr *settingRun) {
			if code, body := httpGet(t, sr.p.promAddr, path); code != 200 || !strings.Contains(body, "go_goroutines") {
				t.Errorf("%s: %d", path, code)
			}
		}
	}
	return []settingCase{
		{name: "USE_STATSD", value: "false", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			if code, _ := httpGet(t, sr.p.httpAddr, "/metrics"); code != 200 {
				t.Errorf("/metrics %d", code)
			}
		}},
		{name: "DISABLE_STATS", value: "true", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			if code, _ := httpGet(t, sr.p.httpAddr, "/metrics"); code != 404 {
				t.Errorf("/metrics %d, want none", code)
			}
		}},
		{name: "USE_PROMETHEUS", value: "true", want: "honoured", extra: []string{"PROMETHEUS_ADDR=127.0.0.1:0"}, check: promAt("/metrics")},
		{name: "PROMETHEUS_ADDR", value: "127.0.0.1:0", want: "honoured", extra: []string{"USE_PROMETHEUS=true"}, check: promAt("/metrics")},
		{name: "PROMETHEUS_PATH", value: "/stats/prom", want: "honoured", extra: []string{"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0"}, check: promAt("/stats/prom")},
		{name: "EXTRA_TAGS", value: "cluster:eu,team:edge", want: "honoured", check: func(t *testing.T, sr *settingRun) {
			sr.ask(t, "d", []string{"k", "v"})
			if _, body := httpGet(t, sr.p.httpAddr, "/metrics"); !strings.Contains(body, `cluster="eu"`) || !strings.Contains(body, `team="edge"`) {
				t.Errorf("no EXTRA_TAGS labels:\n%.2000s", body)
			}
		}},
	}
}
