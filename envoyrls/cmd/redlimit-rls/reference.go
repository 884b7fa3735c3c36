package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The reference server's settings (envoyproxy/ratelimit's README and
// src/settings/settings.go), each honoured, refused at start with one
// line that names it and says why, or read and found to change nothing,
// which a line at start says. docs/envoy.md has the table; this is it in
// code. A variable not named here is not one of the reference's.

// refusal is a reference setting redlimit-rls does not serve: refused
// when its value asks for what it does, with why.
type refusal struct {
	name string
	asks func(value string) bool
	why  string
}

// isTrue: a boolean setting switched on.
func isTrue(v string) bool { b, _ := strconv.ParseBool(v); return b }

// any: any value asks for it.
func anyValue(string) bool { return true }

var refusals = []refusal{
	{"USE_STATSD", isTrue, "statsd is not served: redlimit-rls serves Prometheus metrics at /metrics on the HTTP port (and at PROMETHEUS_ADDR with USE_PROMETHEUS=true); set USE_STATSD=false"},
	{"USE_DOG_STATSD", isTrue, "DogStatsD is not served: redlimit-rls serves Prometheus metrics at /metrics; unset it"},
	{"TRACING_ENABLED", isTrue, "OpenTelemetry tracing is not served; unset it"},
	{"REDIS_PERSECOND", isTrue, "a second Redis for per-second limits is not served: one Redis holds every limit; unset it and the REDIS_PERSECOND_* settings"},
	{"BACKEND_TYPE", func(v string) bool { return !strings.EqualFold(v, "redis") }, "only redis is served (memcache is not); unset it or set redis"},
	{"CONFIG_TYPE", func(v string) bool { return v != "FILE" }, "only FILE is served (configuration through xDS, GRPC_XDS_SOTW, is not); unset it or set FILE"},
	{"PROMETHEUS_MAPPER_YAML", anyValue, "it maps the reference's statsd names, which redlimit-rls does not emit: its metrics are redlimit_* (docs/metrics.md); unset it"},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", func(v string) bool { return !strings.EqualFold(v, "WAIT") }, "only WAIT is served, as in the reference (CREATE and ERROR stop it at start too); unset it or set WAIT"},
}

// booleans are the reference's boolean settings: a value
// strconv.ParseBool does not read stops it at start (envconfig), and
// stops redlimit-rls too.
var booleans = []string{
	"DISABLE_STATS", "FORCE_START_WITHOUT_INITIAL_CONFIG", "GRPC_SERVER_USE_TLS", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
	"LIMIT_RESPONSE_HEADERS_ENABLED", "MERGE_DOMAIN_CONFIG", "QUOTA_MODE", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
	"REDIS_PERSECOND", "REDIS_TLS", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "RESPONSE_DYNAMIC_METADATA",
	"RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT", "SHADOW_MODE", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
	"TRACING_ENABLED", "USE_DOG_STATSD", "USE_PROMETHEUS", "USE_STATSD",
}

// checkReference refuses the settings redlimit-rls does not serve, and
// booleans that are not booleans.
func checkReference(e env) error {
	for _, name := range booleans {
		if v, ok := e.lookup(name); ok {
			if _, err := strconv.ParseBool(v); err != nil {
				return fmt.Errorf("%s %q: true or false", name, v)
			}
		}
	}
	for _, r := range refusals {
		if v, ok := e.lookup(r.name); ok && r.asks(v) {
			return fmt.Errorf("%s=%s is refused: %s", r.name, v, r.why)
		}
	}
	return nil
}

// unused are settings read and found to change nothing here: they
// qualify a feature the reference has and redlimit-rls refuses (so it is
// off), or tune what redlimit's engine does its own way. A line at start
// names each one set.
var unused = []struct {
	names []string // a name ending in '_' is a prefix
	why   string
}{
	{[]string{"STATSD_HOST", "STATSD_PORT", "STATS_FLUSH_INTERVAL", "USE_DOG_STATSD_MOGRIFIERS", "DOG_STATSD_MOGRIFIER_"}, "statsd is not served (metrics are at /metrics)"},
	{[]string{"TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE", "TRACING_SERVICE_INSTANCE_ID", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "OTEL_"}, "tracing is not served"},
	{[]string{"MEMCACHE_"}, "memcache is not served (BACKEND_TYPE is redis)"},
	{[]string{"CONFIG_GRPC_XDS_", "XDS_CLIENT_"}, "configuration through xDS is not served (CONFIG_TYPE is FILE)"},
	{[]string{"REDIS_PERSECOND_"}, "only read with REDIS_PERSECOND=true, which is not served"},
	{[]string{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"}, "it shapes the reference's statsd timer names; redlimit's metrics are in seconds"},
	{[]string{"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_CLUSTER_PIPELINE_PARALLELISM"}, "redlimit's engine pipelines concurrent decisions on its own, per Cluster node, with no window to wait"},
	{[]string{"REDIS_POOL_ON_EMPTY_WAIT_DURATION"}, "no longer read by the reference either; a decision's wait is bounded by REDLIMIT_TIMEOUT"},
	{[]string{"EXPIRATION_JITTER_MAX_SECONDS"}, "redlimit's keys expire when their state is spent, with no jitter"},
	{[]string{"NEAR_LIMIT_RATIO"}, "no near_limit statistic is kept (redlimit_decisions_total counts outcomes)"},
	{[]string{"FORCE_START_WITHOUT_INITIAL_CONFIG"}, "the files are read at start either way (with CONFIG_TYPE=FILE the reference reads them at once too)"},
}

// notes returns a line for each set variable of unused, naming it and
// saying why it changes nothing: environ lists the variables set.
func notes(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		for _, u := range unused {
			if slices.ContainsFunc(u.names, func(n string) bool {
				return n == name || (strings.HasSuffix(n, "_") && strings.HasPrefix(name, n))
			}) {
				out = append(out, fmt.Sprintf("%s is read and changes nothing: %s", name, u.why))
			}
		}
	}
	slices.Sort(out)
	return out
}
