package envoyrls_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/envoyrls"
)

// TestWatchConfig: a change on disk is picked up without a restart and
// the counts stay; a bad file keeps the configuration in use.
func TestWatchConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(doc string) {
		t.Helper()
		// Write then rename, as a deploy does: never a half-written file.
		tmp := filepath.Join(dir, ".limits.yaml.tmp")
		if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "limits.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	const v1 = "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"
	write(v1)
	clk := newClock()
	var logs syncBuffer
	srv := newServer(t, clk.limiter(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})), dir, envoyrls.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	c := serve(t, srv)
	done := make(chan error, 1)
	go func() { done <- srv.WatchConfig(t.Context(), dir, envoyrls.ConfigOptions{}, 10*time.Millisecond) }()
	want(t, "3 an hour", overall(t, c, 3, "d", desc("user", "u")), "OK OK OK")

	// waitNew waits until the Server's config is no longer old, or 5 s.
	waitNew := func(old *envoyrls.Config) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for srv.Config() == old && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if srv.Config() == old {
			t.Fatal("the change was not picked up in 5 s")
		}
	}
	old := srv.Config()
	write(strings.Replace(v1, "requests_per_unit: 3", "requests_per_unit: 5", 1))
	waitNew(old)
	want(t, "5 an hour, 3 already counted", overall(t, c, 3, "d", desc("user", "u")), "OK OK OVER_LIMIT")

	// A bad file: logged, the old config stays.
	old = srv.Config()
	write("domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 100}\n")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "config not reloaded") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), `invalid unit \"fortnight\"`) || srv.Config() != old {
		t.Fatalf("a bad file: config replaced %v, log %s", srv.Config() != old, logs.String())
	}
	want(t, "still 5 an hour", overall(t, c, 1, "d", desc("user", "u")), "OVER_LIMIT")

	// Fixed again.
	write(strings.Replace(v1, "requests_per_unit: 3", "requests_per_unit: 7", 1))
	waitNew(old)
	want(t, "7 an hour", overall(t, c, 3, "d", desc("user", "u")), "OK OK OVER_LIMIT")
	t.Cleanup(func() {
		if err := <-done; err == nil {
			t.Error("WatchConfig returned nil")
		}
	})
}

// syncBuffer is a buffer the logger writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestJSON: the reference server's /json endpoint, and /healthcheck.
func TestJSON(t *testing.T) {
	t.Parallel()
	srv := newServer(t, newClock().limiter(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})), "testdata/reference", envoyrls.Options{})
	h := httptest.NewServer(srv.JSONHandler())
	defer h.Close()
	post := func(body string) (int, map[string]any) {
		resp, err := http.Post(h.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var m map[string]any
		_ = json.Unmarshal(data, &m)
		return resp.StatusCode, m
	}
	const req = `{"domain": "edge_proxy_per_ip", "descriptors": [{"entries": [{"key": "remote_address", "value": "50.0.0.5"}]}]}`
	code, m := post(req)
	if code != http.StatusTooManyRequests || m["overallCode"] != rlsv3.RateLimitResponse_OVER_LIMIT.String() {
		t.Errorf("blocked address: %d %v", code, m)
	}
	code, m = post(strings.Replace(req, "50.0.0.5", "50.0.0.1", 1))
	if code != http.StatusOK || m["overallCode"] != "OK" {
		t.Errorf("an address: %d %v", code, m)
	}
	if code, _ := post(`{"domain": 1}`); code != http.StatusBadRequest {
		t.Errorf("not a request: %d", code)
	}
	if code, _ := post(`{"domain": "x"}`); code != http.StatusBadRequest {
		t.Errorf("no descriptors: %d", code)
	}

	health := httptest.NewServer(srv.HealthHandler())
	defer health.Close()
	get := func() int {
		resp, err := http.Get(health.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get(); got != http.StatusOK {
		t.Errorf("healthy: %d", got)
	}
	srv.SetHealthy(false)
	if got := get(); got != http.StatusInternalServerError {
		t.Errorf("shutting down: %d", got)
	}
}
