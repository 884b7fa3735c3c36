package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestCorpusOracle asks the reference server itself every case of the
// corpus, to check the answers written down: set REDLIMIT_REFERENCE_BIN
// to a build of envoyproxy/ratelimit (go build ./src/service_cmd in its
// source). It runs on the wall clock, so durations and the reset field
// are not compared, "at: +D" waits D and "at: HH:MM:SS" is not followed
// (the cases after one must not depend on it); a block starts early in
// a minute, so that a minute's cases share its window.
func TestCorpusOracle(t *testing.T) {
	bin := os.Getenv("REDLIMIT_REFERENCE_BIN")
	if bin == "" {
		t.Skip("REDLIMIT_REFERENCE_BIN is not set: the corpus is checked against redlimit-rls only (TestCorpus)")
	}
	abs, err := filepath.Abs(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	agree, total, skipped := 0, 0, 0
	for _, b := range loadCorpus(t) {
		if strings.Contains(b.file, "oracle-skip") {
			continue
		}
		results := askReference(t, bin, abs, b)
		for _, st := range b.steps {
			if st.req != nil {
				skipped++
			}
		}
		skipped -= len(results)
		for _, r := range results {
			total++
			if relax(r.got) == relax(r.step.want) {
				agree++
				continue
			}
			t.Errorf("%s (%s): the reference answers\n got %s\nwant %s", r.step.id, r.step.source, r.got, r.step.want)
		}
	}
	t.Logf("the reference agrees with %d of %d cases asked (%d after a move of the clock not asked)", agree, total, skipped)
}

var resetValue = regexp.MustCompile(`(reset=|Reset=)\d+`)

// relax hides what depends on the wall clock.
func relax(s string) string { return resetValue.ReplaceAllString(s, "${1}*") }

// askReference starts the reference server on the block's configuration
// and settings and a fresh redis-server, and asks it the block's cases.
func askReference(t *testing.T, bin, corpus string, b corpusBlock) []corpusResult {
	t.Helper()
	srv := redistest.Standalone(t)
	grpcAddr, httpAddr, debugAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+srv.Addr, "RUNTIME_ROOT="+corpus, "RUNTIME_SUBDIRECTORY="+b.config,
		"RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false", "USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=error",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+port(grpcAddr), "HOST=127.0.0.1", "PORT="+port(httpAddr), "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+port(debugAddr))
	cmd.Env = append(cmd.Env, b.env...)
	log := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := rlsv3.NewRateLimitServiceClient(cc)
	waitForListener(t, grpcAddr, log)
	if s := time.Now().Second(); s > 45 { // the block's minute windows: one
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond))) // and its first second's
	var out []corpusResult
	for _, st := range b.steps {
		if st.at != "" && !strings.HasPrefix(st.at, "+") {
			break
		}
		if d, ok := strings.CutPrefix(st.at, "+"); ok {
			dur, _ := time.ParseDuration(d)
			time.Sleep(dur)
		}
		if st.req == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.ShouldRateLimit(ctx, st.req)
		cancel()
		got := answerString(resp, err, st.want)
		out = append(out, corpusResult{step: st, got: got})
	}
	return out
}

// waitForListener waits (at most 60 s) until addr accepts connections.
func waitForListener(t *testing.T, addr string, log *strings.Builder) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			time.Sleep(200 * time.Millisecond) // its configuration is loaded before it listens; settle
			return
		}
	}
	t.Fatalf("the reference server does not listen on %s:\n%s", addr, log.String())
}
