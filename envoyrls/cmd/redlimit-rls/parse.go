package main

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// parseServing reads the settings of the listeners, the logs, health and
// the answers: gRPC over a Unix socket and with TLS, connection ages,
// the log format, the rate-limit fields of the reference, quota mode and
// dynamic metadata.
func parseServing(s *settings, e env) error {
	s.grpcUDS = e.get("GRPC_UDS")
	var err error
	if s.maxConnAge, err = envDuration(e, "GRPC_MAX_CONNECTION_AGE", 24*time.Hour); err != nil {
		return err
	}
	if s.maxConnAgeGrace, err = envDuration(e, "GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour); err != nil {
		return err
	}
	s.grpcTLS = tlsFiles{on: envBool(e, "GRPC_SERVER_USE_TLS"), cert: e.get("GRPC_SERVER_TLS_CERT"), key: e.get("GRPC_SERVER_TLS_KEY"),
		ca: e.get("GRPC_CLIENT_TLS_CACERT"), san: e.get("GRPC_CLIENT_TLS_SAN")}
	if s.grpcTLS.on && (s.grpcTLS.cert == "" || s.grpcTLS.key == "") {
		return errors.New("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY: the files of the server's certificate chain and key")
	}
	switch f := strings.ToLower(e.or("LOG_FORMAT", "text")); f {
	case "json":
		s.logJSON = true
	case "text":
	default: // the reference writes text for any other value
	}
	s.ignoreDotFiles = envBool(e, "RUNTIME_IGNOREDOTFILES")
	s.requireConfig = envBool(e, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")
	s.quota = envBool(e, "QUOTA_MODE")
	s.dynamicMetadata = envBool(e, "RESPONSE_DYNAMIC_METADATA")
	if envBool(e, "LIMIT_RESPONSE_HEADERS_ENABLED") {
		s.headerNames = [3]string{e.or("LIMIT_LIMIT_HEADER", "RateLimit-Limit"), e.or("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"), e.or("LIMIT_RESET_HEADER", "RateLimit-Reset")}
	}
	return nil
}

// parseCounting reads the deny cache's size: LOCAL_CACHE_SIZE_IN_BYTES,
// the reference's cache of keys over their limit, is redlimit's deny
// cache, about 450 bytes an entry; 0 turns it off.
func parseCounting(s *settings, e env) error {
	n, err := envInt(e, "LOCAL_CACHE_SIZE_IN_BYTES", -1)
	switch {
	case err != nil:
		return err
	case n == 0:
		s.denyCacheKeys = 0
	case n > 0:
		s.denyCacheKeys = max(1, n/450)
	}
	return nil
}

// parseMetrics reads where statistics are served: DISABLE_STATS keeps
// none, USE_PROMETHEUS serves /metrics on a listener of its own too, and
// EXTRA_TAGS labels every metric.
func parseMetrics(s *settings, e env) error {
	s.metrics.disabled = envBool(e, "DISABLE_STATS")
	if envBool(e, "USE_PROMETHEUS") && !s.metrics.disabled {
		s.metrics.promAddr = e.or("PROMETHEUS_ADDR", ":9090")
		s.metrics.promPath = e.or("PROMETHEUS_PATH", "/metrics")
	}
	if tags := e.get("EXTRA_TAGS"); tags != "" {
		s.metrics.extraLabel = map[string]string{}
		for _, kv := range strings.Split(tags, ",") {
			k, v, ok := strings.Cut(kv, ":")
			if !ok || k == "" {
				return fmt.Errorf("EXTRA_TAGS %q: name:value pairs, comma-separated", tags)
			}
			s.metrics.extraLabel[k] = v
		}
	}
	return nil
}
