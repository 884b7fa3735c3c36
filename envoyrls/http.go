package envoyrls

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds the body of a /json request.
const maxJSONBody = 1 << 20

// JSONHandler returns the handler of the reference server's /json
// endpoint: a POST of a RateLimitRequest in protobuf's JSON form
// ({"domain": "d", "descriptors": [{"entries": [{"key": "k", "value":
// "v"}]}]}) is answered with the RateLimitResponse in the same form,
// with status 200, 429 when it is OVER_LIMIT, 400 for a request that
// cannot be read or decided, 503 when the decision failed under
// FailClosed or no configuration is loaded (with Options.Reference, 400
// for every error, as the reference server answers).
func (s *Server) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a RateLimitRequest as JSON", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "envoyrls: not a RateLimitRequest: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		switch {
		case err != nil && s.opts.Reference: // the reference's answer to every error
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
			return
		case err != nil:
			code := http.StatusBadRequest
			if st, ok := status.FromError(err); ok && st.Code() != codes.InvalidArgument {
				code = http.StatusServiceUnavailable
			}
			http.Error(w, err.Error(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
}

// HealthHandler returns the handler of /healthcheck: 200 "OK" while the
// Server is healthy, 500 once SetHealthy(false) said it is not (a
// program shutting down says so first, so that load balancers stop
// sending it requests).
func (s *Server) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !s.healthy.Load() {
			http.Error(w, "shutting down", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "OK")
	})
}

// SetHealthy sets what HealthHandler answers; a new Server is healthy.
func (s *Server) SetHealthy(ok bool) { s.healthy.Store(ok) }

// WatchConfig reloads the configuration from dir (as LoadConfig reads
// it) whenever its files change (a name, a size, a modification time or
// where a symbolic link points) from those the configuration in use was
// loaded from (by LoadConfig; else from those when WatchConfig starts;
// with none in use, it loads at once), checking every interval (at least
// 10 ms; 0 means 1 s), until ctx ends; it returns ctx's error. A change
// that does not load is logged and the configuration in use stays, until
// the files change again. State is kept as SetConfig keeps it.
// Run it in a goroutine of its own.
func (s *Server) WatchConfig(ctx context.Context, dir string, opts ConfigOptions, interval time.Duration) error {
	if interval == 0 {
		interval = time.Second
	}
	interval = max(interval, 10*time.Millisecond)
	// The files' version the configuration in use was read from; none
	// (or one not read from files) is tried on the first tick.
	var last uint64
	if c := s.config.Load(); c != nil {
		last = c.version
		if last == 0 {
			last, _ = fingerprint(dir, opts)
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		fp, err := fingerprint(dir, opts)
		if err != nil || fp == last {
			continue
		}
		last = fp
		c, err := LoadConfig(dir, opts)
		if err != nil {
			s.log.Error("envoyrls: config not reloaded, the old one stays", "dir", dir, "err", err)
			continue
		}
		s.SetConfig(c)
		s.log.Info("envoyrls: config reloaded", "dir", dir, "domains", strings.Join(c.Domains(), ","), "rules", c.Rules())
	}
}

// fingerprint hashes the paths, sizes and modification times of dir's
// configuration files, and where each symbolic link among them points: a
// change of any (a Kubernetes ConfigMap's ..data link swapped to a new
// directory included) is a change of the configuration.
func fingerprint(dir string, opts ConfigOptions) (uint64, error) {
	paths, err := configFiles(dir, opts)
	if err != nil {
		return 0, err
	}
	h := fnv.New64a()
	for _, path := range paths {
		info, err := os.Stat(path)
		if err != nil {
			return 0, err
		}
		target, _ := filepath.EvalSymlinks(path)
		fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00", path, target, info.Size(), info.ModTime().UnixNano())
	}
	return h.Sum64(), nil
}
